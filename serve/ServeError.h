// courier-serve's error: a REST error code with its message, and a failed compile's
// diagnostics. What every layer of the tool returns and RestService turns into a reply.
#ifndef COURIER_SERVE_SERVEERROR_H
#define COURIER_SERVE_SERVEERROR_H

#include "jit/Engine.h"
#include "transport/ErrorCode.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace courier::serve {

/// A refusal or failure with its REST error code (one of ModuleStore.h's kErrorCodes); compile
/// failures carry the diagnostics.
class ServeError : public llvm::ErrorInfo<ServeError, transport::CodedError> {
public:
  static char ID;
  ServeError(ErrorCode kind, std::string message, std::vector<Diagnostic> diagnostics = {},
             std::optional<ErrorCode> cause = std::nullopt)
      : ErrorInfo(kind, std::move(message), cause), diagnostics(std::move(diagnostics)) {}
  void log(llvm::raw_ostream &os) const override;

  std::vector<Diagnostic> diagnostics;
};
/// `cause`: the code of another layer's failure this one reports (the executor's, behind
/// `executor_failed`), none when there is none.
llvm::Error makeServeError(ErrorCode code, const llvm::Twine &message,
                           std::vector<Diagnostic> diagnostics = {},
                           std::optional<ErrorCode> cause = std::nullopt);

} // namespace courier::serve

#endif // COURIER_SERVE_SERVEERROR_H
