// Programs whose loops carry a kernel's result into the next iteration (scf.for, scf.while)
// and branches that yield one (scf.if): their numbers, and that every iteration's buffer is
// freed, on the in-process executor.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/support/Sanitized.h"
#include "tests/transport/ExecutorProcess.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <malloc.h>
#include <unistd.h>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

const char *kLoops = R"mlir(
module @app {
  // n launches, each taking the previous one's result.
  func.func public @for_steps(%x: tensor<4xf64>, %n: index) -> tensor<4xf64> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
      %y = catalyst.launch_kernel @dev::@step(%acc) : (tensor<4xf64>) -> tensor<4xf64>
      scf.yield %y : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }
  // Launches while element 0 of the last result is below `limit`; returns it and the count.
  func.func public @while_below(%x: tensor<4xf64>, %limit: f64) -> (tensor<4xf64>, index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r:2 = scf.while (%acc = %x, %k = %c0) : (tensor<4xf64>, index) -> (tensor<4xf64>, index) {
      %e = tensor.extract %acc[%c0] : tensor<4xf64>
      %go = arith.cmpf olt, %e, %limit : f64
      scf.condition(%go) %acc, %k : tensor<4xf64>, index
    } do {
    ^bb0(%a: tensor<4xf64>, %j: index):
      %y = catalyst.launch_kernel @dev::@step(%a) : (tensor<4xf64>) -> tensor<4xf64>
      %j1 = arith.addi %j, %c1 : index
      scf.yield %y, %j1 : tensor<4xf64>, index
    }
    return %r#0, %r#1 : tensor<4xf64>, index
  }
  // Launches, then tests the launch's result: runs at least once, until element 0 reaches
  // `limit`.
  func.func public @until_reached(%x: tensor<4xf64>, %limit: f64) -> tensor<4xf64> {
    %c0 = arith.constant 0 : index
    %r = scf.while (%acc = %x) : (tensor<4xf64>) -> (tensor<4xf64>) {
      %y = catalyst.launch_kernel @dev::@step(%acc) : (tensor<4xf64>) -> tensor<4xf64>
      %e = tensor.extract %y[%c0] : tensor<4xf64>
      %go = arith.cmpf olt, %e, %limit : f64
      scf.condition(%go) %y : tensor<4xf64>
    } do {
    ^bb0(%a: tensor<4xf64>):
      scf.yield %a : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }
  // Launches on even iterations only: the carried buffer is sometimes the kernel's, sometimes
  // the one from before.
  func.func public @every_other(%x: tensor<4xf64>, %n: index) -> tensor<4xf64> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
      %odd = arith.remui %i, %c2 : index
      %even = arith.cmpi eq, %odd, %c0 : index
      %next = scf.if %even -> (tensor<4xf64>) {
        %y = catalyst.launch_kernel @dev::@step(%acc) : (tensor<4xf64>) -> tensor<4xf64>
        scf.yield %y : tensor<4xf64>
      } else {
        scf.yield %acc : tensor<4xf64>
      }
      scf.yield %next : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }
  // The kernel's result, or the caller's own tensor.
  func.func public @pick(%x: tensor<4xf64>, %launch: i1) -> tensor<4xf64> {
    %r = scf.if %launch -> (tensor<4xf64>) {
      %y = catalyst.launch_kernel @dev::@step(%x) : (tensor<4xf64>) -> tensor<4xf64>
      scf.yield %y : tensor<4xf64>
    } else {
      scf.yield %x : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @step(%x: tensor<4xf64>) -> tensor<4xf64> {
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %y = arith.addf %x, %one : tensor<4xf64>
      return %y : tensor<4xf64>
    }
  }
}
)mlir";

Tensor start() { return Tensor::fromDoubles(DType::F64, {4}, {0, 1, 2, 3}); }
Tensor count(int64_t n) { return Tensor::fromDoubles(DType::I64, {}, {double(n)}); }
Tensor limit(double value) { return Tensor::fromDoubles(DType::F64, {}, {value}); }
Tensor flag(bool value) { return Tensor::fromDoubles(DType::I1, {}, {value ? 1.0 : 0.0}); }

std::vector<double> plus(double n) { return {n, n + 1, n + 2, n + 3}; }

std::shared_ptr<Module> compileLoops(Engine &engine) {
  auto module = engine.compile(kLoops, "loops.mlir");
  REQUIRE(ok(module));
  return *module;
}

/// The first result of `entry` on `inputs`, as numbers.
std::vector<double> run(const Module &module, llvm::StringRef entry, std::vector<Tensor> inputs) {
  auto out = module.invoke(entry, inputs);
  REQUIRE(ok(out));
  REQUIRE(!out->empty());
  return values(out->front());
}

constexpr bool kMemoryIsMeasurable = !courier::testing::kSanitized;

/// What this process holds: heap bytes in use (every malloc arena and mmap'd chunk) and the
/// resident set.
struct Memory {
  size_t heap = 0, resident = 0;
  static Memory now() {
    struct mallinfo2 info = mallinfo2();
    std::ifstream statm("/proc/self/statm");
    size_t size = 0, pages = 0;
    statm >> size >> pages;
    return {info.uordblks + info.hblkhd, pages * size_t(sysconf(_SC_PAGESIZE))};
  }
};

/// Runs `loop` with a short trip count (twice, so per-thread caches are warm), then with a
/// long one, and checks that memory held afterwards did not grow with the trip count.
template <typename Loop> void checkNoGrowth(Loop loop, int64_t shortTrips, int64_t longTrips) {
  loop(shortTrips);
  loop(shortTrips);
  Memory before = Memory::now();
  loop(longTrips);
  Memory after = Memory::now();
  if (!kMemoryIsMeasurable) {
    WARN("built with AddressSanitizer: its quarantine makes memory figures meaningless");
    return;
  }
  INFO("heap in use grew by " << (after.heap > before.heap ? after.heap - before.heap : 0)
                              << " bytes, the resident set by "
                              << (after.resident > before.resident
                                      ? after.resident - before.resident
                                      : 0)
                              << " bytes over " << longTrips << " iterations");
  // One buffer kept per iteration (32 bytes of data, 64-byte aligned) would be at least
  // 32 MB at 10^6 iterations; a leak of even 8 bytes per iteration would show here.
  CHECK(after.heap < before.heap + 1024 * 1024);
  CHECK(after.resident < before.resident + 4 * 1024 * 1024);
}

constexpr int64_t kShortTrips = 10000;
constexpr int64_t kLongTrips = 1000000;

} // namespace

TEST_CASE("an scf.for carries each kernel result into the next launch", "[jit][loops]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileLoops(engine);
  CHECK(run(*module, "for_steps", {start(), count(0)}) == plus(0));
  CHECK(run(*module, "for_steps", {start(), count(1)}) == plus(1));
  CHECK(run(*module, "for_steps", {start(), count(10)}) == plus(10));
}

TEST_CASE("an scf.while whose condition reads a kernel result stops where it should",
          "[jit][loops]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileLoops(engine);
  auto out = module->invoke("while_below", {start(), limit(10.5)});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 2);
  CHECK(values((*out)[0]) == plus(11));
  CHECK(values((*out)[1]) == std::vector<double>{11});
  // A condition false from the start runs no launch and returns the input's values.
  auto none = module->invoke("while_below", {start(), limit(-1)});
  REQUIRE(ok(none));
  CHECK(values((*none)[0]) == plus(0));
  CHECK(values((*none)[1]) == std::vector<double>{0});
  // A condition on the launch's own result runs the kernel at least once.
  CHECK(run(*module, "until_reached", {start(), limit(10)}) == plus(10));
  CHECK(run(*module, "until_reached", {start(), limit(-1)}) == plus(1));
}

TEST_CASE("an scf.if yields either a kernel result or the value from before", "[jit][loops]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileLoops(engine);
  CHECK(run(*module, "pick", {start(), flag(true)}) == plus(1));
  CHECK(run(*module, "pick", {start(), flag(false)}) == plus(0));
  CHECK(run(*module, "every_other", {start(), count(1)}) == plus(1));
  CHECK(run(*module, "every_other", {start(), count(7)}) == plus(4));
  CHECK(run(*module, "every_other", {start(), count(8)}) == plus(4));
}

TEST_CASE("loops carry kernel results computed by a courier-executor process", "[jit][loops]") {
  TempDir dir;
  testing::ExecutorProcess executor;
  EngineOptions options = optionsIn(dir);
  options.executorOverride = executor.address();
  Engine engine(options);
  auto module = compileLoops(engine);
  CHECK(run(*module, "for_steps", {start(), count(100)}) == plus(100));
  CHECK(run(*module, "while_below", {start(), limit(99.5)}) == plus(100));
  CHECK(run(*module, "until_reached", {start(), limit(100)}) == plus(100));
  CHECK(run(*module, "every_other", {start(), count(100)}) == plus(50));
}

TEST_CASE("a million iterations of a loop carrying kernel results hold no more memory than "
          "ten thousand",
          "[jit][loops][leak]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileLoops(engine);

  SECTION("scf.for") {
    checkNoGrowth(
        [&](int64_t n) {
          CHECK(run(*module, "for_steps", {start(), count(n)}) == plus(double(n)));
        },
        kShortTrips, kLongTrips);
  }
  SECTION("scf.while") {
    checkNoGrowth(
        [&](int64_t n) {
          auto out = module->invoke("while_below", {start(), limit(double(n) - 0.5)});
          REQUIRE(ok(out));
          CHECK(values((*out)[1]) == std::vector<double>{double(n)});
          CHECK(values((*out)[0]) == plus(double(n)));
        },
        kShortTrips, kLongTrips);
  }
  SECTION("scf.while testing each launch's result") {
    checkNoGrowth(
        [&](int64_t n) {
          CHECK(run(*module, "until_reached", {start(), limit(double(n))}) == plus(double(n)));
        },
        kShortTrips, kLongTrips);
  }
  SECTION("scf.if inside scf.for") {
    checkNoGrowth(
        [&](int64_t n) {
          CHECK(run(*module, "every_other", {start(), count(n)}) == plus(double(n / 2)));
        },
        kShortTrips, kLongTrips);
  }
  SECTION("scf.if returning the caller's tensor or a kernel's") {
    checkNoGrowth(
        [&](int64_t n) {
          for (int64_t i = 0; i < n / 100; ++i)
            CHECK(run(*module, "pick", {start(), flag(i % 2 == 0)}) == plus(i % 2 == 0));
        },
        kShortTrips, kLongTrips);
  }
}
