// courier-module-worker: one module version's worker process, started by the engine with its
// channel on descriptor 3 (jit/ModuleWorker.h). Not meant to be run by hand.
#include "jit/ModuleWorker.h"

int main(int argc, char **argv) { return courier::runModuleWorker(argc, argv); }
