// What failures say, in the names the user wrote: a kernel as `@dev::@scale` (not its entry
// symbol), a module by the name it was compiled under (not its MLIR symbol).
#include "jit/DiskCache.h"
#include "runtime/Runtime.h"
#include "tests/jit/TestSupport.h"
#include "tests/support/KernelPrograms.h"
#include "tests/transport/ExecutorProcess.h"

using namespace courier;
using namespace courier::testing;

namespace {

/// A module @app whose kernel @dev::@null_load (launched by the entry @null_load) loads from
/// address 0, sent to `address`.
std::string nullLoadAt(const std::string &address) {
  return kernelModule({{"null_load",
                        {"tensor<4xf64>"},
                        "tensor<4xf64>",
                        "      %null = llvm.mlir.zero : !llvm.ptr\n"
                        "      %v = llvm.load volatile %null : !llvm.ptr -> f64\n"
                        "      %s = tensor.splat %v : tensor<4xf64>\n"
                        "      %r = arith.addf %a0, %s : tensor<4xf64>\n"}},
                      "{}", address);
}

} // namespace

TEST_CASE("a kernel is named as its MLIR names it, from the object name the engine gives",
          "[messages]") {
  CHECK(runtime::kernelName("_catalyst_pyface_spin", targetObjectName(0, "dev")) == "@dev::@spin");
  CHECK(runtime::kernelName("spin", targetObjectName(3, "gpu_part")) == "@gpu_part::@spin");
  // Catalyst's IR names objects by path: the kernel keeps its own name.
  CHECK(runtime::kernelName("_catalyst_pyface_spin", "/w/kernels.o") == "@spin");
  char none[8] = "x";
  CHECK(!runtime::kernelInFlight(none, sizeof none));
  CHECK(std::string(none) == "x");
}

TEST_CASE("a failed launch names the kernel @dev::@null_load, not its entry symbol, in the "
          "executor's words too",
          "[messages][executor]") {
  TempDir dir;
  testing::ExecutorProcess executor;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(nullLoadAt(executor.address()), "crashing");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("null_load", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(failed(out));
  std::string message = llvm::toString(out.takeError());
  CHECK_THAT(message, Catch::StartsWith("invoking 'null_load' of module 'crashing': launch of "
                                        "@dev::@null_load on '" +
                                        executor.address() + "': "));
  // The executor, which knows the kernel by its entry symbol, said where its worker died.
  CHECK_THAT(message, Catch::Contains("SIGSEGV (address 0x0) in @dev::@null_load"));
  CHECK_THAT(message, !Catch::Contains("_catalyst_pyface_"));
  CHECK_THAT(message, Catch::EndsWith("[kernel_crashed]"));
}

TEST_CASE("a failed compile's summary names the module as the caller named it", "[messages]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  // A target no code generator knows: the module is @app, the caller's name 's'.
  auto module = engine.compile(R"(module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {triple = "nonsense-unknown-nothing"}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> {
      return %x : tensor<4xf64>
    }
  }
})",
                               "s");
  REQUIRE(failed(module));
  std::string summary;
  llvm::handleAllErrors(module.takeError(), [&](const CompileError &e) { summary = e.summary; });
  CHECK(summary == "lowering 's' failed");
}

TEST_CASE("host code calling a function nothing defines names it as the IR does, not by its "
          "C-interface symbol",
          "[messages]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(R"(module {
  func.func private @printThing(memref<*xf32>) attributes {llvm.emit_c_interface}
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %m = bufferization.to_buffer %x : tensor<4xf32> to memref<4xf32>
    %u = memref.cast %m : memref<4xf32> to memref<*xf32>
    call @printThing(%u) : (memref<*xf32>) -> ()
    return %x : tensor<4xf32>
  }
})",
                               "calls.mlir");
  REQUIRE(failed(module));
  std::string message = llvm::toString(module.takeError());
  CHECK_THAT(message, Catch::StartsWith("linking 'calls.mlir': its host code calls @printThing, "
                                        "which nothing defines"));
  CHECK_THAT(message, !Catch::Contains("_mlir_ciface_") && !Catch::Contains("_courier_packed_"));

  // A module with no entry fails no entry's lookup: its setup() is not taken for absent.
  auto setupOnly = engine.compile(R"(module {
  func.func private @nothingHere()
  func.func public @setup() {
    call @nothingHere() : () -> ()
    return
  }
})",
                                  "setup-only");
  REQUIRE(failed(setupOnly));
  CHECK_THAT(llvm::toString(setupOnly.takeError()),
             Catch::StartsWith("linking 'setup-only': its host code calls @nothingHere, "
                               "which nothing defines"));
}
