// Where and how a server listens: the options courier-executor and courier-serve share.
#ifndef COURIER_TRANSPORT_LISTENOPTIONS_H
#define COURIER_TRANSPORT_LISTENOPTIONS_H

#include "transport/HostPort.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace courier::transport {

/// Where and how an HTTP server listens; the executor and courier-serve share these.
struct HttpListenOptions {
  std::string host = "127.0.0.1";
  int port = 0; ///< 0 picks a free port; address() reports it.
  /// When non-empty, the server listens on this unix-domain socket instead of host:port.
  /// The socket file is created mode 0600 and removed on a clean exit; a path that exists
  /// and is not a stale socket (one nothing listens on) is refused.
  std::string socketPath;
  /// When non-empty, every request must carry "Authorization: Bearer <token>". A server
  /// bound beyond loopback refuses to start without one.
  std::string token;
  /// Requests served at once, and so request threads, at most (transport/ParkingServer.h).
  unsigned threads = 32;
  /// Connections open at once at most, idle ones included: at the limit a new connection
  /// closes the oldest idle one, and is refused 503 `overloaded` only when every one is busy.
  unsigned maxConnections = 10000;
  /// Connections open at once from one peer address (a unix-socket peer: one uid) at most;
  /// the next is refused 503 `overloaded`. 0 for no limit (behind a proxy, every client is
  /// the proxy).
  unsigned maxConnectionsPerClient = 256;
  /// Largest request body accepted.
  uint64_t maxBodyBytes = uint64_t(4) << 30;
  /// One line per request on stderr: method, path, status, bytes in/out, milliseconds.
  bool logRequests = true;
  /// How long a drain (SIGTERM) waits for requests in flight before the server stops anyway.
  std::chrono::milliseconds drainTimeout{30000};
  /// When set (both), the server speaks only TLS, with this PEM certificate chain and key.
  std::string tlsCertFile, tlsKeyFile;
  /// When set, every client must present a certificate signed by a CA in this PEM file (mutual
  /// TLS); a client without one is refused at the handshake.
  std::string tlsClientCaFile;
  /// Lets a server bound beyond loopback speak plaintext, for a proxy in front that
  /// terminates TLS. Without it (or TLS), such a server refuses to start.
  bool insecurePlaintext = false;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_LISTENOPTIONS_H
