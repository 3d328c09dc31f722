// The executor's HTTP server: serves the /v1 protocol (docs/protocol.md) over a thread pool,
// one ObjectHost per session. Used by courier-executor and by tests that need an executor
// in-process. No HTTP library type appears here.
#ifndef COURIER_EXECUTOR_EXECUTORSERVER_H
#define COURIER_EXECUTOR_EXECUTORSERVER_H

#include "transport/ListenOptions.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::transport {

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

} // namespace courier::transport

#endif // COURIER_EXECUTOR_EXECUTORSERVER_H
