// courier-serve's HTTP front: the /v1 REST API and the KServe v2 routes (docs/rest.md) over a
// ModuleStore. Only RestService.cpp and KServeV2.cpp touch the HTTP library; no HTTP type
// appears here.
#ifndef COURIER_SERVE_RESTSERVICE_H
#define COURIER_SERVE_RESTSERVICE_H

#include "serve/ModuleStore.h"
#include "transport/ListenOptions.h"
#include "transport/Service.h"

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
class RestService final : public transport::Service {
public:
  static llvm::Expected<std::unique_ptr<RestService>> create(ServeOptions options,
                                                             ModuleStore &store);
  ~RestService() override;

  std::string address() const override;

  /// /v1/ready answers 200 only while ready (after the watched files are loaded, before
  /// shutdown); /v1/health answers whenever the process serves.
  void setReady(bool ready);

  llvm::Error run() override;
  /// New modules (POST, PUT) are refused with 503 `draining` meanwhile; then the workers of
  /// isolated calls still running are ended (they answer unknown_module).
  void drainAndStop() override;
  void cutDrainShort() override;
  void stop() override;

  struct Impl;

private:
  explicit RestService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::serve

#endif // COURIER_SERVE_RESTSERVICE_H
