// What one abusive client does to a server's connections, for tests that check the server
// keeps serving everyone else: many connections held open sending nothing, or half a request
// head, or (to a TLS port) never starting a handshake; and a raw request from a chosen
// loopback address, for per-address limits.
#ifndef COURIER_TESTS_SUPPORT_CONNECTIONFLOOD_H
#define COURIER_TESTS_SUPPORT_CONNECTIONFLOOD_H

#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace courier::testing {

class ServerProcess;

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (a test holding thousands of
/// sockets needs more than the usual 1024); returns the soft limit now.
size_t raiseFileLimit();

/// Connections one client holds open to 127.0.0.1:`port`, closed when the flood goes away.
class ConnectionFlood {
public:
  struct Shape {
    size_t idle = 0;  ///< Connections that send nothing (with TLS: after their handshake).
    size_t heads = 0; ///< Connections that send half a request head and stop.
    /// Connections to a TLS port that never start a handshake.
    size_t silent = 0;
    /// The CA that verifies a TLS server; empty for plaintext.
    std::string tlsCaFile{};
    /// The loopback address the connections come from.
    std::string from = "127.0.0.1";
  };
  /// Throws std::runtime_error naming what failed (a connect, a handshake).
  ConnectionFlood(int port, const Shape &shape);
  ~ConnectionFlood();
  ConnectionFlood(const ConnectionFlood &) = delete;
  ConnectionFlood &operator=(const ConnectionFlood &) = delete;

  /// Connections made (a TLS one: its handshake done).
  size_t opened() const { return connections.size(); }
  /// Of those, how many the server has closed by now.
  size_t closedByServer() const;

private:
  void release();
  struct Held {
    int fd = -1;
    SSL *ssl = nullptr;
  };
  std::vector<Held> connections;
  SSL_CTX *ctx = nullptr;
};

/// A TCP connection from `from` to 127.0.0.1:`port`, or -1 (errno set).
int connectFrom(int port, const std::string &from);

/// Sends `request` (which should say "Connection: close") from `from` to 127.0.0.1:`port` in
/// plaintext and returns every byte of the reply, read until the server closes or 10 s pass.
std::string exchangeFrom(int port, const std::string &from, const std::string &request);

/// Whether the server closes `fd` (a connection that sent nothing) within `within`: the read
/// sees the end of the stream, or a reset.
bool closedWithin(int fd, int withinMs);

/// A line of /proc/PID/status in KiB (VmRSS: resident memory now).
long residentKiB(int pid);

/// A new client's work against a server, each request answered within the given time (the
/// client's timeouts) and successful; it REQUIREs as it goes.
using ServedCheck = std::function<void(const ServerProcess &, std::chrono::milliseconds)>;

/// Under 2 000 idle connections and 200 half-sent heads from one client (with `tlsCaFile`,
/// over TLS), `served` succeeds within 1 s, most of the flood is still open, the heads wait
/// parked, the request threads stay within their bound, and the server's resident memory
/// stays flat. `metrics` is the server's metric prefix ("courier", "courier_serve").
void requireServedThroughFlood(const ServerProcess &server, const std::string &tlsCaFile,
                               const std::string &metrics, const ServedCheck &served);

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_CONNECTIONFLOOD_H
