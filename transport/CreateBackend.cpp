// Picks the backend for an address: a name registered by a library the program links
// ("local", the in-process executor), or the HTTP client for "host:port", "https://host:port"
// and "unix:PATH".
#include "transport/Backend.h"
#include "transport/ErrorCode.h"
#include "transport/HostPort.h"
#include "transport/HttpBackend.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <mutex>

namespace courier::transport {

namespace {

/// The names registered with registerBackend and their factories.
struct BackendRegistry {
  std::mutex mutex;
  llvm::StringMap<BackendFactory> factories;
};

/// Never destroyed: a backend may be registered or created from another object's static
/// initializer or destructor, in any order.
BackendRegistry &registry() {
  static BackendRegistry *registry = new BackendRegistry;
  return *registry;
}

BackendFactory registered(llvm::StringRef name) {
  BackendRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.factories.find(name);
  return found == r.factories.end() ? nullptr : found->second;
}

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

void registerBackend(llvm::StringRef name, BackendFactory factory) {
  BackendRegistry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[name] = factory;
}

llvm::Expected<std::unique_ptr<Backend>> createBackend(llvm::StringRef address,
                                                       const BackendOptions &options) {
  if (BackendFactory factory = registered(address))
    return factory(options);
  if (address == "local")
    return makeCodedError(ErrorCode::BadRequest,
                          "the in-process executor (\"local\") is not part of this program: link "
                          "the executor library (Courier::Executor) beside the runtime, or name "
                          "a remote executor (\"host:port\", \"https://host:port\" or "
                          "\"unix:PATH\")");
  if (llvm::Error error = checkAddress(address))
    return std::move(error);
  return createHttpBackend(address, options);
}

} // namespace courier::transport
