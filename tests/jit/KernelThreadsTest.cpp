// Kernels' parallel loops: a matmul large enough to run on the kernel-thread team gives the
// same bits on one thread and on several, in a sandboxed worker and in process.
#include "jit/Engine.h"

#include "executor/KernelThreads.h"
#include "tests/jit/TestSupport.h"
#include "tests/transport/ExecutorProcess.h"

#include "llvm/Support/FormatVariadic.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace courier;
using courier::testing::ok;
using courier::testing::optionsIn;
using courier::testing::TempDir;

namespace {

/// A 256 x 256 f32 matmul (16.7M iterations: parallel) whose kernel runs at `address`.
std::string matmulProgram(const std::string &address) {
  return llvm::formatv(R"mlir(
module @app {{
  func.func public @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {{
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
  module @dev attributes {{catalyst.target = {{}, catalyst.dispatch = {{address = "{0}"}} {{
    func.func public @matmul(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {{
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<256x256xf32>
      %c = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x256xf32>) -> tensor<256x256xf32>
      %r = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%c : tensor<256x256xf32>) -> tensor<256x256xf32>
      return %r : tensor<256x256xf32>
    }
  }
}
)mlir",
                       address)
      .str();
}

std::vector<Tensor> inputs() {
  std::vector<double> a(256 * 256), b(256 * 256);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>((i * 7919) % 1000) / 997.0 - 0.5;
    b[i] = static_cast<double>((i * 104729) % 1000) / 991.0 - 0.5;
  }
  return {Tensor::fromDoubles(DType::F32, {256, 256}, a),
          Tensor::fromDoubles(DType::F32, {256, 256}, b)};
}

/// The result's bytes, from a run of the matmul at `address`.
std::vector<uint8_t> run(const std::string &address) {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(matmulProgram(address), "matmul");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", inputs());
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  const Tensor &result = (*out)[0];
  return std::vector<uint8_t>(result.bytes.begin(), result.bytes.end());
}

} // namespace

TEST_CASE("a parallel matmul in a sandboxed worker gives the same bits on two threads as on one",
          "[engine][executor][threads]") {
  testing::ExecutorProcess one({0, "", {"--kernel-threads", "1"}});
  testing::ExecutorProcess two({0, "", {"--kernel-threads", "2"}});
  std::vector<uint8_t> serial = run(one.address());
  std::vector<uint8_t> parallel = run(two.address());
  REQUIRE(serial.size() == 256 * 256 * sizeof(float));
  CHECK(serial == parallel);
}

TEST_CASE("a parallel matmul in process runs as parallel regions and gives the bits of one thread",
          "[engine][threads]") {
  executor::setKernelThreads(1);
  uint64_t before = executor::kernelThreadCounts().parallelRegions;
  std::vector<uint8_t> serial = run("local");
  CHECK(executor::kernelThreadCounts().parallelRegions > before);
  executor::setKernelThreads(2);
  std::vector<uint8_t> parallel = run("local");
  executor::setKernelThreads(0);
  CHECK(serial == parallel);
}

TEST_CASE("the default team size is the CPUs the process may run on: one under an affinity of "
          "one CPU",
          "[threads]") {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (::sched_setaffinity(0, sizeof(one), &one) != 0)
      ::_exit(2);
    // Only what is safe after fork in a process with threads: no allocation.
    ::_exit(executor::availableCpus() == 1 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
