// The one error-code table and the one ErrorInfo every layer carries codes in.
#include "transport/ErrorCode.h"
#include "transport/Wire.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace courier::transport;

namespace {

/// The code and text of `error`, which must be a CodedError.
std::pair<ErrorCode, std::string> codeAndText(llvm::Error error) {
  ErrorCode code = ErrorCode::Internal;
  bool coded = false;
  std::string text = llvm::toString(
      llvm::handleErrors(std::move(error), [&](std::unique_ptr<CodedError> e) -> llvm::Error {
        code = e->kind;
        coded = true;
        return llvm::Error(std::move(e));
      }));
  CHECK(coded);
  return {code, text};
}

} // namespace

TEST_CASE("every code's wire name is unique and parses back to that code", "[errors]") {
  std::set<std::string> names;
  for (const ErrorCodeInfo &info : kErrorTable) {
    INFO(info.code);
    CHECK(names.insert(info.code).second);
    CHECK(parseErrorCode(info.code) == info.value);
    CHECK(errorCodeName(info.value) == info.code);
    CHECK(httpStatus(info.value) == info.status);
  }
  CHECK(!parseErrorCode("no_such_code"));
  CHECK(!parseErrorCode(""));
}

TEST_CASE("a code two servers send has one status, and each server's list is its own rows",
          "[errors]") {
  CHECK(httpStatus(ErrorCode::KernelCrashed) == 500);
  CHECK(httpStatus(ErrorCode::DeadlineExceeded) == 504);
  CHECK(httpStatus(ErrorCode::WorkerUnavailable) == 503);
  CHECK(httpStatus(ErrorCode::SignatureMismatch) == 422);
  CHECK(httpStatus(ErrorCode::UnsignedObject) == 422);
  std::set<std::string> executor, serve;
  for (const ErrorCodeInfo &info : codesSentBy<kSentByExecutor>())
    executor.insert(info.code);
  for (const ErrorCodeInfo &info : codesSentBy<kSentByServe>())
    serve.insert(info.code);
  CHECK(executor.count("kernel_crashed") == 1);
  // Module workers crash and time out as session workers do.
  CHECK(serve.count("kernel_crashed") == 1);
  CHECK(serve.count("deadline_exceeded") == 1);
  CHECK(serve.count("compile_crashed") == 1);
  CHECK(executor.count("compile_crashed") == 0);
  CHECK(serve.count("compile_failed") == 1);
  CHECK(executor.count("compile_failed") == 0);
  CHECK(executor.count("bad_request") == 1);
  CHECK(serve.count("bad_request") == 1);
  // Raised inside the client, never sent by either server.
  CHECK(executor.count("unavailable") == 0);
  CHECK(serve.count("unavailable") == 0);
  CHECK(executor.count("tls_failed") == 0);
  CHECK(serve.count("tls_failed") == 0);
}

TEST_CASE("a coded error keeps its code through added context and prints it last", "[errors]") {
  auto [code, text] = codeAndText(withContext(
      "launching 'k' on h:1", makeCodedError(ErrorCode::KernelCrashed, "SIGSEGV in 'k'")));
  CHECK(code == ErrorCode::KernelCrashed);
  CHECK(text == "launching 'k' on h:1: SIGSEGV in 'k' [kernel_crashed]");

  std::string plain = llvm::toString(withContext("opening", llvm::createStringError("no file")));
  CHECK(plain == "opening: no file");
  CHECK(!withContext("nothing", llvm::Error::success()));
}

TEST_CASE("an error body names its code", "[errors]") {
  CHECK(wire::errorBody(ErrorCode::UnknownObject, "gone") ==
        R"({"error":{"code":"unknown_object","message":"gone"}})");
}
