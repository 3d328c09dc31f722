// courier-executor as a ServerProcess: COURIER_EXECUTOR_PATH comes from the test's target.
#include "tests/transport/ExecutorProcess.h"

#include <sys/wait.h>

namespace courier::testing {

ExecutorProcess::ExecutorProcess(ExecutorConfig config)
    : ServerProcess(ServerSpec{COURIER_EXECUTOR_PATH, "courier-executor", config.port,
                               std::move(config.token), std::move(config.extraArgs)}) {}

int ExecutorProcess::stop(int signal) {
  int status = terminate(signal, std::chrono::seconds(10));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace courier::testing
