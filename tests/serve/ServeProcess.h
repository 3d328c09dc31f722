// RAII fixture: a real courier-serve process on a free loopback port with its own cache
// directory, ready once its health endpoint answers, stopped (or killed) when it goes away.
#ifndef COURIER_TESTS_SERVE_SERVEPROCESS_H
#define COURIER_TESTS_SERVE_SERVEPROCESS_H

#include <httplib.h>

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace courier::testing {

struct ServeConfig {
  std::string token;
  std::vector<std::string> extraArgs;
};

class ServeProcess {
public:
  explicit ServeProcess(ServeConfig config = {});
  ~ServeProcess();
  ServeProcess(const ServeProcess &) = delete;
  ServeProcess &operator=(const ServeProcess &) = delete;

  const std::string &address() const { return addressText; }
  int port() const { return boundPort; }
  /// A scratch directory that lives as long as the process (also its --cache-dir's parent).
  const std::string &directory() const { return dir; }
  /// A keep-alive client that sends the bearer token, if there is one.
  std::unique_ptr<httplib::Client> client() const;
  /// The value of a metric line `name` (labels included, e.g. `x{a="b"}`), or -1 if absent.
  double metric(const std::string &name) const;
  /// The server's stderr so far (one line per request, watch outcomes).
  std::string log() const;
  /// SIGTERM, then the exit status once it is reaped.
  int terminate();

private:
  ServeConfig config;
  std::string dir;
  std::string addressText;
  int boundPort = 0;
  pid_t pid = -1;
};

/// Runs courier-serve with `args` and returns its exit status and stderr, for start-up
/// refusals (the process is expected to exit on its own).
std::pair<int, std::string> runServeToExit(const std::vector<std::string> &args);

} // namespace courier::testing

#endif // COURIER_TESTS_SERVE_SERVEPROCESS_H
