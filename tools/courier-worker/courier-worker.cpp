// courier-worker: one session's worker process, started by courier-executor with its channel
// on descriptor 3 (executor/Worker.h). Not meant to be run by hand.
#include "executor/Worker.h"

#include <cstdio>

int main(int argc, char **argv) {
  // What kernels print (vector.print, printMemrefF32) reaches the log a line at a time, not
  // when a buffer fills or the worker ends.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return courier::executor::runWorker(argc, argv);
}
