// The executor's HTTP server: serves the /v1 protocol (docs/protocol.md) over a thread pool,
// an adapter over the executor core (executor/ExecutorCore.h). Used by courier-executor and
// by tests that need an executor in-process. No HTTP library type appears here.
#ifndef COURIER_EXECUTOR_EXECUTORSERVER_H
#define COURIER_EXECUTOR_EXECUTORSERVER_H

#include "executor/ExecutorCore.h"
#include "transport/ListenOptions.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::executor {

/// The executor's listener (bodies are objects, launch frames and call inputs) and its core.
struct ExecutorServerOptions : transport::HttpListenOptions {
  /// Sessions, the object store and where kernels run (executor/ExecutorCore.h). The
  /// server sets two of them from the listener's: `maxBytes` is `maxBodyBytes`, and
  /// `asyncThreads` is `threads`, at most 64.
  CoreOptions core;
  /// Shared memory each session's same-host channel may take (its input and result regions,
  /// half each); 0 offers no channels (transport/SharedChannel.h).
  uint64_t shmArenaMiB = 256;
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
  /// Drains, then stops: /v1/ready answers 503 and new sessions are refused with 503
  /// `draining` while requests in flight finish, up to the drain timeout. Safe from any
  /// thread; returns once stop() has been called.
  void drainAndStop();
  /// Ends a drain's wait at once, so drainAndStop() stops now; safe from any thread.
  void cutDrainShort();
  /// Stops serving; safe from any thread, and before or during run().
  void stop();

  struct Impl;

private:
  explicit ExecutorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_EXECUTORSERVER_H
