// Picks the backend for an address: "local" runs in process, "host:port" goes over HTTP.
#include "executor/LocalBackend.h"
#include "transport/HttpBackend.h"

#include "llvm/Support/FormatVariadic.h"

namespace courier::transport {

namespace {

/// Accepts "host:port" and "[v6-host]:port" with a port in 1..65535.
llvm::Error checkAddress(llvm::StringRef address) {
  auto bad = [&](llvm::StringRef why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("bad executor address '{0}': {1}; expected \"local\" or \"host:port\"",
                      address, why));
  };
  size_t colon = address.rfind(':');
  if (colon == llvm::StringRef::npos)
    return bad("no port");
  llvm::StringRef host = address.take_front(colon);
  llvm::StringRef port = address.drop_front(colon + 1);
  if (host.empty())
    return bad("no host");
  if (host.starts_with("[") != host.ends_with("]"))
    return bad("unbalanced brackets around the host");
  if (!host.starts_with("[") && host.contains(':'))
    return bad("an IPv6 host must be in brackets");
  if (host.contains('/') || host.contains(' '))
    return bad("the host contains '/' or a space");
  unsigned value = 0;
  if (port.empty() || port.getAsInteger(10, value) || value == 0 || value > 65535)
    return bad("the port must be a number from 1 to 65535");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::unique_ptr<Backend>> createBackend(llvm::StringRef address,
                                                       const BackendOptions &options) {
  if (address == "local")
    return createLocalBackend(options);
  if (llvm::Error error = checkAddress(address))
    return std::move(error);
  return createHttpBackend(address, options);
}

} // namespace courier::transport
