// RAII fixture: a real server process (courier-executor, courier-serve) on a loopback port
// with its own scratch directory, ready once its health endpoint answers, stopped (or killed)
// when it goes away.
#ifndef COURIER_TESTS_SUPPORT_SERVERPROCESS_H
#define COURIER_TESTS_SUPPORT_SERVERPROCESS_H

#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace courier::testing {

struct ServerSpec {
  std::string program; ///< The executable; it prints "listening on HOST:PORT" once bound.
  std::string name;    ///< For messages and the scratch directory's name.
  int port = 0;        ///< 0 lets the server pick; pass an old port to restart in its place.
  std::string token;   ///< Written to a --token-file when non-empty.
  /// Arguments after --listen and --token-file. "{dir}" in one stands for the scratch
  /// directory, which exists before the process starts.
  /// A --listen among them ("unix:{dir}/server.sock") replaces 127.0.0.1 and `port`.
  std::vector<std::string> args;
  /// For a server that announces "https://": the CA client() trusts (none: it does not
  /// verify), and the certificate and key it presents when the server asks for one.
  std::string tlsCaFile{}, tlsClientCert{}, tlsClientKey{};
};

class ServerProcess {
public:
  explicit ServerProcess(ServerSpec spec);
  ~ServerProcess();
  ServerProcess(const ServerProcess &) = delete;
  ServerProcess &operator=(const ServerProcess &) = delete;

  /// As the server announced it: "127.0.0.1:PORT", "https://127.0.0.1:PORT" or "unix:PATH".
  const std::string &address() const { return addressText; }
  /// The unix socket's path when it listens on one, else "".
  const std::string &socketPath() const { return socket; }
  /// The server's process id, for looking at the processes it starts.
  pid_t processId() const { return pid; }
  /// 0 on a unix socket.
  int port() const { return boundPort; }
  /// A scratch directory that lives as long as the fixture.
  const std::string &directory() const { return dir; }
  /// A keep-alive client that sends the bearer token, if there is one; over the unix
  /// socket when the server listens on one, over TLS (ServerSpec's files) when it speaks it.
  std::unique_ptr<httplib::Client> client() const;
  /// The current /metrics text.
  std::string metrics() const;
  /// The value of a metric line `name` (labels included, e.g. `x{a="b"}`), or -1 if absent.
  double metric(const std::string &name) const;
  /// Polls metric `name` until it is at most `bound` or 10 s pass; returns its last value.
  /// For what the server does on its own time, such as dropping unheld objects.
  double awaitMetricAtMost(const std::string &name, double bound) const;
  /// The server's stderr so far (one line per request, and whatever else it logs).
  std::string log() const;
  /// The same, line by line.
  std::vector<std::string> logLines() const;
  /// Polls the log until a line satisfies `wanted` or 10 s pass (a request's line follows
  /// its response); returns the line, or "" if none did.
  std::string awaitLogLine(const std::function<bool(const std::string &)> &wanted) const;
  /// Sends `signal` and waits up to `patience` for the process to exit, then SIGKILLs it;
  /// returns the wait status once it is reaped (-1 when it was not running).
  int terminate(int signal, std::chrono::seconds patience);
  /// SIGKILL, as a crash or an OOM kill would; the process is reaped before returning.
  void kill();
  /// Sends `signal` without waiting (SIGSTOP, SIGCONT to freeze and thaw it).
  void signal(int signal);
  /// Sends SIGSTOP and waits until every thread of the process has stopped: the signal is
  /// delivered asynchronously, and a thread still running could answer one more request.
  void freeze();

private:
  ServerSpec spec;
  std::string dir;
  std::string addressText;
  std::string socket;
  int boundPort = 0;
  pid_t pid = -1;
};

/// Runs `program` with `args` and returns its exit status and stderr, for start-up refusals
/// (the process is expected to exit on its own).
std::pair<int, std::string> runServerToExit(const std::string &program,
                                            const std::vector<std::string> &args);

/// A file of /proc/PID/ whole (stat, comm; cmdline and environ with their NUL separators); empty
/// when the process is gone.
std::string procFile(pid_t pid, const std::string &name);

/// The processes `pid` started, zombies included (each of its threads' /proc children lists).
std::vector<pid_t> childrenOf(pid_t pid);

/// The processes `pid` started that still run (childrenOf without the zombies).
std::vector<pid_t> liveChildrenOf(pid_t pid);

/// CPU seconds (user and system) `pid` and every process under it that still exists have used
/// so far: a server with its workers, for a benchmark's CPU per request.
double cpuSecondsOfTree(pid_t pid);

/// Runs a shell `command` (curl, courier-run) to its end; returns its exit status (-1 when a
/// signal ended it) and its stdout and stderr, merged.
std::pair<int, std::string> runCommand(const std::string &command);

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_SERVERPROCESS_H
