// RAII fixture: a real courier-executor process on a free loopback port, ready once its
// health endpoint answers, stopped (or killed) when the fixture goes away.
#ifndef COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H
#define COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace courier::testing {

struct ExecutorConfig {
  int port = 0; ///< 0 lets the executor pick; pass an old port to restart in its place.
  std::string token;
  std::vector<std::string> extraArgs;
};

class ExecutorProcess {
public:
  explicit ExecutorProcess(ExecutorConfig config = {});
  ~ExecutorProcess();
  ExecutorProcess(const ExecutorProcess &) = delete;
  ExecutorProcess &operator=(const ExecutorProcess &) = delete;

  const std::string &address() const { return addressText; }
  int port() const { return boundPort; }
  /// SIGKILL, as a crash or an OOM kill would; the process is reaped before returning.
  void kill();
  /// Sends `signal` (SIGTERM, SIGINT) and waits up to 10 s for the process to exit; returns
  /// its exit code, or -1 if it had to be killed or died of a signal.
  int stop(int signal);
  /// Sends `signal` without waiting (SIGSTOP, SIGCONT to freeze and thaw it).
  void signal(int signal);
  /// The current /metrics text.
  std::string metrics() const;
  /// The value of an unlabelled metric, or -1 if absent.
  double metric(const std::string &name) const;
  /// Polls metric `name` until it is at most `bound` or 10 s pass; returns its last value.
  /// For what the executor does on its own time, such as dropping unheld objects.
  double awaitMetricAtMost(const std::string &name, double bound) const;
  /// The executor's stderr so far (one line per request).
  std::string log() const;

private:
  ExecutorConfig config;
  std::string directory;
  std::string addressText;
  int boundPort = 0;
  pid_t pid = -1;
};

} // namespace courier::testing

#endif // COURIER_TESTS_TRANSPORT_EXECUTORPROCESS_H
