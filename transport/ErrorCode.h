// Courier's error codes, one table for every layer: the executor's wire protocol, the HTTP
// client, the runtime, the engine and courier-serve's REST API all carry an ErrorCode inside
// one llvm::ErrorInfo, CodedError, so no layer picks a kind of failure out of message text.
// Wire names and statuses are written once, here; docs/protocol.md and docs/rest.md list
// the codes their servers send and tests check each list against this table.
#ifndef COURIER_TRANSPORT_ERRORCODE_H
#define COURIER_TRANSPORT_ERRORCODE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

namespace courier::transport {

/// In the order of kErrorTable's rows.
enum class ErrorCode : uint8_t {
  BadRequest,
  BadFrame,
  HashMismatch,
  Unauthorized,
  UnknownSession,
  UnknownObject,
  UnknownEntry,
  UnknownSymbol,
  UnknownLaunch,
  NotFound,
  PayloadTooLarge,
  InvalidObject,
  LaunchFailed,
  CallFailed,
  SignatureMismatch,
  UnsignedObject,
  TooManyLaunches,
  Internal,
  KernelCrashed,
  WorkerUnavailable,
  TooManySessions,
  DeadlineExceeded,
  Unavailable,
  InvalidInput,
  UnknownModule,
  ModuleExists,
  CompileFailed,
  ExecutorFailed,
  ExecutorUnavailable,
  NotReady,
  CompileTimeout,
  TooManyModules,
  CompileCrashed,
  Draining,
  Overloaded,
  TlsFailed,
  ExecutorLost,
  StoreFull,
  UnsupportedEncoding,
  UnsupportedCpu,
  SetupCrashed,
};

/// Who sends a code in an HTTP error body; a code with neither bit is raised and handled
/// inside a process and never sent (`unavailable`: the HTTP client could not reach its
/// executor; `tls_failed`: it reached it, but TLS failed: an unknown CA, an expired or
/// misnamed certificate, a handshake that failed, a client certificate the executor asked for
/// and did not get).
enum ErrorSender : unsigned {
  kSentByExecutor = 1, ///< courier-executor (docs/protocol.md)
  kSentByServe = 2,    ///< courier-serve (docs/rest.md)
};

struct ErrorCodeInfo {
  ErrorCode value;
  const char *code; ///< The wire name.
  int status;       ///< The HTTP status an error body with this code is sent with.
  unsigned senders; ///< ErrorSender bits.
};

inline constexpr unsigned kBoth = kSentByExecutor | kSentByServe;
inline constexpr ErrorCodeInfo kErrorTable[] = {
    {ErrorCode::BadRequest, "bad_request", 400, kBoth},
    {ErrorCode::BadFrame, "bad_frame", 400, kSentByExecutor},
    {ErrorCode::HashMismatch, "hash_mismatch", 400, kSentByExecutor},
    {ErrorCode::Unauthorized, "unauthorized", 401, kBoth},
    {ErrorCode::UnknownSession, "unknown_session", 404, kSentByExecutor},
    {ErrorCode::UnknownObject, "unknown_object", 404, kSentByExecutor},
    {ErrorCode::UnknownEntry, "unknown_entry", 404, kBoth},
    {ErrorCode::UnknownSymbol, "unknown_symbol", 404, kSentByExecutor},
    {ErrorCode::UnknownLaunch, "unknown_launch", 404, kSentByExecutor},
    {ErrorCode::NotFound, "not_found", 404, kBoth},
    {ErrorCode::PayloadTooLarge, "payload_too_large", 413, kBoth},
    {ErrorCode::InvalidObject, "invalid_object", 422, kSentByExecutor},
    {ErrorCode::LaunchFailed, "launch_failed", 422, kSentByExecutor},
    {ErrorCode::CallFailed, "call_failed", 422, kSentByExecutor},
    {ErrorCode::SignatureMismatch, "signature_mismatch", 422, kSentByExecutor},
    {ErrorCode::UnsignedObject, "unsigned_object", 422, kSentByExecutor},
    {ErrorCode::TooManyLaunches, "too_many_launches", 429, kSentByExecutor},
    {ErrorCode::Internal, "internal", 500, kBoth},
    {ErrorCode::KernelCrashed, "kernel_crashed", 500, kBoth},
    {ErrorCode::WorkerUnavailable, "worker_unavailable", 503, kBoth},
    {ErrorCode::TooManySessions, "too_many_sessions", 503, kSentByExecutor},
    {ErrorCode::DeadlineExceeded, "deadline_exceeded", 504, kBoth},
    {ErrorCode::Unavailable, "unavailable", 502, 0},
    {ErrorCode::InvalidInput, "invalid_input", 400, kSentByServe},
    {ErrorCode::UnknownModule, "unknown_module", 404, kSentByServe},
    {ErrorCode::ModuleExists, "module_exists", 409, kSentByServe},
    {ErrorCode::CompileFailed, "compile_failed", 422, kSentByServe},
    {ErrorCode::ExecutorFailed, "executor_failed", 422, kSentByServe},
    {ErrorCode::ExecutorUnavailable, "executor_unavailable", 502, kSentByServe},
    {ErrorCode::NotReady, "not_ready", 503, kSentByServe},
    {ErrorCode::CompileTimeout, "compile_timeout", 504, kSentByServe},
    {ErrorCode::TooManyModules, "too_many_modules", 507, kSentByServe},
    {ErrorCode::CompileCrashed, "compile_crashed", 500, kSentByServe},
    {ErrorCode::Draining, "draining", 503, kBoth},
    {ErrorCode::Overloaded, "overloaded", 503, kBoth},
    {ErrorCode::TlsFailed, "tls_failed", 502, 0},
    {ErrorCode::ExecutorLost, "executor_lost", 502, 0},
    {ErrorCode::StoreFull, "store_full", 507, kSentByExecutor},
    {ErrorCode::UnsupportedEncoding, "unsupported_encoding", 415, kBoth},
    {ErrorCode::UnsupportedCpu, "unsupported_cpu", 422, kSentByExecutor},
    {ErrorCode::SetupCrashed, "setup_crashed", 500, kSentByServe},
};

namespace detail {
constexpr bool rowsInEnumOrder() {
  for (size_t i = 0; i < std::size(kErrorTable); ++i)
    if (static_cast<size_t>(kErrorTable[i].value) != i)
      return false;
  return true;
}
static_assert(rowsInEnumOrder(), "kErrorTable's rows must follow ErrorCode's order");

template <unsigned Sender> constexpr size_t countSentBy() {
  size_t count = 0;
  for (const ErrorCodeInfo &info : kErrorTable)
    count += (info.senders & Sender) != 0;
  return count;
}
} // namespace detail

/// The rows of the codes `Sender` sends, in table order.
template <unsigned Sender>
constexpr std::array<ErrorCodeInfo, detail::countSentBy<Sender>()> codesSentBy() {
  std::array<ErrorCodeInfo, detail::countSentBy<Sender>()> rows{};
  size_t next = 0;
  for (const ErrorCodeInfo &info : kErrorTable)
    if (info.senders & Sender)
      rows[next++] = info;
  return rows;
}

constexpr const ErrorCodeInfo &errorCodeInfo(ErrorCode code) {
  return kErrorTable[static_cast<size_t>(code)];
}
/// The wire name, e.g. "unknown_object".
inline llvm::StringRef errorCodeName(ErrorCode code) { return errorCodeInfo(code).code; }
/// The same, found by argument-dependent lookup: toString(error.kind).
inline llvm::StringRef toString(ErrorCode code) { return errorCodeName(code); }
constexpr int httpStatus(ErrorCode code) { return errorCodeInfo(code).status; }
/// The code whose wire name is `name`; none for a name not in the table.
std::optional<ErrorCode> parseErrorCode(llvm::StringRef name);

/// A failure with its code. `message` says what failed and where ("launching 'k' on h:p:
/// ..."); the text form (llvm::toString) appends the code: "... [unknown_object]".
/// A coded error's message: a string, which a call also returns, so that
/// `error.message()` compiles and reads the message, as llvm::ErrorInfoBase::message()
/// (which a member named `message` hides) would read it of an EngineError.
class ErrorMessage : public std::string {
public:
  ErrorMessage(std::string text) : std::string(std::move(text)) {}
  using std::string::operator=;
  const std::string &operator()() const { return *this; }
};

class CodedError : public llvm::ErrorInfo<CodedError> {
public:
  static char ID;
  CodedError(ErrorCode kind, std::string message, std::optional<ErrorCode> cause = std::nullopt)
      : kind(kind), code(errorCodeName(kind)), message(std::move(message)), cause(cause) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }

  const ErrorCode kind;
  /// errorCodeName(kind), for code that works with the wire name.
  const llvm::StringRef code;
  /// The message alone; the error's text (log()) adds " [code]".
  ErrorMessage message;
  /// The code of the failure this one reports when that failure was another layer's: the
  /// executor's code (`unknown_entry`, `kernel_crashed`, `unavailable`, ...) behind the
  /// engine's `executor_failed` or `executor_unavailable`. None for a failure of this layer.
  std::optional<ErrorCode> cause;
};

llvm::Error makeCodedError(ErrorCode code, const llvm::Twine &message);

/// The code of `error` if it is a CodedError; `fallback` for any other error.
ErrorCode codeOf(const llvm::ErrorInfoBase &error, ErrorCode fallback = ErrorCode::Internal);

/// Consumes `error` into its code (a CodedError's own, `fallback` for any other error) and its
/// message (a CodedError's without the "[code]" its text form adds).
std::pair<ErrorCode, std::string> takeCodeAndMessage(llvm::Error error, ErrorCode fallback);

/// Puts "`context`: " before the message of `error`, keeping a CodedError's code; any other
/// error stays uncoded. Success stays success.
llvm::Error withContext(const llvm::Twine &context, llvm::Error error);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_ERRORCODE_H
