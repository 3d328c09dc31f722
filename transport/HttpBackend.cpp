// Placeholder until the HTTP client lands: every remote address fails with a clear error.
#include "transport/HttpBackend.h"

namespace courier::transport {

llvm::Expected<std::unique_ptr<Backend>> createHttpBackend(llvm::StringRef address,
                                                           const BackendOptions &options) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "connecting to '" + address +
                                     "': http backend not available in this build");
}

} // namespace courier::transport
