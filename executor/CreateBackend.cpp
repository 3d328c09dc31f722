// Picks the backend for an address: "local" runs in process, "host:port", "https://host:port"
// or "unix:PATH" goes over HTTP.
#include "executor/LocalBackend.h"
#include "transport/HostPort.h"
#include "transport/HttpBackend.h"

#include "llvm/Support/FormatVariadic.h"

namespace courier::transport {

namespace {

/// Accepts "host:port" and "[v6-host]:port" with a port in 1..65535, either after
/// "https://", and "unix:/path".
llvm::Error checkAddress(llvm::StringRef address) {
  llvm::Expected<HostPort> parsed = parseHostPort(address);
  if (parsed)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::formatv("bad executor address '{0}': {1}; expected \"local\", \"host:port\", "
                    "\"https://host:port\" or \"unix:PATH\"",
                    address, llvm::toString(parsed.takeError())));
}

} // namespace

llvm::Expected<std::unique_ptr<Backend>> createBackend(llvm::StringRef address,
                                                       const BackendOptions &options) {
  if (address == "local")
    return executor::createLocalBackend(options);
  if (llvm::Error error = checkAddress(address))
    return std::move(error);
  return createHttpBackend(address, options);
}

} // namespace courier::transport
