// courier-worker: one session's worker process, started by courier-executor with its channel
// on descriptor 3 (executor/Worker.h). Not meant to be run by hand.
#include "executor/Worker.h"

int main(int argc, char **argv) { return courier::executor::runWorker(argc, argv); }
