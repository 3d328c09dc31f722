// Kernels' parallel loops: a matmul large enough to run on the kernel-thread team gives the
// same bits on one thread and on several, in a sandboxed worker and in process.
#include "jit/Engine.h"

#include "executor/KernelThreads.h"
#include "tests/jit/TestSupport.h"
#include "tests/support/KernelPrograms.h"
#include "tests/transport/ExecutorProcess.h"

#include "llvm/Support/FormatVariadic.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sched.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

std::vector<Tensor> inputs() {
  std::vector<double> a(256 * 256), b(256 * 256);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>((i * 7919) % 1000) / 997.0 - 0.5;
    b[i] = static_cast<double>((i * 104729) % 1000) / 991.0 - 0.5;
  }
  return {Tensor::fromDoubles(DType::F32, {256, 256}, a),
          Tensor::fromDoubles(DType::F32, {256, 256}, b)};
}

/// The result's bytes, from a run at `address` of a 256 x 256 f32 matmul (16.7M iterations:
/// parallel).
std::vector<uint8_t> run(const std::string &address) {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(matmulProgram(256, 256, 256, "{}", address), "matmul");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", inputs());
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  const Tensor &result = (*out)[0];
  return std::vector<uint8_t>(result.bytes.begin(), result.bytes.end());
}

/// A 4-element add: far below the size whose loops run parallel.
std::string smallProgram(const std::string &address) {
  return llvm::formatv(R"mlir(
module @small {{
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{
    %r = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf32>) -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
  module @dev attributes {{catalyst.target = {{}, catalyst.dispatch = {{address = "{0}"}} {{
    func.func public @twice(%x: tensor<4xf32>) -> tensor<4xf32> {{
      %r = arith.addf %x, %x : tensor<4xf32>
      return %r : tensor<4xf32>
    }
  }
}
)mlir",
                       address)
      .str();
}

void runSmall(const std::string &address) {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(smallProgram(address), "small");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4}));
  REQUIRE(ok(out));
  for (int64_t i = 0; i < 4; ++i)
    CHECK((*out)[0].at(i) == 2.0 * double(i + 1));
}

/// Threads of process `pid` (its status's Threads line), 0 once it is gone.
size_t threadsOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0)
      return std::stoul(line.substr(8));
  return 0;
}

} // namespace

TEST_CASE("an executor's metrics count a parallel launch and a small one by how they ran, and "
          "no kernel thread busy after",
          "[engine][executor][threads][metrics]") {
  testing::ExecutorProcess executor({0, "", {"--kernel-threads", "2"}});
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 0);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 0);
  run(executor.address());
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 1);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 0);
  runSmall(executor.address());
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 1);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 1);
  CHECK(executor.metric("courier_kernel_threads_busy") == 0);
}

TEST_CASE("an executor with --isolation=none counts its in-process launches by how they ran",
          "[engine][executor][threads][metrics]") {
  testing::ExecutorProcess executor({0, "", {"--isolation=none", "--kernel-threads", "2"}});
  run(executor.address());
  runSmall(executor.address());
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 1);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 1);
  CHECK(executor.metric("courier_kernel_threads_busy") == 0);
}

TEST_CASE("with --kernel-threads 1 the same matmul runs on one thread",
          "[engine][executor][threads]") {
  testing::ExecutorProcess executor({0, "", {"--kernel-threads", "1"}});
  run(executor.address());
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 1);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 0);
}

TEST_CASE("two sessions running a parallel matmul at once both get the bits of one thread, "
          "each worker holding no more threads than its team",
          "[engine][executor][threads]") {
  std::vector<uint8_t> serial;
  {
    testing::ExecutorProcess one({0, "", {"--kernel-threads", "1"}});
    serial = run(one.address());
  }
  constexpr size_t kTeam = 2;
  testing::ExecutorProcess executor({0, "", {"--kernel-threads", std::to_string(kTeam)}});
  std::atomic<bool> done{false};
  size_t mostPerWorker = 0, mostWorkers = 0, mostInAll = 0;
  // Sampled while both sessions compile, ship and launch, until both have their results.
  std::thread sampler([&] {
    while (!done) {
      size_t all = 0, workers = 0;
      for (pid_t worker : testing::childrenOf(executor.processId())) {
        size_t threads = threadsOf(worker);
        mostPerWorker = std::max(mostPerWorker, threads);
        all += threads;
        workers += threads ? 1 : 0;
      }
      mostInAll = std::max(mostInAll, all);
      mostWorkers = std::max(mostWorkers, workers);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto first = std::async(std::launch::async, [&] { return run(executor.address()); });
  auto second = std::async(std::launch::async, [&] { return run(executor.address()); });
  std::vector<uint8_t> a = first.get(), b = second.get();
  done = true;
  sampler.join();
  CHECK(a == serial);
  CHECK(b == serial);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 2);
  INFO("most workers at once " << mostWorkers << ", most threads in one " << mostPerWorker
                               << ", in all " << mostInAll);
  // docs/design.md: each session's worker has a team of --kernel-threads threads, the
  // launching thread among them, and no other; warm workers too.
  CHECK(mostPerWorker == kTeam);
  CHECK(mostInAll <= mostWorkers * kTeam);
}

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

TEST_CASE("an executor started under taskset -c 0 runs the parallel matmul on one thread, in "
          "workers of one thread",
          "[engine][executor][threads]") {
  // taskset itself, not an affinity set here: a process whose OpenMP runtime has started
  // (this one, after an in-process test) gives a child it forks the runtime's initial
  // affinity back.
  TempDir dir;
  std::string script = dir.path + "/taskset-executor.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nexec taskset -c 0 " << COURIER_EXECUTOR_PATH << " \"$@\"\n";
  }
  REQUIRE(::chmod(script.c_str(), 0700) == 0);
  testing::ServerProcess executor(testing::ServerSpec{script, "courier-executor", 0, "", {}});
  run(executor.address());
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"one\"}") == 1);
  CHECK(executor.metric("courier_kernel_launches_total{threads=\"parallel\"}") == 0);
  std::vector<pid_t> workers = testing::childrenOf(executor.processId());
  CHECK_FALSE(workers.empty());
  for (pid_t worker : workers) {
    INFO("worker " << worker);
    CHECK(threadsOf(worker) == 1);
  }
}
