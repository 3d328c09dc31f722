// courier-serve's error type.
#include "serve/ServeError.h"

#include "llvm/Support/raw_ostream.h"

namespace courier::serve {

char ServeError::ID = 0;

void ServeError::log(llvm::raw_ostream &os) const {
  os << message << " [" << code << "]";
  for (const Diagnostic &d : diagnostics)
    os << "\n" << d.str();
}

llvm::Error makeServeError(ErrorCode code, const llvm::Twine &message,
                           std::vector<Diagnostic> diagnostics, std::optional<ErrorCode> cause) {
  return llvm::make_error<ServeError>(code, message.str(), std::move(diagnostics), cause);
}

} // namespace courier::serve
