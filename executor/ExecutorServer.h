// The executor's HTTP server: serves the /v1 protocol (docs/protocol.md) over a thread pool,
// an adapter over the executor core (executor/ExecutorCore.h). Used by courier-executor and
// by tests that need an executor in-process. No HTTP library type appears here.
#ifndef COURIER_EXECUTOR_EXECUTORSERVER_H
#define COURIER_EXECUTOR_EXECUTORSERVER_H

#include "executor/ExecutorCore.h"
#include "transport/ListenOptions.h"
#include "transport/Service.h"

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
class ExecutorServer final : public transport::Service {
public:
  static llvm::Expected<std::unique_ptr<ExecutorServer>> create(ExecutorServerOptions options);
  ~ExecutorServer() override;

  std::string address() const override;
  int port() const;

  llvm::Error run() override;
  /// New sessions are refused with 503 `draining` meanwhile; returns once stop() has been
  /// called.
  void drainAndStop() override;
  void cutDrainShort() override;
  /// Ends the workers first: kernels may spin forever.
  void stop() override;

  struct Impl;

private:
  explicit ExecutorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_EXECUTORSERVER_H
