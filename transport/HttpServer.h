// The executor's HTTP server: serves the /v1 protocol (docs/protocol.md) over a thread pool,
// one ObjectHost per session. Used by courier-executor and by tests that need an executor
// in-process. No HTTP library type appears here.
#ifndef COURIER_TRANSPORT_HTTPSERVER_H
#define COURIER_TRANSPORT_HTTPSERVER_H

#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::transport {

/// Where and how an HTTP server listens; the executor and courier-serve share these.
struct HttpListenOptions {
  std::string host = "127.0.0.1";
  int port = 0; ///< 0 picks a free port; address() reports it.
  /// When non-empty, every request must carry "Authorization: Bearer <token>". A server
  /// bound beyond loopback refuses to start without one.
  std::string token;
  /// Worker threads; each keep-alive connection holds one while it is open.
  unsigned threads = 32;
  /// Largest request body accepted.
  uint64_t maxBodyBytes = uint64_t(4) << 30;
  /// One line per request on stderr: method, path, status, bytes in/out, milliseconds.
  bool logRequests = true;
};

/// The executor's listener (bodies are objects, launch frames and call inputs) and sessions.
struct ExecutorServerOptions : HttpListenOptions {
  std::vector<std::string> plugins;
  /// Sessions unused for this long are closed.
  std::chrono::seconds idleTimeout{600};
  /// An object no session holds is dropped from the store after this long, so a client
  /// between its upload and its attach, or re-attaching soon after a release, finds it.
  std::chrono::milliseconds objectGrace{60000};
};

/// An executor listening on a bound socket. Create binds; run() serves until stop().
class ExecutorServer {
public:
  static llvm::Expected<std::unique_ptr<ExecutorServer>> create(ExecutorServerOptions options);
  ~ExecutorServer();

  /// "host:port" actually bound.
  std::string address() const;
  int port() const;

  /// Serves requests on the calling thread until stop() is called.
  llvm::Error run();
  /// Stops serving; safe from any thread, and before or during run().
  void stop();

  struct Impl;

private:
  explicit ExecutorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// True when `host` names only this machine (127.0.0.0/8, ::1, localhost).
bool isLoopbackHost(const std::string &host);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HTTPSERVER_H
