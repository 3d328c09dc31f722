// The threads kernels' parallel loops run on: the team of LLVM's OpenMP runtime (libomp), one
// per process, its size chosen once (--kernel-threads; by default the CPUs the process may run
// on) and its threads started before a worker enters its sandbox.
#ifndef COURIER_EXECUTOR_KERNELTHREADS_H
#define COURIER_EXECUTOR_KERNELTHREADS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <prometheus/metric_family.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace courier::executor {

/// The CPUs this process may run on (sched_getaffinity: taskset, cpusets and containers'
/// limits), at least 1.
unsigned availableCpus();

/// Sets how many threads a kernel's parallel loop uses, for every launch from now on
/// (0: availableCpus()). Threads idle after a region sleep rather than spin (KMP_BLOCKTIME
/// 0, unless the environment sets it), so a worker's CPU time is its kernels' work.
void setKernelThreads(unsigned threads);

/// The size setKernelThreads chose (if it was never called, availableCpus() as the first call
/// of either found it).
unsigned kernelThreads();

/// Starts the team now, from the calling thread, which must be the thread that launches
/// kernels (the runtime keeps a team per launching thread): afterwards a launch creates no
/// thread. Each thread of the team gets an alternate signal stack of its own, so the crash
/// reporter runs on it after a stack overflow, and its index for the report.
llvm::Error startKernelThreads();

/// Called on the launching thread before a kernel runs: its parallel loops take the chosen
/// number of threads. Cheap.
void prepareKernelLaunch();

/// Called on the launching thread once the kernel prepareKernelLaunch preceded has returned:
/// counts the launch as parallel (it started a parallel region on a team of two or more) or
/// as run on one thread.
void finishKernelLaunch();

/// What a process's kernels did with its team, for metrics: threads in a parallel region now
/// (the team's size while one runs), and launches by whether they ran parallel. A worker
/// keeps it in the page it shares with its executor (executor/WorkerProtocol.h), which sums
/// its workers' (WorkerPool::kernelThreadTally).
struct KernelThreadTally {
  std::atomic<uint64_t> busyThreads{0};
  std::atomic<uint64_t> parallelLaunches{0};
  std::atomic<uint64_t> oneThreadLaunches{0};
};

/// Counts from now on into `shared` (which must outlive the process's launches), carrying
/// over what was counted so far unless `carryOver` is false.
void publishKernelThreadTally(KernelThreadTally *shared, bool carryOver = true);

/// This process's tally (where it is published, or its own).
const KernelThreadTally &kernelThreadTally();

/// Sums of tallies: a process's and its workers' (WorkerPool::kernelThreadTotals).
struct KernelThreadTotals {
  uint64_t busyThreads = 0;
  uint64_t parallelLaunches = 0;
  uint64_t oneThreadLaunches = 0;
};

/// The metric families a process reports its kernels' teams as, an executor and courier-serve
/// alike: the gauge courier_kernel_threads_busy (`busyHelp` says whose threads it counts) and
/// courier_kernel_launches_total{threads="parallel"|"one"}.
std::vector<prometheus::MetricFamily> kernelThreadFamilies(const KernelThreadTotals &totals,
                                                           const std::string &busyHelp);

/// The OpenMP runtime entries compiled parallel loops call, with their addresses in this
/// process: the object host's allow-list takes them. __kmpc_fork_call is Courier's wrapper,
/// which counts parallel regions and busy threads.
llvm::ArrayRef<std::pair<const char *, const void *>> kernelThreadSymbols();

/// Counts for metrics: parallel regions started, and threads running one now.
struct KernelThreadCounts {
  uint64_t parallelRegions = 0;
  uint64_t busyThreads = 0;
};
KernelThreadCounts kernelThreadCounts();

/// Parallel regions the calling thread has started so far (a launch that started none ran on
/// its thread alone).
uint64_t parallelRegionsOnThisThread();

} // namespace courier::executor

#endif // COURIER_EXECUTOR_KERNELTHREADS_H
