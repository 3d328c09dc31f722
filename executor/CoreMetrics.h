// The executor core's counters, which its hosts count into too (executor/KernelHost.h), and
// one launch's span from its start to its outcome.
#ifndef COURIER_EXECUTOR_COREMETRICS_H
#define COURIER_EXECUTOR_COREMETRICS_H

#include "transport/Metrics.h"

#include <prometheus/histogram.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace courier::executor {

struct CoreMetrics {
  using Clock = std::chrono::steady_clock;

  std::atomic<uint64_t> launches{0}, launchFailures{0}, calls{0}, callFailures{0};
  std::atomic<uint64_t> objectUploads{0}, objectsDropped{0}, objectsEvicted{0};
  std::atomic<uint64_t> sessionsOpened{0}, sessionsExpired{0};
  std::atomic<uint64_t> deadlineKills{0}, workersRestarted{0};
  /// Launches between their start and their outcome, over either channel.
  std::atomic<uint64_t> launchesRunning{0};
  prometheus::Histogram launchSeconds{transport::durationBuckets()};
  /// Worker deaths by cause ("crash", "deadline", "exit"), crashes by signal.
  std::mutex labelledMutex;
  std::map<std::string, uint64_t> restartsByCause, crashesBySignal;
};

/// One launch from its start to its outcome, whichever path it takes: running while this
/// lives; counted as a launch, with its duration when timed, at finish() or at the end.
class RunningLaunch {
public:
  using Clock = std::chrono::steady_clock;

  RunningLaunch(CoreMetrics &metrics, bool timed)
      : metrics(metrics), timed(timed), started(timed ? Clock::now() : Clock::time_point()) {
    metrics.launchesRunning++;
  }
  RunningLaunch(const RunningLaunch &) = delete;
  RunningLaunch &operator=(const RunningLaunch &) = delete;
  ~RunningLaunch() {
    finish();
    metrics.launchesRunning--;
  }

  /// The kernel has answered: what follows (decoding, packing) is not its time.
  void finish() {
    if (finished)
      return;
    finished = true;
    if (timed)
      metrics.launchSeconds.Observe(std::chrono::duration<double>(Clock::now() - started).count());
    metrics.launches++;
  }

private:
  CoreMetrics &metrics;
  bool timed;
  bool finished = false;
  Clock::time_point started;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_COREMETRICS_H
