// courier-serve's error type.
#include "tools/courier-serve/ServeError.h"

#include "llvm/Support/raw_ostream.h"

namespace courier::serve {

char ServeError::ID = 0;

void ServeError::log(llvm::raw_ostream &os) const {
  os << message << " [" << code << "]";
  for (const Diagnostic &d : diagnostics)
    os << "\n" << d.str();
}

llvm::Error makeServeError(ErrorCode code, const llvm::Twine &message,
                           std::vector<Diagnostic> diagnostics) {
  return llvm::make_error<ServeError>(code, message.str(), std::move(diagnostics));
}

llvm::Error makeServeError(ErrorCode code, const llvm::Twine &message,
                           std::optional<ErrorCode> cause) {
  auto error = std::make_unique<ServeError>(code, message.str());
  error->cause = cause;
  return llvm::Error(std::move(error));
}

} // namespace courier::serve
