// courier-serve's HTTP front: the /v1 REST API and the KServe v2 routes (docs/rest.md) over a
// ModuleStore. Only RestService.cpp and KServeV2.cpp touch the HTTP library; no HTTP type
// appears here.
#ifndef COURIER_SERVE_RESTSERVICE_H
#define COURIER_SERVE_RESTSERVICE_H

#include "serve/ModuleStore.h"
#include "transport/ListenOptions.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace courier::serve {

/// The REST listener: bodies are MLIR sources, JSON tensors and raw-bytes frames.
struct ServeOptions : transport::HttpListenOptions {
  ServeOptions() {
    port = 8080;
    maxBodyBytes = uint64_t(256) << 20;
  }
  /// The KServe v2 system shared-memory extension: clients on this host may register POSIX
  /// shared-memory regions that tensors are read from and written to. Off by default, since
  /// it reads and writes the memory a client names.
  bool allowSharedMemory = false;
};

/// The REST server. create() binds; run() serves until stop(). The store must outlive it.
class RestService {
public:
  static llvm::Expected<std::unique_ptr<RestService>> create(ServeOptions options,
                                                             ModuleStore &store);
  ~RestService();

  /// "host:port" actually bound, or "unix:PATH".
  std::string address() const;

  /// /v1/ready answers 200 only while ready (after the watched files are loaded, before
  /// shutdown); /v1/health answers whenever the process serves.
  void setReady(bool ready);

  /// Serves requests on the calling thread until stop() is called.
  llvm::Error run();
  /// Drains, then stops: /v1/ready answers 503 `draining` and new modules (POST, PUT) are
  /// refused with 503 `draining` while requests in flight finish, up to the drain timeout;
  /// then ends the workers of isolated calls still running (they answer unknown_module).
  void drainAndStop();
  /// Ends a drain's wait at once, so drainAndStop() stops now; safe from any thread.
  void cutDrainShort();
  /// Stops serving; safe from any thread, and before or during run().
  void stop();

  struct Impl;

private:
  explicit RestService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::serve

#endif // COURIER_SERVE_RESTSERVICE_H
