// A program that links the runtime and nothing of the executor (CMakeLists.txt links this one
// with CourierRuntime alone): remote executors work, and "local" is refused by a message that
// says what to link.
#include "runtime/Runtime.h"
#include "transport/Backend.h"
#include "transport/ErrorCode.h"

#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>

using namespace courier;

TEST_CASE("without the executor library \"local\" is refused, naming what to link", "[runtime]") {
  llvm::Expected<std::unique_ptr<transport::Backend>> backend =
      transport::createBackend("local", {});
  REQUIRE(!backend);
  std::optional<transport::ErrorCode> code;
  std::string message;
  llvm::handleAllErrors(backend.takeError(), [&](const transport::CodedError &e) {
    code = e.kind;
    message = e.message;
  });
  CHECK(code == transport::ErrorCode::BadRequest);
  CHECK_THAT(message, Catch::Contains("the in-process executor (\"local\") is not part of this "
                                      "program: link the executor library (Courier::Executor)"));

  runtime::clearError();
  CHECK(__catalyst__executor__open("local") == 0);
  llvm::Error error = runtime::takeError();
  std::string text = error ? llvm::toString(std::move(error)) : "";
  CHECK_THAT(text, Catch::Contains("Courier::Executor"));
}

TEST_CASE("without the executor library the runtime reaches a remote executor", "[runtime]") {
  testing::ExecutorProcess executor;
  runtime::clearError();
  int64_t session = __catalyst__executor__open(executor.address().c_str());
  REQUIRE(session != 0);
  REQUIRE(__catalyst__executor__send_binary(session, COURIER_KERNEL_SCALE,
                                            COURIER_BINARY_FORMAT_OBJECT) == 0);
  double x[3] = {1, 2, 3};
  struct {
    void *allocated, *aligned;
    int64_t offset, size, stride;
  } in{x, x, 0, 3, 1}, out{nullptr, nullptr, 0, 0, 0};
  void *ins[] = {&in}, *outs[] = {&out};
  size_t ranks[] = {1}, sizes[] = {8};
  __catalyst__executor__launch(session, "_catalyst_pyface_scale", COURIER_KERNEL_SCALE, 1, ins,
                               ranks, sizes, 1, outs, ranks, sizes);
  llvm::Error error = runtime::takeError();
  INFO((error ? llvm::toString(std::move(error)) : std::string()));
  REQUIRE(out.size == 3);
  auto *y = static_cast<double *>(out.aligned);
  CHECK(y[0] == 2);
  CHECK(y[2] == 6);
  std::free(out.allocated);
  CHECK(__catalyst__executor__close(session) == 0);
}
