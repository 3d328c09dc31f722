// RAII fixture: a real courier-serve process on a free loopback port with its own cache
// directory, ready once its health endpoint answers, stopped (or killed) when it goes away.
#ifndef COURIER_TESTS_SERVE_SERVEPROCESS_H
#define COURIER_TESTS_SERVE_SERVEPROCESS_H

#include "tests/support/ServerProcess.h"

#include <string>
#include <utility>
#include <vector>

namespace courier::testing {

struct ServeConfig {
  std::string token;
  std::vector<std::string> extraArgs;
};

class ServeProcess : public ServerProcess {
public:
  explicit ServeProcess(ServeConfig config = {});

  /// SIGTERM, then the exit status once it is reaped.
  int terminate();
};

/// Runs courier-serve with `args` and returns its exit status and stderr, for start-up
/// refusals (the process is expected to exit on its own).
std::pair<int, std::string> runServeToExit(const std::vector<std::string> &args);

} // namespace courier::testing

#endif // COURIER_TESTS_SERVE_SERVEPROCESS_H
