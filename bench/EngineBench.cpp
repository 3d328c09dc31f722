// Engine benchmarks: cold compile against mlir-opt | mlir-runner, cache hits, invoke
// overhead against a direct kernel call, and hot reload latency and safety under load.
// Every comparison is measured in the same run; see docs/performance.md.
#include "jit/Engine.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

using namespace courier;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    llvm::errs() << "cannot read " << path << "\n";
    std::exit(1);
  }
  return (*buffer)->getBuffer().str();
}

void writeFile(const std::string &path, llvm::StringRef text) {
  // Through a rename, as editors save: the watcher must see one complete file.
  std::string temp = path + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(temp, ec);
    os << text;
  }
  llvm::sys::fs::rename(temp, path);
}

/// Runs a command to completion (output discarded) and returns its wall time in ms.
double timeCommand(llvm::ArrayRef<llvm::StringRef> argv,
                   std::optional<llvm::StringRef> stdinFile = {}) {
  std::optional<llvm::StringRef> redirects[] = {stdinFile ? stdinFile : llvm::StringRef(""),
                                                llvm::StringRef(""), llvm::StringRef("")};
  auto start = Clock::now();
  std::string error;
  int status = llvm::sys::ExecuteAndWait(argv[0], argv, std::nullopt, redirects, 0, 0, &error);
  double ms = msSince(start);
  if (status != 0) {
    llvm::errs() << "command failed (" << status << "): " << argv[0] << " " << error << "\n";
    std::exit(1);
  }
  return ms;
}

struct Paths {
  std::string bin, source, temp;
};

const char *kMlirBin = "/usr/lib/llvm-22/bin";

void coldCompile(const Paths &paths) {
  llvm::outs() << "## cold compile: courier-run vs mlir-opt | mlir-runner (sample 1)\n";
  std::string courierRun = paths.bin + "/courier-run";
  std::string sample = paths.source + "/samples/01-host-only/app.mlir";
  std::string runnerInput = paths.source + "/bench/inputs/host-only-runner.mlir";
  std::string lowered = paths.temp + "/lowered.mlir";
  std::string mlirOpt = std::string(kMlirBin) + "/mlir-opt";
  std::string mlirRunner = std::string(kMlirBin) + "/mlir-runner";
  std::string pipeline =
      "--pass-pipeline=builtin.module(func.func(convert-elementwise-to-linalg),"
      "one-shot-bufferize{bufferize-function-boundaries "
      "function-boundary-type-conversion=identity-layout-map},func.func(convert-linalg-to-loops),"
      "expand-strided-metadata,lower-affine,convert-scf-to-cf,finalize-memref-to-llvm,"
      "convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)";
  std::string libs = "-shared-libs=/usr/lib/llvm-22/lib/libmlir_c_runner_utils.so,"
                     "/usr/lib/llvm-22/lib/libmlir_runner_utils.so";
  std::vector<double> courier, runner;
  for (int i = 0; i < 11; ++i) {
    courier.push_back(timeCommand(
        {courierRun, sample, "--arg", "[1,2,3,4]", "--arg", "[1,1,1,1]", "--no-disk-cache"}));
    // mlir-runner takes LLVM-dialect input: the lowering is part of its compile.
    double opt = timeCommand({mlirOpt, runnerInput, pipeline, "-o", lowered});
    double run =
        timeCommand({mlirRunner, lowered, "-e", "driver", "-entry-point-result=void", libs});
    runner.push_back(opt + run);
  }
  double c = median(courier), r = median(runner);
  llvm::outs() << llvm::formatv(
      "courier-run (parse, passes, link, run)   {0,8:f2} ms\n"
      "mlir-opt + mlir-runner                   {1,8:f2} ms\n"
      "ratio courier / mlir-runner              {2,8:f2}  (target <= 1.0)\n\n",
      c, r, c / r);
}

void caches(const Paths &paths) {
  llvm::outs() << "## caches (sample 2)\n";
  std::string text = readFile(paths.source + "/samples/02-local-kernel/app.mlir");
  std::string cacheDir = paths.temp + "/cache";
  std::vector<double> cold, disk;
  for (int i = 0; i < 7; ++i) {
    llvm::sys::fs::remove_directories(cacheDir);
    EngineOptions options;
    options.cacheDir = cacheDir;
    {
      Engine engine(options);
      auto start = Clock::now();
      auto module = engine.compile(text, "app");
      cold.push_back(msSince(start));
      if (!module)
        std::exit((llvm::errs() << llvm::toString(module.takeError()) << "\n", 1));
    }
    // A new engine has an empty memory cache: this is what a second process sees.
    Engine engine(options);
    auto start = Clock::now();
    auto module = engine.compile(text, "app");
    disk.push_back(msSince(start));
    if (!module || !(*module)->compileTimes().cacheHit)
      std::exit((llvm::errs() << "expected a disk-cache hit\n", 1));
  }
  EngineOptions options;
  options.cacheDir = cacheDir;
  Engine engine(options);
  auto held = engine.compile(text, "app");
  std::vector<double> memory;
  for (int i = 0; i < 2000; ++i) {
    auto start = Clock::now();
    auto again = engine.compile(text, "app");
    memory.push_back(msSince(start));
    if (!again || again->get() != held->get())
      std::exit((llvm::errs() << "expected a memory-cache hit\n", 1));
  }
  double c = median(cold), d = median(disk), m = median(memory);
  llvm::outs() << llvm::formatv(
      "cold compile (in process)                {0,8:f2} ms\n"
      "disk-cache hit, new engine               {1,8:f2} ms   ({2:f1}x faster than cold)\n"
      "memory-cache hit                         {3,8:f4} ms   (p99 {4:f4} ms; target <= 2 ms)\n\n",
      c, d, c / d, m, percentile(memory, 0.99));
}

void invokeOverhead(const Paths &paths) {
  llvm::outs() << "## invoke overhead: sample 2 through the engine vs its kernel called directly\n";
  EngineOptions options;
  options.cacheDir = paths.temp + "/cache";
  Engine engine(options);
  auto dispatched =
      engine.compile(readFile(paths.source + "/samples/02-local-kernel/app.mlir"), "app");
  // The same kernel as a host-only function, called through its C interface.
  auto direct = engine.compile(R"mlir(
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      %two = arith.constant dense<2.0> : tensor<4xf64>
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %d = arith.mulf %x, %two : tensor<4xf64>
      %r = arith.addf %d, %one : tensor<4xf64>
      return %r : tensor<4xf64>
    })mlir",
                               "kernel");
  // The same program with a bring-up function, so `main` launches without the ship at its
  // top that Catalyst's rule adds to every launching function.
  std::string withBringup = readFile(paths.source + "/samples/02-local-kernel/app.mlir");
  withBringup.insert(withBringup.find("  func.func public @main"),
                     "  func.func @bring_up() attributes {catalyst.backline_bringup} {\n"
                     "    return\n  }\n");
  auto unshipped = engine.compile(withBringup, "app-bringup");
  if (!dispatched || !direct || !unshipped)
    std::exit((llvm::errs() << "compile failed\n", 1));
  struct Desc1D {
    double *allocated, *aligned;
    int64_t offset, size, stride;
  };
  auto ciface = reinterpret_cast<void (*)(Desc1D *, Desc1D *)>((*direct)->rawEntry("scale"));
  double data[4] = {1, 2, 3, 4};
  Desc1D in{data, data, 0, 4, 1};
  Tensor input = Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4});

  const int n = 20000;
  std::vector<double> viaEngine, viaCiface, withoutShip;
  auto invokeMain = [&](Module &module) {
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      auto out = module.invoke("main", {input});
      if (!out)
        std::exit((llvm::errs() << llvm::toString(out.takeError()) << "\n", 1));
    }
    return msSince(start) * 1000 / n;
  };
  for (int round = 0; round < 5; ++round) {
    viaEngine.push_back(invokeMain(**dispatched));
    withoutShip.push_back(invokeMain(**unshipped));
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      Desc1D out;
      ciface(&out, &in);
      std::free(out.allocated);
    }
    viaCiface.push_back(msSince(start) * 1000 / n);
  }
  double e = median(viaEngine), c = median(viaCiface), u = median(withoutShip);
  llvm::outs() << llvm::formatv(
      "Module::invoke of sample 2 (host + local launch) {0,8:f2} us\n"
      "_mlir_ciface_scale called directly                {1,8:f2} us\n"
      "overhead                                          {2,8:f2} us ({3:f1}x)\n"
      "the same launch without the ship at main's top    {4,8:f2} us "
      "(the ship, a lookup: {5:f2} us)\n\n",
      e, c, e - c, e / c, u, e - u);
}

std::string sampleVersion(const std::string &base, double offset) {
  std::string text = base;
  size_t at = text.find("dense<1.0>");
  text.replace(at, 10, llvm::formatv("dense<{0:f1}>", offset).str());
  return text;
}

void reload(const Paths &paths) {
  llvm::outs() << "## hot reload (sample 2)\n";
  std::string base = readFile(paths.source + "/samples/02-local-kernel/app.mlir");
  std::string file = paths.temp + "/app.mlir";
  writeFile(file, sampleVersion(base, 1));
  EngineOptions options;
  options.cacheDir = paths.temp + "/reload-cache";
  Engine engine(options);
  ReloadableModule module(engine, "app");
  if (!module.reload(readFile(file)))
    std::exit(1);

  // What `courier-run --watch` does: the watcher reloads; here the main thread then calls
  // until the answer comes from the new version.
  std::atomic<int> reloads{0};
  auto watcher = FileWatcher::create(file, "", [&](const std::string &) {
    auto text = llvm::MemoryBuffer::getFile(file);
    if (text && module.reload((*text)->getBuffer()))
      ++reloads;
  });
  if (!watcher)
    std::exit(1);
  Tensor input = Tensor::fromDoubles(DType::F64, {4}, {0, 0, 0, 0});
  std::vector<double> latencies;
  for (int i = 0; i < 15; ++i) {
    double offset = 100 + i;
    auto start = Clock::now();
    writeFile(file, sampleVersion(base, offset));
    while (true) {
      auto out = module.invoke("main", {input});
      if (out && (*out)[0].at(0) == offset)
        break;
      if (!out)
        llvm::consumeError(out.takeError());
      if (msSince(start) > 10000)
        std::exit((llvm::errs() << "the new version never answered\n", 1));
    }
    latencies.push_back(msSince(start));
  }
  llvm::outs() << llvm::formatv("save -> first call answered by the new version: median "
                                "{0:f1} ms, max {1:f1} ms  (target <= 500 ms; debounce 50 ms)\n",
                                median(latencies),
                                *std::max_element(latencies.begin(), latencies.end()));

  // 100 reloads while 4 threads call continuously.
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0}, failed{0}, mixed{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      Tensor x = Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4});
      while (!stop) {
        auto out = module.invoke("main", {x});
        ++calls;
        if (!out) {
          llvm::consumeError(out.takeError());
          ++failed;
          continue;
        }
        // Versions differ by the offset added to 2x; all four elements must agree.
        double offset = (*out)[0].at(0) - 2;
        for (int k = 1; k < 4; ++k)
          if ((*out)[0].at(k) != 2 * (k + 1) + offset)
            ++mixed;
      }
    });
  auto start = Clock::now();
  for (int r = 0; r < 100; ++r)
    if (!module.reload(sampleVersion(base, r % 2 ? 1 : 7)))
      ++failed;
  double seconds = msSince(start) / 1000;
  stop = true;
  for (std::thread &t : callers)
    t.join();
  llvm::outs() << llvm::formatv("100 reloads in {0:f2} s while 4 threads made {1} calls: {2} "
                                "failed, {3} mixed results (target 0 and 0)\n\n",
                                seconds, calls.load(), failed.load(), mixed.load());
}

} // namespace

int main(int argc, char **argv) {
  std::string self = llvm::sys::fs::getMainExecutable(argv[0], reinterpret_cast<void *>(&main));
  Paths paths;
  paths.bin = llvm::sys::path::parent_path(self).str();
  paths.source = COURIER_SOURCE_DIR;
  llvm::SmallString<128> temp;
  if (llvm::sys::fs::createUniqueDirectory("courier-engine-bench", temp))
    return 1;
  paths.temp = std::string(temp);
  std::string only = argc > 1 ? argv[1] : "";
  if (only.empty() || only == "compile")
    coldCompile(paths);
  if (only.empty() || only == "cache")
    caches(paths);
  if (only.empty() || only == "invoke")
    invokeOverhead(paths);
  if (only.empty() || only == "reload")
    reload(paths);
  llvm::sys::fs::remove_directories(paths.temp);
  return 0;
}
