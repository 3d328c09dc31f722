// The object host's failures as wire codes.
#include "executor/HostErrors.h"

#include "transport/Wire.h"

#include "llvm/ExecutionEngine/Orc/Core.h"

namespace courier::executor {

using transport::wire::makeWireError;
using transport::wire::WireError;

std::pair<std::string, std::string> describeError(llvm::Error error, llvm::StringRef fallbackCode) {
  std::string code = fallbackCode.str(), message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const WireError &e) {
        code = e.code;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return {code, message};
}

llvm::Error classifyHostError(llvm::Error error, llvm::StringRef missingCode,
                              llvm::StringRef failureCode, const llvm::Twine &context) {
  std::string code = failureCode.str(), message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const llvm::orc::SymbolsNotFound &e) {
        code = missingCode.str();
        message = e.message();
      },
      [&](const WireError &e) {
        code = e.code;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  std::string prefix = context.str();
  return makeWireError(code, prefix.empty() ? message : prefix + ": " + message);
}

} // namespace courier::executor
