// courier-serve's KServe v2 routes (the Open Inference Protocol, docs/rest.md): health, server
// and model metadata, readiness, infer with JSON or binary tensors, the model repository, the
// statistics and the system shared-memory extensions, over the same ModuleStore as /v1.
// Errors on these routes are {"error": "<message>"} with the /v1 code in X-Courier-Error-Code.
#ifndef COURIER_SERVE_KSERVEV2_H
#define COURIER_SERVE_KSERVEV2_H

#include "serve/ModuleStore.h"

#include "transport/HttpService.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace courier::serve {

/// True for a path of the v2 routes ("/v2" and below): errors there take the v2 shape.
bool isKServePath(llvm::StringRef path);
/// Answers `code` in the v2 shape: {"error": message}, the protocol's status for the code,
/// and the code in X-Courier-Error-Code. For refusals made before routing (HttpService's
/// sendError) of a v2 path.
void sendKServeError(httplib::Response &res, ErrorCode code, llvm::StringRef message);

/// What the v2 routes share with RestService.
struct KServeContext {
  ModuleStore &store;
  transport::HttpService &service;
  uint64_t maxBodyBytes = 0;
  /// --allow-shared-memory: tensors may be read from and written to regions clients register.
  bool allowSharedMemory = false;
  /// Success while the server is ready (as /v1/ready answers 200), else why not.
  std::function<llvm::Error()> readiness;
  /// Invokes an entry as /v1 does (metrics, the store's counters).
  std::function<llvm::Expected<std::vector<Tensor>>(const Pinned &, const EntrySignature &,
                                                    llvm::ArrayRef<Tensor>, bool &called)>
      call;
  /// Called once a module is unloaded, to drop what the server keeps by module name.
  std::function<void(llvm::StringRef)> forget;
};

/// The v2 routes. Holds the shared-memory regions clients registered.
class KServeV2 {
public:
  explicit KServeV2(KServeContext context);
  ~KServeV2();

  /// The v2 routes, then one answering any other /v2 path with a v2 404: install them after
  /// every other route that could match a /v2 path.
  std::vector<transport::HttpService::Route> routes();

  struct Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace courier::serve

#endif // COURIER_SERVE_KSERVEV2_H
