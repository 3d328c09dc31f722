// A session's async launches: each started on its kernel host and given an id, its outcome kept
// until it is awaited. The executor core's sessions and the in-process backend's both keep
// theirs here.
#ifndef COURIER_EXECUTOR_ASYNCLAUNCHES_H
#define COURIER_EXECUTOR_ASYNCLAUNCHES_H

#include "executor/KernelHost.h"
#include "transport/ErrorCode.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace courier::executor {

class AsyncLaunches {
public:
  /// `session` names the session in messages.
  explicit AsyncLaunches(std::string session) : session(std::move(session)) {}

  /// Starts `entry` of the attached `object` on `host` (the entry checked already) and returns
  /// its id, or `too_many_launches` when transport::wire::kMaxPendingLaunches are not yet
  /// awaited. A launch that fails counts one in `failures`.
  llvm::Expected<uint64_t> start(KernelHost &host, llvm::StringRef object, llvm::StringRef entry,
                                 Clock::time_point deadline, std::atomic<uint64_t> &failures);
  /// Waits for launch `id` until `deadline`; past it, ends the host's kernels (the launch then
  /// fails as they make it), or is `deadline_exceeded` where the host cannot end them. A
  /// launch is awaited once: again, or never started, is `unknown_launch`.
  llvm::Error await(KernelHost &host, uint64_t id, Clock::time_point deadline);
  /// Launches not yet awaited.
  size_t pending();

private:
  /// How a launch ended: no code when it succeeded.
  struct Outcome {
    std::optional<transport::ErrorCode> code;
    std::string message;
  };
  const std::string session;
  std::mutex mutex;
  uint64_t next = 1;
  std::map<uint64_t, std::shared_future<Outcome>> launches;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_ASYNCLAUNCHES_H
