// The kernel-thread team (see KernelThreads.h): libomp's, sized and started here. Compiled
// with -fopenmp for the parallel region that starts the team.
#include "executor/KernelThreads.h"

#include "executor/Sandbox.h"
#include "transport/Metrics.h"

#include "llvm/Support/FormatVariadic.h"

#if COURIER_HAVE_OPENMP
#include <omp.h>
#endif

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <sched.h>

extern "C" {
using CourierMicrotask = void (*)(int32_t *, int32_t *, ...);
}

#if COURIER_HAVE_OPENMP
// The entries of libomp that code compiled from OpenMP's dialect calls (ident_t is opaque).
extern "C" {
void __kmpc_fork_call(void *loc, int32_t argc, CourierMicrotask microtask, ...);
int32_t __kmpc_global_thread_num(void *loc);
void __kmpc_for_static_init_4(void *, int32_t, int32_t, int32_t *, int32_t *, int32_t *, int32_t *,
                              int32_t, int32_t);
void __kmpc_for_static_init_4u(void *, int32_t, int32_t, int32_t *, uint32_t *, uint32_t *,
                               int32_t *, int32_t, int32_t);
void __kmpc_for_static_init_8(void *, int32_t, int32_t, int32_t *, int64_t *, int64_t *, int64_t *,
                              int64_t, int64_t);
void __kmpc_for_static_init_8u(void *, int32_t, int32_t, int32_t *, uint64_t *, uint64_t *,
                               int64_t *, int64_t, int64_t);
void __kmpc_for_static_fini(void *, int32_t);
void __kmpc_barrier(void *, int32_t);
void __kmpc_push_num_threads(void *, int32_t, int32_t);
void kmp_set_blocktime(int);
}
#else
// Without libomp (a cross build): the same entries for a team of one, the launching thread.
namespace {
int omp_get_max_threads() { return 1; }
int omp_get_thread_num() { return 0; }
void omp_set_num_threads(int) {}
void kmp_set_blocktime(int) {}
void __kmpc_fork_call(void *, int32_t argc, CourierMicrotask microtask, ...);
int32_t __kmpc_global_thread_num(void *) { return 0; }
/// The whole range for the only thread: bounds as given, and it has the last iteration.
template <typename T, typename S>
void staticInit(void *, int32_t, int32_t, int32_t *last, T *, T *, S *stride, S, S) {
  if (last)
    *last = 1;
  (void)stride;
}
void __kmpc_for_static_init_4(void *l, int32_t g, int32_t s, int32_t *last, int32_t *lo,
                              int32_t *hi, int32_t *st, int32_t i, int32_t c) {
  staticInit(l, g, s, last, lo, hi, st, i, c);
}
void __kmpc_for_static_init_4u(void *l, int32_t g, int32_t s, int32_t *last, uint32_t *lo,
                               uint32_t *hi, int32_t *st, int32_t i, int32_t c) {
  staticInit(l, g, s, last, lo, hi, st, i, c);
}
void __kmpc_for_static_init_8(void *l, int32_t g, int32_t s, int32_t *last, int64_t *lo,
                              int64_t *hi, int64_t *st, int64_t i, int64_t c) {
  staticInit(l, g, s, last, lo, hi, st, i, c);
}
void __kmpc_for_static_init_8u(void *l, int32_t g, int32_t s, int32_t *last, uint64_t *lo,
                               uint64_t *hi, int64_t *st, int64_t i, int64_t c) {
  staticInit(l, g, s, last, lo, hi, st, i, c);
}
void __kmpc_for_static_fini(void *, int32_t) {}
void __kmpc_barrier(void *, int32_t) {}
void __kmpc_push_num_threads(void *, int32_t, int32_t) {}
void __kmpc_fork_call(void *, int32_t argc, CourierMicrotask microtask, ...) {
  int32_t global = 0, bound = 0;
  void *a[8] = {};
  va_list list;
  va_start(list, microtask);
  for (int32_t i = 0; i < argc && i < 8; ++i)
    a[i] = va_arg(list, void *);
  va_end(list);
  microtask(&global, &bound, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}
} // namespace
#endif

namespace courier::executor {

namespace {

std::atomic<unsigned> chosenThreads{0};
std::atomic<uint64_t> regions{0}, busy{0};
KernelThreadTally ownTally;
std::atomic<KernelThreadTally *> tally{&ownTally};
thread_local uint64_t regionsOnThread = 0;
/// Parallel regions this thread started on a team of more than itself, and their count when
/// the launch running on this thread started.
thread_local uint64_t sharedRegionsOnThread = 0, sharedRegionsAtLaunch = 0;
/// The team size last applied on this thread (0: none yet).
thread_local unsigned appliedThreads = 0;

/// The most arguments a parallel region's outlined function is passed; code from OpenMP's
/// dialect passes one (a structure of what the region captures).
constexpr int32_t kMaxForkArguments = 8;

/// __kmpc_fork_call as kernels see it: libomp's, counted.
void countedForkCall(void *loc, int32_t argc, CourierMicrotask microtask, ...) {
  if (argc < 0 || argc > kMaxForkArguments)
    std::abort(); // Not code the default lowering makes; the crash reporter names SIGABRT.
  void *a[kMaxForkArguments] = {};
  va_list list;
  va_start(list, microtask);
  for (int32_t i = 0; i < argc; ++i)
    a[i] = va_arg(list, void *);
  va_end(list);
  ++regionsOnThread;
  regions.fetch_add(1, std::memory_order_relaxed);
  uint64_t team = static_cast<uint64_t>(omp_get_max_threads());
  if (team > 1)
    ++sharedRegionsOnThread;
  busy.fetch_add(team, std::memory_order_relaxed);
  KernelThreadTally *counts = tally.load(std::memory_order_relaxed);
  counts->busyThreads.fetch_add(team, std::memory_order_relaxed);
  switch (argc) {
  case 0:
    __kmpc_fork_call(loc, 0, microtask);
    break;
  case 1:
    __kmpc_fork_call(loc, 1, microtask, a[0]);
    break;
  case 2:
    __kmpc_fork_call(loc, 2, microtask, a[0], a[1]);
    break;
  case 3:
    __kmpc_fork_call(loc, 3, microtask, a[0], a[1], a[2]);
    break;
  case 4:
    __kmpc_fork_call(loc, 4, microtask, a[0], a[1], a[2], a[3]);
    break;
  case 5:
    __kmpc_fork_call(loc, 5, microtask, a[0], a[1], a[2], a[3], a[4]);
    break;
  case 6:
    __kmpc_fork_call(loc, 6, microtask, a[0], a[1], a[2], a[3], a[4], a[5]);
    break;
  case 7:
    __kmpc_fork_call(loc, 7, microtask, a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
    break;
  default:
    __kmpc_fork_call(loc, 8, microtask, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    break;
  }
  busy.fetch_sub(team, std::memory_order_relaxed);
  counts->busyThreads.fetch_sub(team, std::memory_order_relaxed);
}

llvm::Error systemError(const llvm::Twine &what, int error = errno) {
  return llvm::createStringError(std::error_code(error, std::generic_category()),
                                 what + ": " + std::strerror(error));
}

} // namespace

unsigned availableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  int count = CPU_COUNT(&set);
  return count > 0 ? static_cast<unsigned>(count) : 1;
}

void setKernelThreads(unsigned threads) {
  // Read when libomp starts, which is later than this in every Courier process.
  ::setenv("KMP_BLOCKTIME", "0", /*overwrite=*/0);
  chosenThreads.store(threads ? threads : availableCpus(), std::memory_order_relaxed);
}

unsigned kernelThreads() {
  unsigned threads = chosenThreads.load(std::memory_order_relaxed);
  if (threads)
    return threads;
  // Asked once: a system call at every launch was half of a noop launch's time.
  chosenThreads.compare_exchange_strong(threads, availableCpus(), std::memory_order_relaxed);
  return chosenThreads.load(std::memory_order_relaxed);
}

void prepareKernelLaunch() {
  sharedRegionsAtLaunch = sharedRegionsOnThread;
  unsigned threads = kernelThreads();
  if (appliedThreads == threads)
    return;
  if (appliedThreads == 0) {
    ::setenv("KMP_BLOCKTIME", "0", /*overwrite=*/0);
    if (const char *time = std::getenv("KMP_BLOCKTIME"); time && std::strcmp(time, "0") == 0)
      kmp_set_blocktime(0);
  }
  omp_set_num_threads(static_cast<int>(threads));
  appliedThreads = threads;
}

void finishKernelLaunch() {
  KernelThreadTally &counts = *tally.load(std::memory_order_relaxed);
  (sharedRegionsOnThread != sharedRegionsAtLaunch ? counts.parallelLaunches
                                                  : counts.oneThreadLaunches)
      .fetch_add(1, std::memory_order_relaxed);
}

void publishKernelThreadTally(KernelThreadTally *shared, bool carryOver) {
  KernelThreadTally *before = tally.load();
  shared->parallelLaunches.store(carryOver ? before->parallelLaunches.load() : 0);
  shared->oneThreadLaunches.store(carryOver ? before->oneThreadLaunches.load() : 0);
  shared->busyThreads.store(0);
  tally.store(shared);
}

const KernelThreadTally &kernelThreadTally() { return *tally.load(); }

llvm::Error startKernelThreads() {
  prepareKernelLaunch();
  int wanted = static_cast<int>(kernelThreads());
  std::atomic<int> started{0}, failed{0};
  std::atomic<int> error{0};
#if COURIER_HAVE_OPENMP
#pragma omp parallel num_threads(wanted)
#else
  wanted = 1;
#endif
  {
    int index = omp_get_thread_num();
    if (index != 0) {
      // Kept for the thread's life, which is the process's.
      stack_t stack{};
      stack.ss_size = 64 * 1024;
      stack.ss_sp = std::malloc(stack.ss_size);
      if (!stack.ss_sp || ::sigaltstack(&stack, nullptr) != 0) {
        error.store(stack.ss_sp ? errno : ENOMEM);
        failed.fetch_add(1);
      }
      setCrashThreadIndex(index);
    }
    started.fetch_add(1);
  }
  if (failed.load())
    return systemError("giving kernel threads their signal stacks", error.load());
  if (started.load() != wanted)
    return llvm::createStringError(
        llvm::formatv("started {0} of {1} kernel threads", started.load(), wanted).str());
  return llvm::Error::success();
}

llvm::ArrayRef<std::pair<const char *, const void *>> kernelThreadSymbols() {
  static const std::pair<const char *, const void *> symbols[] = {
      {"__kmpc_fork_call", reinterpret_cast<const void *>(&countedForkCall)},
      {"__kmpc_global_thread_num", reinterpret_cast<const void *>(&__kmpc_global_thread_num)},
      {"__kmpc_for_static_init_4", reinterpret_cast<const void *>(&__kmpc_for_static_init_4)},
      {"__kmpc_for_static_init_4u", reinterpret_cast<const void *>(&__kmpc_for_static_init_4u)},
      {"__kmpc_for_static_init_8", reinterpret_cast<const void *>(&__kmpc_for_static_init_8)},
      {"__kmpc_for_static_init_8u", reinterpret_cast<const void *>(&__kmpc_for_static_init_8u)},
      {"__kmpc_for_static_fini", reinterpret_cast<const void *>(&__kmpc_for_static_fini)},
      {"__kmpc_barrier", reinterpret_cast<const void *>(&__kmpc_barrier)},
      {"__kmpc_push_num_threads", reinterpret_cast<const void *>(&__kmpc_push_num_threads)},
  };
  return symbols;
}

KernelThreadCounts kernelThreadCounts() {
  return {regions.load(std::memory_order_relaxed), busy.load(std::memory_order_relaxed)};
}

uint64_t parallelRegionsOnThisThread() { return regionsOnThread; }

std::vector<prometheus::MetricFamily> kernelThreadFamilies(const KernelThreadTotals &totals,
                                                           const std::string &busyHelp) {
  using prometheus::MetricType;
  prometheus::MetricFamily byThreads = transport::metricFamily(
      "courier_kernel_launches_total",
      "Kernel launches that returned, by whether their loops ran parallel on the kernel-thread "
      "team (parallel) or all on the launching thread (one).",
      MetricType::Counter);
  transport::addSample(byThreads, static_cast<double>(totals.parallelLaunches), "threads",
                       "parallel");
  transport::addSample(byThreads, static_cast<double>(totals.oneThreadLaunches), "threads", "one");
  std::vector<prometheus::MetricFamily> families;
  families.push_back(transport::singleSample("courier_kernel_threads_busy", busyHelp,
                                             MetricType::Gauge,
                                             static_cast<double>(totals.busyThreads)));
  families.push_back(std::move(byThreads));
  return families;
}

} // namespace courier::executor
