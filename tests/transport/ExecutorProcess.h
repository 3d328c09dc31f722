// RAII fixture: a real courier-executor process on a free loopback port, ready once its
// health endpoint answers, stopped (or killed) when the fixture goes away.
#ifndef COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H
#define COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H

#include "tests/support/ServerProcess.h"

#include <string>
#include <vector>

namespace courier::testing {

struct ExecutorConfig {
  int port = 0; ///< 0 lets the executor pick; pass an old port to restart in its place.
  std::string token;
  std::vector<std::string> extraArgs;
};

class ExecutorProcess : public ServerProcess {
public:
  explicit ExecutorProcess(ExecutorConfig config = {});

  /// Sends `signal` (SIGTERM, SIGINT) and waits up to 10 s for the process to exit; returns
  /// its exit code, or -1 if it had to be killed or died of a signal.
  int stop(int signal);
};

} // namespace courier::testing

#endif // COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H
