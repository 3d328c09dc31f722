// Programs in Catalyst's executor IR, run end to end: asynchronous launches, bring-up
// functions and dispatched library calls, on the in-process executor and on a real
// courier-executor process.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/kernels/KernelPaths.h"
#include "tests/transport/ExecutorProcess.h"

#include "llvm/ADT/StringExtras.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

/// `text` with every ADDRESS replaced by `address`.
std::string at(std::string text, const std::string &address) {
  for (size_t found; (found = text.find("ADDRESS")) != std::string::npos;)
    text.replace(found, 7, address);
  return text;
}

/// A counter kept by the target object: `bump` (launched without waiting) spins a while and
/// then adds one, atomically since launches run at once; `read` returns the count. The
/// host's `start` launches bump twice without waiting, so the count is complete when it
/// returns only if the launches were awaited.
const char *kAsyncProgram = R"mlir(
module @async {
  func.func public @start() {
    catalyst.launch_kernel @dev::@bump() {catalyst.nonblocking} : () -> ()
    catalyst.launch_kernel @dev::@bump() {catalyst.nonblocking} : () -> ()
    return
  }
  func.func public @count() -> tensor<i64> {
    %n = catalyst.launch_kernel @dev::@read() : () -> tensor<i64>
    return %n : tensor<i64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    memref.global "private" @counter : memref<i64> = dense<0>
    memref.global "private" @spins : memref<i64> = dense<0>
    func.func public @bump() {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = arith.constant 200000 : index
      %one = arith.constant 1 : i64
      %spins = memref.get_global @spins : memref<i64>
      scf.for %i = %c0 to %n step %c1 {
        %s = memref.atomic_rmw addi %one, %spins[] : (i64, memref<i64>) -> i64
      }
      %counter = memref.get_global @counter : memref<i64>
      %old = memref.atomic_rmw addi %one, %counter[] : (i64, memref<i64>) -> i64
      return
    }
    func.func public @read() -> tensor<i64> {
      %c = memref.get_global @counter : memref<i64>
      %n = memref.load %c[] : memref<i64>
      %t = tensor.from_elements %n : tensor<i64>
      return %t : tensor<i64>
    }
  }
}
)mlir";

/// A bring-up function starts a serving entry without waiting and then prepares the other
/// module; `compute` launches without shipping anything.
const char *kBringupProgram = R"mlir(
module @bringup {
  func.func public @bring_up() attributes {catalyst.backline_bringup} {
    catalyst.launch_kernel @co::@serve() {catalyst.nonblocking} : () -> ()
    catalyst.launch_kernel @dev::@prepare() : () -> ()
    return
  }
  func.func public @compute(%x: tensor<3xf64>) -> tensor<3xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<3xf64>) -> tensor<3xf64>
    return %y : tensor<3xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @prepare() { return }
    func.func public @twice(%x: tensor<3xf64>) -> tensor<3xf64> {
      %y = arith.addf %x, %x : tensor<3xf64>
      return %y : tensor<3xf64>
    }
  }
  module @co attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @serve() { return }
  }
}
)mlir";

/// `courier_test_sum` is a symbol of the executor's plugin: a library call, named by its
/// address or bound with dispatch = "" to the program's single executor.
const char *kLibraryCallProgram = R"mlir(
module @library {
  func.func public @sum(%x: tensor<3xf64>) -> tensor<1xf64> {
    %s = catalyst.custom_call fn("courier_test_sum") (%x) {backend_config = {dispatch = "ADDRESS"}} : (tensor<3xf64>) -> tensor<1xf64>
    return %s : tensor<1xf64>
  }
  func.func public @sum_of_twice(%x: tensor<3xf64>) -> tensor<1xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<3xf64>) -> tensor<3xf64>
    %s = catalyst.custom_call fn("courier_test_sum") (%y) {backend_config = {dispatch = ""}} : (tensor<3xf64>) -> tensor<1xf64>
    return %s : tensor<1xf64>
  }
  func.func public @failing(%x: tensor<3xf64>) -> tensor<1xf64> {
    %s = catalyst.custom_call fn("courier_test_fail") (%x) {backend_config = {dispatch = ""}} : (tensor<3xf64>) -> tensor<1xf64>
    return %s : tensor<1xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "ADDRESS"}} {
    func.func public @twice(%x: tensor<3xf64>) -> tensor<3xf64> {
      %y = arith.addf %x, %x : tensor<3xf64>
      return %y : tensor<3xf64>
    }
  }
}
)mlir";

Tensor vector3(double a, double b, double c) {
  return Tensor::fromDoubles(DType::F64, {3}, {a, b, c});
}

/// Runs the three programs against the executor at `address` with `engine`.
void runsCatalystPrograms(Engine &engine, const std::string &address) {
  SECTION("nonblocking launches are awaited before the launching function returns") {
    auto module = engine.compile(at(kAsyncProgram, address), "async");
    REQUIRE(ok(module));
    for (int i = 0; i < 3; ++i)
      REQUIRE(ok((*module)->invoke("start", {})));
    auto count = (*module)->invoke("count", {});
    REQUIRE(ok(count));
    CHECK((*count)[0].at(0) == 6);
  }
  // That the others do not ship is the pass's to show (tests/passes); here the program runs.
  SECTION("a program with a bring-up function runs its launches") {
    auto module = engine.compile(at(kBringupProgram, address), "bringup");
    REQUIRE(ok(module));
    REQUIRE(ok((*module)->invoke("bring_up", {})));
    for (int i = 0; i < 2; ++i) {
      auto out = (*module)->invoke("compute", {vector3(1, 2, 3)});
      REQUIRE(ok(out));
      CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6});
    }
  }
  SECTION("dispatched custom calls run the executor's symbol") {
    auto module = engine.compile(at(kLibraryCallProgram, address), "library");
    REQUIRE(ok(module));
    auto sum = (*module)->invoke("sum", {vector3(1, 2, 3.5)});
    REQUIRE(ok(sum));
    CHECK(values((*sum)[0]) == std::vector<double>{6.5});
    auto bound = (*module)->invoke("sum_of_twice", {vector3(1, 2, 3)});
    REQUIRE(ok(bound));
    CHECK(values((*bound)[0]) == std::vector<double>{12});
    // The callee's failure is the invoke's, and the module keeps serving.
    auto failing = (*module)->invoke("failing", {vector3(1, 2, 3)});
    REQUIRE(failed(failing));
    CHECK_THAT(llvm::toString(failing.takeError()), Catch::Contains("courier_test_fail"));
    CHECK(ok((*module)->invoke("sum", {vector3(1, 1, 1)})));
  }
}

} // namespace

TEST_CASE("Catalyst's async launches, bring-up functions and library calls run in process",
          "[engine][catalyst]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.executors.plugins = {COURIER_TEST_PLUGIN};
  Engine engine(options);
  runsCatalystPrograms(engine, "local");
}

TEST_CASE("Catalyst's async launches, bring-up functions and library calls run on a real "
          "executor",
          "[engine][catalyst][executor]") {
  TempDir dir;
  testing::ExecutorProcess executor({0, "", {"--plugin", COURIER_TEST_PLUGIN}});
  Engine engine(optionsIn(dir));
  runsCatalystPrograms(engine, executor.address());
}
