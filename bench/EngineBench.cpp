// Engine benchmarks: cold compile against mlir-opt | mlir-runner, cache hits, invoke
// overhead against a direct kernel call, the dynamic shape checks' share of an invoke, hot
// reload latency and safety under load, and the cost of compiling and reloading a program of
// many target modules.
// Every comparison is measured in the same run; see docs/performance.md.
#include "jit/Engine.h"
#include "jit/ShapeChecks.h"
#include "tests/support/ManyKernels.h"

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
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

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

/// What the checks of dynamic dimensions invoke makes before any code runs (jit/ShapeChecks.h)
/// cost beside the invoke itself: the checks alone, as invoke makes them (the inputs' shapes
/// gathered, each equality compared), timed over many calls, against Module::invoke of the
/// same entry on the same inputs, in process, for a dynamic matmul (one equality) and a sum
/// of four dynamic matrices (four), at sizes from a few elements to a cache's worth.
void shapeChecks(const Paths &paths) {
  llvm::outs() << "## dynamic shape checks: their share of Module::invoke, in process\n";
  EngineOptions options;
  options.cacheDir = paths.temp + "/cache";
  Engine engine(options);
  auto compiled = engine.compile(R"mlir(
    func.func public @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %a, %c0 : tensor<?x?xf32>
      %n = tensor.dim %b, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%m, %n) : tensor<?x?xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
                         outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }
    func.func public @sum4(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>,
                           %d: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %ab = arith.addf %a, %b : tensor<?x?xf32>
      %cd = arith.addf %c, %d : tensor<?x?xf32>
      %r = arith.addf %ab, %cd : tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })mlir",
                                 "shapes");
  if (!compiled)
    std::exit((llvm::errs() << llvm::toString(compiled.takeError()) << "\n", 1));
  Module &module = **compiled;
  llvm::outs() << "entry    size     equalities   checks (ns)   invoke (us)   checks' share\n";
  for (llvm::StringRef entry : {"matmul", "sum4"}) {
    const EntrySignature *signature = module.findEntry(entry);
    size_t arity = signature->inputs.size();
    for (int64_t size : {4, 64, 256}) {
      std::vector<float> values(static_cast<size_t>(size * size), 1.0f);
      std::vector<TensorRef> refs(
          arity, TensorRef::of<float>({size, size}, llvm::ArrayRef<float>(values)));
      // The checks as Module::invoke makes them, repeated enough to time.
      const int checks = 1000000;
      std::vector<double> checkNs, invokeUs;
      for (int round = 0; round < 5; ++round) {
        auto start = Clock::now();
        for (int i = 0; i < checks; ++i) {
          llvm::SmallVector<llvm::ArrayRef<int64_t>, 8> shapes;
          for (const TensorRef &input : refs)
            shapes.push_back(input.shape);
          if (llvm::Error error = checkDimEqualities(*signature, shapes))
            std::exit((llvm::errs() << llvm::toString(std::move(error)) << "\n", 1));
        }
        checkNs.push_back(msSince(start) * 1e6 / checks);
        int calls = size >= 256 ? 20 : 2000;
        start = Clock::now();
        for (int i = 0; i < calls; ++i) {
          auto out = module.invoke(entry, refs);
          if (!out)
            std::exit((llvm::errs() << llvm::toString(out.takeError()) << "\n", 1));
        }
        invokeUs.push_back(msSince(start) * 1000 / calls);
      }
      double c = median(checkNs), v = median(invokeUs);
      llvm::outs() << llvm::formatv("{0,-8} {1,4}x{1,-4} {2,10} {3,13:f1} {4,13:f2} {5,14:f3} %\n",
                                    entry, size, signature->dimEqualities.size(), c, v,
                                    100 * c / (v * 1000));
    }
  }
  llvm::outs() << "\n";
}

std::string sampleVersion(const std::string &base, double offset) {
  std::string text = base;
  size_t at = text.find("dense<1.0>");
  text.replace(at, 10, llvm::formatv("dense<{0:f1}>", offset).str());
  return text;
}

/// Saves `text` as `file` and calls `module`'s main on `input` until its first number is
/// `expected` (the new version answers); returns the milliseconds that took.
double saveAndAwait(const std::string &file, llvm::StringRef text, ReloadableModule &module,
                    const Tensor &input, double expected) {
  auto start = Clock::now();
  writeFile(file, text);
  while (true) {
    auto out = module.invoke("main", {input});
    if (out && (*out)[0].at(0) == expected)
      return msSince(start);
    if (!out)
      llvm::consumeError(out.takeError());
    if (msSince(start) > 60000)
      std::exit((llvm::errs() << "the new version never answered\n", 1));
  }
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
    latencies.push_back(saveAndAwait(file, sampleVersion(base, offset), module, input, offset));
  }
  llvm::outs() << llvm::formatv("save -> first call answered by the new version: median "
                                "{0:f1} ms, max {1:f1} ms  (target <= 500 ms; settle 5 ms)\n",
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

//===- Compile cost that grows with the edit ------------------------------------------===//

/// `count` kernels adding 1..7 in turn: every module its own object.
std::vector<double> kernelOffsets(size_t count) {
  std::vector<double> offsets;
  for (size_t i = 0; i < count; ++i)
    offsets.push_back(static_cast<double>(i % 7 + 1));
  return offsets;
}

/// 64 ones, as courier-run's --arg takes them.
std::string onesArgument() {
  std::string text = "[";
  for (int i = 0; i < 64; ++i)
    text += i ? ",1" : "1";
  return text + "]";
}

/// The first number of the first "data" array on `line`, if any.
std::optional<double> firstDatum(llvm::StringRef line) {
  size_t at = line.find("\"data\":[");
  if (at == llvm::StringRef::npos)
    return std::nullopt;
  llvm::StringRef rest = line.drop_front(at + 8);
  double value;
  if (rest.take_until([](char c) { return c == ',' || c == ']'; }).getAsDouble(value))
    return std::nullopt;
  return value;
}

/// A `courier-run --watch` process whose standard output is read line by line.
class WatchProcess {
public:
  /// Runs `program` with `args`, its standard error going to `errorFile`.
  WatchProcess(const std::string &program, std::vector<std::string> args,
               const std::string &errorFile) {
    int out[2];
    if (::pipe(out) != 0)
      std::exit((llvm::errs() << "pipe failed\n", 1));
    args.insert(args.begin(), program);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      int errors = ::open(errorFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(errors, STDERR_FILENO);
      ::close(out[0]);
      std::vector<char *> argv;
      for (std::string &arg : args)
        argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    fd = out[0];
  }
  ~WatchProcess() { stop(); }

  /// Ends the process (before an exit that runs no destructors, too).
  void stop() {
    if (pid < 0)
      return;
    ::kill(pid, SIGTERM);
    int status;
    ::waitpid(pid, &status, 0);
    ::close(fd);
    pid = -1;
  }

  /// The next line of output, waiting at most `timeoutMs`; nullopt when none came.
  std::optional<std::string> line(int timeoutMs) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
    while (true) {
      size_t end = pending.find('\n');
      if (end != std::string::npos) {
        std::string line = pending.substr(0, end);
        pending.erase(0, end + 1);
        return line;
      }
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      pollfd ready{fd, POLLIN, 0};
      if (left <= 0 || ::poll(&ready, 1, left) <= 0)
        return std::nullopt;
      char buffer[65536];
      ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n <= 0)
        return std::nullopt;
      pending.append(buffer, static_cast<size_t>(n));
    }
  }

private:
  pid_t pid = -1;
  int fd = -1;
  std::string pending;
};

/// Save -> the first answer `courier-run --watch` prints from the new version, for `edits`
/// saves of the 64-module program each changing one kernel, `pause` after each answer before
/// the next save (a person's edits are seconds apart; 0 saves again at once); ms each.
std::vector<double> watchReloads(const std::string &courierRun, const std::string &dir,
                                 const std::vector<std::string> &flags, int edits,
                                 std::chrono::milliseconds pause) {
  std::string file = dir + "/watched.mlir";
  std::vector<double> offsets = kernelOffsets(64);
  writeFile(file, courier::testing::manyKernelProgram(offsets));
  std::vector<std::string> args = {file, "--watch", "--arg", onesArgument()};
  args.insert(args.end(), flags.begin(), flags.end());
  std::string errors = dir + "/watch.err";
  WatchProcess watch(courierRun, args, errors);
  auto fail = [&](llvm::StringRef what) {
    watch.stop();
    llvm::errs() << courierRun << " --watch: " << what << "; its standard error:\n"
                 << readFile(errors);
    std::exit(1);
  };
  auto answered = [&](double expected, int timeoutMs) {
    while (std::optional<std::string> line = watch.line(timeoutMs))
      if (firstDatum(*line) == expected)
        return true;
    return false;
  };
  if (!answered(courier::testing::manyKernelAnswer(offsets, 1), 120000))
    fail("the first version never answered");
  // courier-run watches once the first version has answered, and says so: a save before
  // that would go unseen.
  for (auto start = Clock::now();
       readFile(errors).find("courier-run: watching") == std::string::npos;) {
    if (msSince(start) > 10000)
      fail("it never said it was watching");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<double> latencies;
  for (int i = 0; i < edits; ++i) {
    offsets[32] = 10 + i;
    double expected = courier::testing::manyKernelAnswer(offsets, 1);
    std::this_thread::sleep_for(pause);
    auto start = Clock::now();
    writeFile(file, courier::testing::manyKernelProgram(offsets));
    if (!answered(expected, 60000))
      fail("the new version never answered");
    latencies.push_back(msSince(start));
  }
  return latencies;
}

/// Save -> first answer from the new version, in process: ReloadableModule and FileWatcher
/// as courier-run --watch uses them, the engine's caches in `dir`.
std::vector<double> inProcessReloads(const std::string &dir, unsigned optLevel, int edits,
                                     std::chrono::milliseconds pause) {
  std::string file = dir + "/reloaded.mlir";
  std::vector<double> offsets = kernelOffsets(64);
  writeFile(file, courier::testing::manyKernelProgram(offsets));
  EngineOptions options;
  options.cacheDir = dir + "/cache";
  options.optLevel = optLevel;
  Engine engine(options);
  ReloadableModule module(engine, "many");
  if (!module.reload(readFile(file)))
    std::exit((llvm::errs() << "the 64-module program does not compile\n", 1));
  auto watcher = FileWatcher::create(file, "", [&](const std::string &) {
    if (auto text = llvm::MemoryBuffer::getFile(file))
      llvm::consumeError(module.reload((*text)->getBuffer()).takeError());
  });
  if (!watcher)
    std::exit(1);
  Tensor ones = Tensor::fromDoubles(DType::F64, {64}, std::vector<double>(64, 1));
  std::vector<double> latencies;
  for (int i = 0; i < edits; ++i) {
    offsets[32] = 10 + i;
    std::this_thread::sleep_for(pause);
    latencies.push_back(saveAndAwait(file, courier::testing::manyKernelProgram(offsets), module,
                                     ones, courier::testing::manyKernelAnswer(offsets, 1)));
  }
  return latencies;
}

const char *kMatmul = R"mlir(
module @mm {
  func.func public @main(%a: tensor<256x256xf64>, %b: tensor<256x256xf64>) -> tensor<256x256xf64> {
    %y = catalyst.launch_kernel @k::@f(%a, %b) : (tensor<256x256xf64>, tensor<256x256xf64>) -> tensor<256x256xf64>
    return %y : tensor<256x256xf64>
  }
  module @k attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @f(%a: tensor<256x256xf64>, %b: tensor<256x256xf64>) -> tensor<256x256xf64> {
      %z = arith.constant 0.0 : f64
      %e = tensor.empty() : tensor<256x256xf64>
      %i = linalg.fill ins(%z : f64) outs(%e : tensor<256x256xf64>) -> tensor<256x256xf64>
      %r = linalg.matmul ins(%a, %b : tensor<256x256xf64>, tensor<256x256xf64>) outs(%i : tensor<256x256xf64>) -> tensor<256x256xf64>
      return %r : tensor<256x256xf64>
    }
  }
}
)mlir";

/// What the parts of the incremental-compile figures share.
struct IncrementalSetup {
  const Paths &paths;
  /// An earlier build (before the per-module cache), for the side-by-side figures: a directory
  /// holding its courier-run and courier-module-worker; empty without one.
  std::string baseline;
  std::string courierRun;
  /// The files of the 64-module and the 1-module program.
  std::string many, one;
  /// The program's argument on the command line.
  std::string arg;
};

/// Cold compile-and-run wall times in ms (the earlier build's empty without one).
struct ColdCompiles {
  std::vector<double> before64, serial64, parallel64, before1, after1;
};

/// Times cold compiles, whole processes with no disk cache, interleaved.
ColdCompiles timeColdCompiles(const IncrementalSetup &setup) {
  auto run = [&](const std::string &program, const std::string &file,
                 std::vector<llvm::StringRef> extra) {
    std::vector<llvm::StringRef> argv = {program, file, "--arg", setup.arg, "--no-disk-cache"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return timeCommand(argv);
  };
  const std::string &baseline = setup.baseline, &courierRun = setup.courierRun;
  ColdCompiles times;
  for (int round = 0; round < 5; ++round) {
    if (!baseline.empty())
      times.before64.push_back(run(baseline + "/courier-run", setup.many, {}));
    times.serial64.push_back(run(courierRun, setup.many, {"--jobs", "1"}));
    times.parallel64.push_back(run(courierRun, setup.many, {}));
  }
  for (int round = 0; round < 11; ++round) {
    if (!baseline.empty())
      times.before1.push_back(run(baseline + "/courier-run", setup.one, {}));
    times.after1.push_back(run(courierRun, setup.one, {}));
  }
  return times;
}

/// Prints the cold compile times, beside the earlier build's when `baseline` is set.
void printColdCompiles(const ColdCompiles &times, bool baseline) {
  unsigned cores = std::thread::hardware_concurrency();
  llvm::outs() << llvm::formatv("cold compile and run, 64 target modules (courier-run "
                                "--no-disk-cache, whole process, median of 5)\n");
  if (baseline)
    llvm::outs() << llvm::formatv("  earlier build (serial)                {0,8:f1} ms\n",
                                  median(times.before64));
  llvm::outs() << llvm::formatv("  now, --jobs 1                         {0,8:f1} ms\n"
                                "  now, --jobs {1} (the default here)      {2,8:f1} ms\n",
                                median(times.serial64), cores, median(times.parallel64));
  if (baseline)
    llvm::outs() << llvm::formatv(
        "  now / before                          {0,8:f2}  (target <= 0.5)\n",
        median(times.parallel64) / median(times.before64));
  llvm::outs() << llvm::formatv("cold compile and run, 1 target module (median of 11)\n");
  if (baseline)
    llvm::outs() << llvm::formatv("  earlier build                         {0,8:f1} ms\n",
                                  median(times.before1));
  llvm::outs() << llvm::formatv("  now                                   {0,8:f1} ms\n",
                                median(times.after1));
  if (baseline)
    llvm::outs() << llvm::formatv(
        "  now / before                          {0,8:f2}  (target <= 1.10)\n",
        median(times.after1) / median(times.before1));
}

/// Measures and prints one opt level's row: ms per target module compiling `sixteen` (one
/// thread, in process), and ms per call of the 256x256 matmul on `square`.
void optLevelRow(unsigned level, const std::string &sixteen, const Tensor &square) {
  EngineOptions options;
  options.diskCache = false;
  options.optLevel = level;
  options.jobs = 1;
  std::vector<double> perModule, matmul;
  for (int i = 0; i < 3; ++i) {
    Engine engine(options);
    auto module = engine.compile(sixteen, "sixteen");
    if (!module)
      std::exit((llvm::errs() << llvm::toString(module.takeError()) << "\n", 1));
    perModule.push_back((*module)->compileTimes().crossCompile / 16);
  }
  Engine engine(options);
  auto mm = engine.compile(kMatmul, "mm");
  if (!mm)
    std::exit((llvm::errs() << llvm::toString(mm.takeError()) << "\n", 1));
  for (int i = 0; i < 7; ++i) {
    auto start = Clock::now();
    auto out = (*mm)->invoke("main", {square, square});
    if (!out || (*out)[0].at(0) != 256)
      std::exit((llvm::errs() << "matmul failed\n", 1));
    matmul.push_back(msSince(start));
  }
  llvm::outs() << llvm::formatv("  O{0}    | {1,26:f1} | {2,8:f1}\n", level, median(perModule),
                                median(matmul));
}

/// What a module costs at each opt level (one thread, in process), and what its code buys.
void optLevels() {
  llvm::outs() << "cost per target module and speed of its code, by opt level (in process, "
                  "--jobs 1)\n"
                  "  level | ms per module (16 kernels) | 256x256 matmul, ms per call\n";
  std::string sixteen = courier::testing::manyKernelProgram(kernelOffsets(16));
  Tensor square = Tensor::fromDoubles(DType::F64, {256, 256}, std::vector<double>(65536, 1));
  for (unsigned level = 0; level <= 3; ++level)
    optLevelRow(level, sixteen, square);
}

/// Prints one row of the hot reload table: the median and the longest of `ms`.
void reportReloads(llvm::StringRef label, const std::vector<double> &ms) {
  llvm::outs() << llvm::formatv("  {0,-44} {1,8:f1} ms {2,8:f1} ms\n", label, median(ms),
                                *std::max_element(ms.begin(), ms.end()));
}

/// Hot reload: save -> the first answer from the new version, one kernel of 64 edited; in
/// process, then through courier-run --watch (and the earlier build's, when set).
void hotReloads(const IncrementalSetup &setup) {
  const Paths &paths = setup.paths;
  llvm::outs() << "hot reload of the 64-module program, one kernel edited (save -> first answer "
                  "from the new version, settle 5 ms included; median, max)\n";
  // Saves a second apart, as a person edits; then, at O2, each save as soon as the
  // previous version answered, which leaves no time to start the next warm worker.
  using std::chrono::milliseconds;
  for (auto [level, pause] : {std::pair{2u, 1000}, {1u, 1000}, {0u, 1000}, {2u, 0}}) {
    llvm::sys::fs::remove_directories(paths.temp + "/reload");
    llvm::sys::fs::create_directories(paths.temp + "/reload");
    reportReloads(
        llvm::formatv("in process, -O{0}{1}", level, pause ? "" : ", saves back to back").str(),
        inProcessReloads(paths.temp + "/reload", level, 10, milliseconds(pause)));
  }
  auto watched = [&](const std::string &program, llvm::StringRef label, unsigned level, int pause,
                     int edits) {
    llvm::sys::fs::remove_directories(paths.temp + "/watch");
    llvm::sys::fs::create_directories(paths.temp + "/watch");
    std::string cache = paths.temp + "/watch/cache";
    reportReloads(llvm::formatv("{0}courier-run --watch -O{1}{2}", label, level,
                                pause ? "" : ", back to back")
                      .str(),
                  watchReloads(program, paths.temp + "/watch",
                               {"--cache-dir", cache, "-O" + std::to_string(level)}, edits,
                               milliseconds(pause)));
  };
  for (auto [level, pause] : {std::pair{2u, 1000}, {1u, 1000}, {0u, 1000}, {2u, 0}}) {
    watched(setup.courierRun, "", level, pause, 10);
    // The earlier build's, beside it (fewer: it was slow before the per-module cache).
    if (!setup.baseline.empty() && level == 2)
      watched(setup.baseline + "/courier-run", "earlier build: ", level, pause, 5);
  }
}

/// The incremental-compile figures; `part` is "cold", "levels" or "reload", or empty for all three.
void incremental(const Paths &paths, llvm::StringRef part) {
  llvm::outs() << "## compile cost that grows with the edit\n";
  const char *baseline = std::getenv("COURIER_BASELINE_BIN");
  IncrementalSetup setup{paths,
                         baseline ? baseline : "",
                         paths.bin + "/courier-run",
                         paths.temp + "/many64.mlir",
                         paths.temp + "/many1.mlir",
                         ""};
  writeFile(setup.many, courier::testing::manyKernelProgram(kernelOffsets(64)));
  writeFile(setup.one, courier::testing::manyKernelProgram(kernelOffsets(1)));
  setup.arg = onesArgument();
  if (part.empty() || part == "cold")
    printColdCompiles(timeColdCompiles(setup), !setup.baseline.empty());
  if (part.empty() || part == "levels")
    optLevels();
  if (part.empty() || part == "reload")
    hotReloads(setup);
  llvm::outs() << "\n";
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
  if (only.empty() || only == "shapes")
    shapeChecks(paths);
  if (only.empty() || only == "reload")
    reload(paths);
  // incremental:cold, incremental:levels or incremental:reload run one part of it.
  if (only.empty() || llvm::StringRef(only).starts_with("incremental"))
    incremental(paths, llvm::StringRef(only).drop_front(std::min<size_t>(only.size(), 12)));
  llvm::sys::fs::remove_directories(paths.temp);
  return 0;
}
