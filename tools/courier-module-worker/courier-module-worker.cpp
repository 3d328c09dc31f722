// courier-module-worker: one module version's worker process, started by the engine with its
// channel on descriptor 3 (jit/ModuleWorker.h). Not meant to be run by hand.
#include "jit/ModuleWorker.h"

#include <cstdio>

int main(int argc, char **argv) {
  // What kernels print (vector.print, printMemrefF32) reaches the log a line at a time, not
  // when a buffer fills or the worker ends.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return courier::runModuleWorker(argc, argv);
}
