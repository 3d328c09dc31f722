// Kernels compiled by Courier and run in process against single-threaded OpenBLAS and plain
// loops, in the same run: f32 matmuls against cblas_sgemm, a 3x3 convolution against sgemm at
// its im2col GEMM's size, and memory-bound ops (add, row sum, softmax) against C++ loops and a
// STREAM triad. The programs are bench/inputs/kernels/*.mlir; see docs/performance.md.
#include "bench/BenchSupport.h"
#include "executor/KernelThreads.h"
#include "jit/Engine.h"
#include "tests/transport/ExecutorProcess.h"

#include "llvm/Support/MemoryBuffer.h"

#include <cblas.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace courier;
using courier::bench::check;
using courier::bench::die;

namespace {

using Clock = std::chrono::steady_clock;

/// How long the benchmark runs: rounds of each comparison, and the least time one timed
/// sample of a side takes (calls are repeated within a sample until it does).
struct Settings {
  int rounds = 9;
  double sampleMs = 30;
  /// Untimed calls of each side first, for at least this long: a path's first calls are
  /// slower than the ones after (memory faulted in and then reused, such as the same-host
  /// channel's regions); without it the executor's first rounds here ran at 10-20 ms where
  /// the later ones ran at 7-9.
  double warmUpMs = 300;
};

std::vector<float> randoms(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float &v : values)
    v = uniform(generator);
  return values;
}

/// One side of a comparison: what one call does, and the milliseconds per call of each round.
struct Side {
  Side(const char *name, std::function<void()> once) : name(name), once(std::move(once)) {}

  const char *name;
  std::function<void()> once;
  std::vector<double> ms;
  int callsPerSample = 1;

  double best() const { return *std::min_element(ms.begin(), ms.end()); }
  double median() const { return bench::median(ms); }
};

/// Times the sides in turn, round after round (A, B, A, B, ...), so that load from elsewhere
/// on the machine falls on all of them alike. Each side first runs untimed for
/// settings.warmUpMs (at least twice).
void interleave(std::vector<Side *> sides, const Settings &settings) {
  for (Side *side : sides) {
    side->once();
    Clock::time_point warmUntil =
        Clock::now() + std::chrono::microseconds(static_cast<int64_t>(settings.warmUpMs * 1e3));
    do
      side->once();
    while (Clock::now() < warmUntil);
    double ms = bench::secondsOf(side->once) * 1e3;
    side->callsPerSample = std::max(1, static_cast<int>(std::ceil(settings.sampleMs / ms)));
  }
  for (int round = 0; round < settings.rounds; ++round)
    for (Side *side : sides) {
      double seconds = bench::secondsOf([&] {
        for (int i = 0; i < side->callsPerSample; ++i)
          side->once();
      });
      side->ms.push_back(seconds * 1e3 / side->callsPerSample);
    }
}

std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    die("reading " + path);
  return (*buffer)->getBuffer().str();
}

/// Compiles bench/inputs/kernels/<name>.mlir with the disk cache off, so that every target is
/// compiled here; prints the compile's wall time and its code generation's share.
std::shared_ptr<Module> compileKernel(Engine &engine, const std::string &name) {
  std::string path = std::string(COURIER_SOURCE_DIR) + "/bench/inputs/kernels/" + name + ".mlir";
  std::string text = readFile(path);
  std::shared_ptr<Module> module;
  double seconds = bench::secondsOf([&] {
    module = check(engine.compile(text, name, CompileOptions{{}, path}), "compiling a kernel");
  });
  const PhaseTimes &times = module->compileTimes();
  std::printf("  compile %-20s %8.1f ms (passes %.1f, target code %.1f, link %.1f)\n", name.c_str(),
              seconds * 1e3, times.passes, times.crossCompile, times.link);
  return module;
}

/// Calls `entry` of `module` on borrowed inputs and returns its one result.
Tensor invokeOne(const Module &module, llvm::ArrayRef<TensorRef> inputs) {
  std::vector<Tensor> out = check(module.invoke("main", inputs), "invoking a kernel");
  if (out.size() != 1)
    die("a kernel returned " + std::to_string(out.size()) + " results, not 1");
  return std::move(out[0]);
}

/// Ends the benchmark unless `got` matches `want` within `tolerance` (absolute, scaled by
/// the magnitude of `want`): a kernel computing something else is not measured.
void expectClose(const char *what, llvm::ArrayRef<float> got, llvm::ArrayRef<float> want,
                 double tolerance) {
  if (got.size() != want.size())
    die(std::string(what) + ": " + std::to_string(got.size()) + " elements, expected " +
        std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - double(want[i])) <=
          tolerance * std::max(1.0, std::abs(double(want[i])))))
      die(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
          ", expected " + std::to_string(want[i]));
}

const char *verdict(double ratio, double target) { return ratio >= target ? "met" : "NOT met"; }

/// Prints a compute-bound comparison: GFLOP/s from the best and median times of each side, and
/// the ratio of the medians.
void printFlops(const char *op, const char *size, double flops, const Side &courier,
                const Side &reference, double target) {
  auto rate = [&](double ms) { return flops / (ms * 1e-3) / 1e9; };
  double ratio = reference.median() / courier.median();
  std::printf("%-8s %-16s courier %7.3f ms median (%6.1f GFLOP/s; best %6.1f)  %s %7.3f ms "
              "(%6.1f; best %6.1f)  ratio %.2fx (target >= %.1fx: %s)\n",
              op, size, courier.median(), rate(courier.median()), rate(courier.best()),
              reference.name, reference.median(), rate(reference.median()), rate(reference.best()),
              ratio, target, verdict(ratio, target));
}

/// Single-threaded sgemm C = A * B (row-major, beta 0).
void sgemm(int m, int n, int k, const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

void matmuls(Engine &engine, const Settings &settings) {
  struct Size {
    int m, n, k;
    const char *name, *label;
    double target;
  };
  const Size sizes[] = {{256, 256, 256, "matmul-256", "256^3", 0.5},
                        {512, 512, 512, "matmul-512", "512^3", 0.5},
                        {1024, 1024, 1024, "matmul-1024", "1024^3", 0.8},
                        {301, 257, 129, "matmul-301x257x129", "301x257x129", 0.5}};
  std::printf("\n## f32 matmul: Courier in process vs cblas_sgemm (1 thread)\n");
  for (const Size &s : sizes) {
    std::shared_ptr<Module> module = compileKernel(engine, s.name);
    std::vector<float> a = randoms(size_t(s.m) * s.k, 1), b = randoms(size_t(s.k) * s.n, 2);
    std::vector<float> c(size_t(s.m) * s.n);
    TensorRef inputs[] = {TensorRef::of<float>({s.m, s.k}, a), TensorRef::of<float>({s.k, s.n}, b)};
    sgemm(s.m, s.n, s.k, a.data(), b.data(), c.data());
    Tensor result = invokeOne(*module, inputs);
    expectClose(s.name, result.view<float>(), c, 2e-6 * s.k);
    Side courier{"courier", [&] { invokeOne(*module, inputs); }};
    Side openblas{"openblas", [&] { sgemm(s.m, s.n, s.k, a.data(), b.data(), c.data()); }};
    interleave({&courier, &openblas}, settings);
    printFlops("matmul", s.label, 2.0 * s.m * s.n * s.k, courier, openblas, s.target);
  }
}

void conv2d(Engine &engine, const Settings &settings) {
  std::printf("\n## conv2d NHWC 1x58x58x64 * HWCF 3x3x64x64 -> 1x56x56x64 vs sgemm at its "
              "im2col size (M 3136, N 64, K 576)\n");
  const int h = 58, w = 58, c = 64, f = 64, oh = 56, ow = 56, kh = 3, kw = 3;
  std::shared_ptr<Module> module = compileKernel(engine, "conv2d");
  std::vector<float> input = randoms(size_t(h) * w * c, 3),
                     filter = randoms(size_t(kh) * kw * c * f, 4);
  // The reference convolution, through im2col and sgemm: its check and the GEMM it is timed as.
  std::vector<float> patches(size_t(oh) * ow * kh * kw * c);
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int i = 0; i < kh; ++i)
        for (int j = 0; j < kw; ++j)
          std::memcpy(&patches[((size_t(y) * ow + x) * kh * kw + i * kw + j) * c],
                      &input[((size_t(y) + i) * w + x + j) * c], c * sizeof(float));
  const int m = oh * ow, n = f, k = kh * kw * c;
  std::vector<float> out(size_t(m) * n);
  sgemm(m, n, k, patches.data(), filter.data(), out.data());
  TensorRef inputs[] = {TensorRef::of<float>({1, h, w, c}, input),
                        TensorRef::of<float>({kh, kw, c, f}, filter)};
  Tensor result = invokeOne(*module, inputs);
  expectClose("conv2d", result.view<float>(), out, 2e-6 * k);
  Side courier{"courier", [&] { invokeOne(*module, inputs); }};
  Side openblas{"sgemm", [&] { sgemm(m, n, k, patches.data(), filter.data(), out.data()); }};
  interleave({&courier, &openblas}, settings);
  printFlops("conv2d", "3x3x64x64", 2.0 * m * n * k, courier, openblas, 0.5);
}

/// Prints a memory-bound comparison: GB/s (bytes read and written) of Courier, a C++ loop and
/// the triad measured in the same rounds.
void printBandwidth(const char *op, const char *size, double bytes, const Side &courier,
                    const Side &loop, const Side &triad, double triadBytes) {
  auto rate = [](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; };
  std::printf("%-8s %-16s courier %7.3f ms median (%5.1f GB/s; best %5.1f)  loop %7.3f ms "
              "(%5.1f; best %5.1f)  triad %5.1f GB/s (best %5.1f)  courier/loop %.2fx  "
              "courier/triad %.2fx\n",
              op, size, courier.median(), rate(bytes, courier.median()),
              rate(bytes, courier.best()), loop.median(), rate(bytes, loop.median()),
              rate(bytes, loop.best()), rate(triadBytes, triad.median()),
              rate(triadBytes, triad.best()), loop.median() / courier.median(),
              rate(bytes, courier.median()) / rate(triadBytes, triad.median()));
}

/// The STREAM triad a[i] = b[i] + s*c[i] over 4M floats, measured in the same rounds as each
/// memory-bound op.
struct Triad {
  static constexpr size_t n = size_t(4) << 20;
  std::vector<float> ta = std::vector<float>(n), tb = randoms(n, 5), tc = randoms(n, 6);
  const double bytes = 12.0 * n;

  /// One pass of the triad.
  void once() {
    const float s = 3.0f;
    float *__restrict a = ta.data();
    const float *__restrict b = tb.data(), *__restrict c = tc.data();
    for (size_t i = 0; i < n; ++i)
      a[i] = b[i] + s * c[i];
  }
};

/// add of two 4M-float vectors against a C++ loop and the triad.
void memoryAdd(Engine &engine, const Settings &settings, Triad &triad) {
  const size_t n = Triad::n;
  std::shared_ptr<Module> module = compileKernel(engine, "add");
  std::vector<float> a = randoms(n, 7), b = randoms(n, 8), sum(n);
  auto loopOnce = [&] {
    float *__restrict out = sum.data();
    const float *__restrict x = a.data(), *__restrict y = b.data();
    for (size_t i = 0; i < n; ++i)
      out[i] = x[i] + y[i];
  };
  TensorRef inputs[] = {TensorRef::of<float>({int64_t(n)}, a),
                        TensorRef::of<float>({int64_t(n)}, b)};
  loopOnce();
  expectClose("add", invokeOne(*module, inputs).view<float>(), sum, 0);
  Side courier{"courier", [&] { invokeOne(*module, inputs); }};
  Side loop{"loop", loopOnce}, triadSide{"triad", [&] { triad.once(); }};
  interleave({&courier, &loop, &triadSide}, settings);
  printBandwidth("add", "4M", 12.0 * n, courier, loop, triadSide, triad.bytes);
}

/// The 4096x1024 matrix the row-wise memory-bound ops read.
struct RowMatrix {
  static constexpr int rows = 4096, cols = 1024;
  std::vector<float> x = randoms(size_t(rows) * cols, 9);
  TensorRef matrix[1] = {TensorRef::of<float>({rows, cols}, x)};

  RowMatrix() = default;
  RowMatrix(const RowMatrix &) = delete;
  RowMatrix &operator=(const RowMatrix &) = delete;
};

/// The sum of each row of `m` against a C++ loop and the triad.
void memoryRowSum(Engine &engine, const Settings &settings, Triad &triad, const RowMatrix &m) {
  const int rows = RowMatrix::rows, cols = RowMatrix::cols;
  const std::vector<float> &x = m.x;
  std::shared_ptr<Module> module = compileKernel(engine, "rowsum");
  std::vector<float> sums(rows);
  auto loopOnce = [&] {
    for (int r = 0; r < rows; ++r) {
      const float *row = &x[size_t(r) * cols];
      float total = 0;
      for (int j = 0; j < cols; ++j)
        total += row[j];
      sums[r] = total;
    }
  };
  loopOnce();
  expectClose("rowsum", invokeOne(*module, m.matrix).view<float>(), sums, 1e-4);
  Side courier{"courier", [&] { invokeOne(*module, m.matrix); }};
  Side loop{"loop", loopOnce}, triadSide{"triad", [&] { triad.once(); }};
  interleave({&courier, &loop, &triadSide}, settings);
  printBandwidth("rowsum", "4096x1024", 4.0 * rows * cols + 4.0 * rows, courier, loop, triadSide,
                 triad.bytes);
}

/// The softmax of each row of `m` as composed linalg ops (and as linalg.softmax where it
/// compiles) against a C++ loop and the triad.
void memorySoftmax(Engine &engine, const Settings &settings, Triad &triad, const RowMatrix &m) {
  const int rows = RowMatrix::rows, cols = RowMatrix::cols;
  const std::vector<float> &x = m.x;
  // linalg.softmax is measured where it compiles; the composed ops always are.
  auto linalgSoftmax = engine.compile(
      readFile(std::string(COURIER_SOURCE_DIR) + "/bench/inputs/kernels/softmax-linalg.mlir"),
      "softmax-linalg");
  std::printf("  linalg.softmax %s\n", linalgSoftmax
                                           ? "compiles"
                                           : "does not compile; measured as the linalg ops a "
                                             "user writes (softmax.mlir)");
  if (!linalgSoftmax)
    llvm::consumeError(linalgSoftmax.takeError());
  std::shared_ptr<Module> module = compileKernel(engine, "softmax");
  std::vector<float> out(x.size());
  auto loopOnce = [&] {
    for (int r = 0; r < rows; ++r) {
      const float *row = &x[size_t(r) * cols];
      float *dst = &out[size_t(r) * cols];
      float max = row[0];
      for (int j = 1; j < cols; ++j)
        max = std::max(max, row[j]);
      float total = 0;
      for (int j = 0; j < cols; ++j) {
        dst[j] = std::exp(row[j] - max);
        total += dst[j];
      }
      for (int j = 0; j < cols; ++j)
        dst[j] /= total;
    }
  };
  loopOnce();
  expectClose("softmax", invokeOne(*module, m.matrix).view<float>(), out, 1e-5);
  Side courier{"courier", [&] { invokeOne(*module, m.matrix); }};
  Side loop{"loop", loopOnce}, triadSide{"triad", [&] { triad.once(); }};
  std::vector<Side *> sides = {&courier, &loop, &triadSide};
  Side builtin{"linalg.softmax", [&] { invokeOne(**linalgSoftmax, m.matrix); }};
  if (linalgSoftmax) {
    expectClose("linalg.softmax", invokeOne(**linalgSoftmax, m.matrix).view<float>(), out, 1e-5);
    sides.push_back(&builtin);
  }
  interleave(sides, settings);
  printBandwidth("softmax", "4096x1024", 8.0 * rows * cols, courier, loop, triadSide, triad.bytes);
  if (linalgSoftmax)
    printBandwidth("softmax", "linalg.softmax", 8.0 * rows * cols, builtin, loop, triadSide,
                   triad.bytes);
}

/// Memory-bound ops (add, row sum, softmax) against C++ loops and the triad.
void memoryBound(Engine &engine, const Settings &settings) {
  std::printf("\n## memory-bound ops: Courier in process vs a C++ loop into a buffer it reuses, "
              "and a STREAM triad a[i] = b[i] + s*c[i] over 4M floats (GB/s: bytes read + "
              "written)\n");
  Triad triad;
  memoryAdd(engine, settings, triad);
  RowMatrix matrix;
  memoryRowSum(engine, settings, triad, matrix);
  memorySoftmax(engine, settings, triad, matrix);
}

/// Runs `work` with `count` kernel threads.
void onThreads(unsigned count, const std::function<void()> &work) {
  executor::setKernelThreads(count);
  work();
}

/// Runs `work` with OpenBLAS on `count` threads, then back on one.
void blasOnThreads(int count, const std::function<void()> &work) {
  openblas_set_num_threads(count);
  work();
  openblas_set_num_threads(1);
}

/// The threads section's 1024^3 matmul on a team of `team` kernel threads: the kernel, its
/// inputs, and OpenBLAS's result, which the kernel's is checked against.
struct TeamMatmul {
  static constexpr int n = 1024;

  TeamMatmul(Engine &engine, int team)
      : team(team), module(compileKernel(engine, "matmul-1024")), a(randoms(size_t(n) * n, 1)),
        b(randoms(size_t(n) * n, 2)),
        c(size_t(n) * n), inputs{TensorRef::of<float>({n, n}, a), TensorRef::of<float>({n, n}, b)} {
    sgemm(n, n, n, a.data(), b.data(), c.data());
    onThreads(team, [&] {
      expectClose("matmul-1024", invokeOne(*module, inputs).view<float>(), c, 2e-6 * n);
    });
  }
  TeamMatmul(const TeamMatmul &) = delete;
  TeamMatmul &operator=(const TeamMatmul &) = delete;

  int team;
  std::shared_ptr<Module> module;
  std::vector<float> a, b, c;
  TensorRef inputs[2];
};

/// The matmul compiled by an engine whose kernels run on a courier-executor on loopback.
struct Remote {
  std::unique_ptr<testing::ExecutorProcess> process;
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Module> module;
};

/// Starts a courier-executor (sandboxed as deployed, with its default team) and compiles the
/// matmul for it with the engine's shared-memory setting `channel`; checks it once.
Remote remoteMatmul(const TeamMatmul &mm, transport::SharedMemory channel, const char *what) {
  const int n = TeamMatmul::n;
  Remote r;
  r.process =
      std::make_unique<testing::ExecutorProcess>(testing::ExecutorConfig{0, "", {"--quiet"}});
  EngineOptions options;
  options.diskCache = false;
  options.executorOverride = r.process->address();
  options.executors.sharedMemory = channel;
  r.engine = std::make_unique<Engine>(options);
  r.module = compileKernel(*r.engine, "matmul-1024");
  expectClose(what, invokeOne(*r.module, mm.inputs).view<float>(), mm.c, 2e-6 * n);
  // The session took the executor's warm worker, and the executor starts another ahead of
  // need: a process loading LLVM, which would take a core from the first rounds.
  for (int i = 0; i < 400 && r.process->metric("courier_workers_warm") < 1; ++i)
    ::usleep(25000);
  return r;
}

/// Times the matmul on the team against one thread, OpenBLAS on as many threads and on one,
/// and the executors of `sameHostRemote` and `overHttp`, interleaved; prints the comparisons.
void timeTeamMatmul(TeamMatmul &mm, const Remote &sameHostRemote, const Remote &overHttp,
                    const Settings &settings) {
  const int n = TeamMatmul::n, team = mm.team;
  Module &module = *mm.module, &sameHost = *sameHostRemote.module, &remote = *overHttp.module;
  llvm::ArrayRef<TensorRef> inputs = mm.inputs;
  std::vector<float> &a = mm.a, &b = mm.b, &c = mm.c;
  Side one{"1 thread", [&] { onThreads(1, [&] { invokeOne(module, inputs); }); }};
  Side all{"courier", [&] { onThreads(team, [&] { invokeOne(module, inputs); }); }};
  Side blas{"openblas",
            [&] { blasOnThreads(team, [&] { sgemm(n, n, n, a.data(), b.data(), c.data()); }); }};
  Side executor{"executor (HTTP)", [&] { invokeOne(remote, inputs); }};
  Side sameHostExecutor{"executor", [&] { invokeOne(sameHost, inputs); }};
  // OpenBLAS's own scaling from one thread to the team's size, in the same rounds: what the
  // machine's cores give a GEMM that is known to scale.
  Side blasOne{"openblas 1", [&] { sgemm(n, n, n, a.data(), b.data(), c.data()); }};
  interleave({&one, &all, &blas, &executor, &sameHostExecutor, &blasOne}, settings);
  double flops = 2.0 * n * n * n;
  printFlops("matmul", "1024^3 team/1", flops, all, one, 1.8);
  printFlops("matmul", "1024^3 team", flops, all, blas, 0.8);
  printFlops("matmul", "1024^3 executor", flops, sameHostExecutor, blas, 0.6);
  printFlops("matmul", "1024^3 executor/http", flops, executor, blas, 0.6);
  std::printf("OpenBLAS itself: %d threads %.3f ms, 1 thread %.3f ms: %.2fx\n", team, blas.median(),
              blasOne.median(), blasOne.median() / blas.median());
}

/// The conv2d on a team of `team` kernel threads against sgemm at its im2col size on as many.
void teamConv(Engine &engine, const Settings &settings, int team) {
  const int h = 58, w = 58, ch = 64, f = 64, oh = 56, ow = 56, kh = 3, kw = 3;
  std::shared_ptr<Module> conv = compileKernel(engine, "conv2d");
  std::vector<float> image = randoms(size_t(h) * w * ch, 3),
                     filter = randoms(size_t(kh) * kw * ch * f, 4);
  std::vector<float> patches(size_t(oh) * ow * kh * kw * ch);
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int i = 0; i < kh; ++i)
        for (int j = 0; j < kw; ++j)
          std::memcpy(&patches[((size_t(y) * ow + x) * kh * kw + i * kw + j) * ch],
                      &image[((size_t(y) + i) * w + x + j) * ch], ch * sizeof(float));
  const int m = oh * ow, k = kh * kw * ch;
  std::vector<float> out(size_t(m) * f);
  sgemm(m, f, k, patches.data(), filter.data(), out.data());
  TensorRef convInputs[] = {TensorRef::of<float>({1, h, w, ch}, image),
                            TensorRef::of<float>({kh, kw, ch, f}, filter)};
  onThreads(team, [&] {
    expectClose("conv2d", invokeOne(*conv, convInputs).view<float>(), out, 2e-6 * k);
  });
  Side convAll{"courier", [&] { onThreads(team, [&] { invokeOne(*conv, convInputs); }); }};
  Side gemm{"sgemm", [&] {
              blasOnThreads(team,
                            [&] { sgemm(m, f, k, patches.data(), filter.data(), out.data()); });
            }};
  interleave({&convAll, &gemm}, settings);
  printFlops("conv2d", "3x3x64x64 team", 2.0 * m * f * k, convAll, gemm, 0.5);
}

/// Kernels on every core: the 1024 matmul on the kernel-thread team against the same kernel
/// on one thread and OpenBLAS on as many threads, the conv2d against the two-thread sgemm at
/// its im2col size, and the matmul through a sandboxed courier-executor (its tensors crossing
/// to the worker and back) against OpenBLAS. Every side is interleaved with the others.
void threads(Engine &engine, const Settings &settings) {
  const int team = static_cast<int>(executor::availableCpus());
  std::printf("\n## kernels on every core: %d kernel threads (the CPUs this process may run on) "
              "vs one, and vs OpenBLAS on %d threads\n",
              team, team);
  TeamMatmul mm(engine, team);
  // By default a client on the executor's host (here a loopback address) passes tensors
  // through the session's shared-memory channel (docs/protocol.md); with it off they cross
  // HTTP.
  Remote sameHostRemote = remoteMatmul(mm, transport::SharedMemory::Auto, "matmul-1024 (executor)");
  Remote overHttp = remoteMatmul(mm, transport::SharedMemory::Off, "matmul-1024 (executor, HTTP)");
  timeTeamMatmul(mm, sameHostRemote, overHttp, settings);
  teamConv(engine, settings, team);
  executor::setKernelThreads(0);
}

} // namespace

int main(int argc, char **argv) {
  // OpenBLAS's idle threads spin (sched_yield) for up to 2^28 cycles after a threaded call,
  // taking a core from whichever side runs next: the executor's worker, the kernel team.
  // Spinning briefly, they sleep between calls as Courier's team does (KMP_BLOCKTIME 0);
  // OpenBLAS reads the variable as it loads, before main, so the benchmark runs itself again.
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
    ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    ::execv("/proc/self/exe", argv);
    die(std::string("cannot run itself again with OPENBLAS_THREAD_TIMEOUT set: ") +
        std::strerror(errno));
  }
  std::string section = "all";
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick")
      settings = Settings{1, 0, 0};
    else if (arg == "all" || arg == "matmul" || arg == "conv" || arg == "memory" ||
             arg == "threads")
      section = arg;
    else
      die("unknown argument '" + arg +
          "' (usage: courier-kernel-bench [all|matmul|conv|memory|threads] "
          "[--quick])");
  }
  openblas_set_num_threads(1);
  std::printf("OpenBLAS %s, core %s, %d thread(s)%s, OPENBLAS_THREAD_TIMEOUT=%s\n",
              openblas_get_config(), openblas_get_corename(), openblas_get_num_threads(),
              std::getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE is set: it chose the core)"
                                               : "",
              std::getenv("OPENBLAS_THREAD_TIMEOUT"));
  std::printf("each figure: the median and best of %d interleaved rounds, each round at least "
              "%.0f ms of calls per side\n",
              settings.rounds, settings.sampleMs);
  EngineOptions options;
  options.diskCache = false;
  Engine engine(options);
  // The sections before threads compare against one OpenBLAS thread: Courier's kernels get
  // one too (the threads section sets its own).
  executor::setKernelThreads(1);
  if (section == "all" || section == "matmul")
    matmuls(engine, settings);
  if (section == "all" || section == "conv")
    conv2d(engine, settings);
  if (section == "all" || section == "memory")
    memoryBound(engine, settings);
  if (section == "all" || section == "threads")
    threads(engine, settings);
  return 0;
}
