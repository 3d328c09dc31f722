// A control group of a worker's own, where the system lets this process make one: it counts
// the memory a worker's files in memory hold (memfd pages, which RLIMIT_AS does not see once
// unmapped) and bounds the threads it may start (RLIMIT_NPROC does not bind root, and counts
// every process of a user, not one worker's).
#ifndef COURIER_EXECUTOR_WORKERCGROUP_H
#define COURIER_EXECUTOR_WORKERCGROUP_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace courier::executor {

class WorkerCgroup {
public:
  /// How this process can make groups: "cgroup2", "cgroup1", or "none" (the cgroup file
  /// systems are not mounted, not writable, or not delegated to this process). Decided once.
  static const char *kind();

  /// Makes a group for the worker `pid` and moves it there; null where kind() is "none" or
  /// the group could not be made (then the worker runs with its rlimits alone).
  static std::unique_ptr<WorkerCgroup> adopt(pid_t pid);

  /// Removes the group; the worker must have been reaped.
  ~WorkerCgroup();
  WorkerCgroup(const WorkerCgroup &) = delete;
  WorkerCgroup &operator=(const WorkerCgroup &) = delete;

  /// Bounds the group's memory at what it holds now plus `extraBytes` (0: no bound) and its
  /// tasks (threads) at those it has now plus `extraTasks`: called once the worker is ready,
  /// so what it mapped to start (the compiler, its warm-up) is not counted against a module,
  /// as RLIMIT_AS is set from the size at that point.
  llvm::Error limit(uint64_t extraBytes, uint64_t extraTasks);

  /// True when the kernel ended a task of the group for going past its memory bound.
  bool killedForMemory() const;

private:
  explicit WorkerCgroup(std::vector<std::string> directories)
      : directories(std::move(directories)) {}
  /// The group's directory for each hierarchy it lives in: one under cgroup2; the memory
  /// and pids hierarchies' under cgroup1.
  std::vector<std::string> directories;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERCGROUP_H
