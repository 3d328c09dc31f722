// Looking codes up by name, and CodedError's text form.
#include "transport/ErrorCode.h"

#include "llvm/Support/raw_ostream.h"

namespace courier::transport {

char CodedError::ID = 0;

void CodedError::log(llvm::raw_ostream &os) const { os << message << " [" << code << "]"; }

std::optional<ErrorCode> parseErrorCode(llvm::StringRef name) {
  for (const ErrorCodeInfo &info : kErrorTable)
    if (name == info.code)
      return info.value;
  return std::nullopt;
}

llvm::Error makeCodedError(ErrorCode code, const llvm::Twine &message) {
  return llvm::make_error<CodedError>(code, message.str());
}

ErrorCode codeOf(const llvm::ErrorInfoBase &error, ErrorCode fallback) {
  if (error.isA<CodedError>())
    return static_cast<const CodedError &>(error).kind;
  return fallback;
}

std::pair<ErrorCode, std::string> takeCodeAndMessage(llvm::Error error, ErrorCode fallback) {
  std::pair<ErrorCode, std::string> taken{fallback, ""};
  llvm::handleAllErrors(
      std::move(error),
      [&](const CodedError &e) {
        taken.first = e.kind;
        taken.second = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { taken.second = e.message(); });
  return taken;
}

llvm::Error withContext(const llvm::Twine &context, llvm::Error error) {
  if (!error)
    return llvm::Error::success();
  std::string prefix = context.str() + ": ";
  return llvm::handleErrors(
      std::move(error),
      [&](const CodedError &e) -> llvm::Error {
        return llvm::make_error<CodedError>(e.kind, prefix + e.message);
      },
      [&](const llvm::ErrorInfoBase &e) -> llvm::Error {
        return llvm::createStringError(prefix + e.message());
      });
}

} // namespace courier::transport
