// RAII fixture: a real courier-serve process on a free loopback port with its own cache
// directory, ready once its health endpoint answers, stopped (or killed) when it goes away.
#ifndef COURIER_TESTS_SERVE_SERVEPROCESS_H
#define COURIER_TESTS_SERVE_SERVEPROCESS_H

#include "tests/support/RawConnection.h"
#include "tests/support/ServerProcess.h"

#include <memory>
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

  /// A POST to `path` declaring all of `body` but sending only its first ten bytes, on a
  /// connection of its own, once the server counts it in flight (required within 20 s). It
  /// stays in flight while the connection lives.
  std::unique_ptr<RawConnection> postInFlight(const std::string &path, const std::string &body);
};

/// Runs courier-serve with `args` and returns its exit status and stderr, for start-up
/// refusals (the process is expected to exit on its own).
std::pair<int, std::string> runServeToExit(const std::vector<std::string> &args);

} // namespace courier::testing

#endif // COURIER_TESTS_SERVE_SERVEPROCESS_H
