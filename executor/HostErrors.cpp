// The object host's failures as wire codes.
#include "executor/HostErrors.h"

#include "llvm/ExecutionEngine/Orc/Core.h"

namespace courier::executor {

using transport::CodedError;
using transport::ErrorCode;

llvm::Error classifyHostError(llvm::Error error, ErrorCode missingCode, ErrorCode failureCode,
                              const llvm::Twine &context) {
  ErrorCode code = failureCode;
  std::string message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const llvm::orc::SymbolsNotFound &e) {
        code = missingCode;
        message = e.message();
      },
      [&](const CodedError &e) {
        code = e.kind;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  std::string prefix = context.str();
  return transport::makeCodedError(code, prefix.empty() ? message : prefix + ": " + message);
}

} // namespace courier::executor
