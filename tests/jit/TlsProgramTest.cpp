// Engine programs whose target module names an executor at an https:// address: the runtime
// verifies it with the engine's TLS settings, in process and in an isolated module's worker.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/support/ServerProcess.h"
#include "tests/support/TestCertificates.h"

#include <catch2/catch.hpp>

#include <string>

using namespace courier;
using namespace courier::testing;

namespace {

/// Doubles its input on the executor at `address`.
std::string program(const std::string &address) {
  return R"mlir(
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = ")mlir" +
         address + R"mlir("}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
)mlir";
}

std::unique_ptr<ServerProcess> tlsExecutor(const TestCertificates &pki) {
  return startTlsServer(pki, COURIER_EXECUTOR_PATH, "courier-executor");
}

Tensor vector4() { return Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4}); }

/// Compiles the program for a TLS executor with `isolation` and the test CA, and checks that
/// it doubles its input there.
void doublesOnTlsExecutor(Isolation isolation) {
  TestCertificates pki;
  auto executor = tlsExecutor(pki);
  EngineOptions options;
  options.diskCache = false;
  options.isolation = isolation;
  options.executors.tls.caFile = pki.caCert;
  Engine engine(options);
  auto module = engine.compile(program(executor->address()), "app");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {vector4()});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
}

} // namespace

TEST_CASE("a program reaches the executor at the https:// address in its IR with the engine's CA",
          "[engine][tls]") {
  doublesOnTlsExecutor(Isolation::InProcess);
}

TEST_CASE("an isolated module's worker verifies the executor with the engine's CA",
          "[engine][tls][isolation]") {
  doublesOnTlsExecutor(Isolation::Process);
}

TEST_CASE("a program whose executor's certificate the engine cannot verify fails to load, "
          "naming the address and the unknown CA",
          "[engine][tls]") {
  TestCertificates pki;
  auto executor = tlsExecutor(pki);
  EngineOptions options;
  options.diskCache = false;
  options.executors.tls.caFile = pki.otherCaCert;
  Engine engine(options);
  auto module = engine.compile(program(executor->address()), "app");
  std::string text;
  ErrorCode kind = ErrorCode::Internal;
  if (module) {
    auto out = (*module)->invoke("main", {vector4()});
    REQUIRE(!out);
    llvm::handleAllErrors(out.takeError(), [&](const EngineError &e) {
      kind = e.kind;
      text = e.message;
    });
  } else {
    llvm::handleAllErrors(
        module.takeError(),
        [&](const EngineError &e) {
          kind = e.kind;
          text = e.message;
        },
        [&](const llvm::ErrorInfoBase &e) { text = e.message(); });
  }
  CHECK(kind == ErrorCode::ExecutorUnavailable);
  CHECK_THAT(text, Catch::Contains(executor->address()));
  CHECK_THAT(text, Catch::Contains("unknown CA"));
  CHECK_THAT(text, Catch::Contains("[tls_failed]"));
}
