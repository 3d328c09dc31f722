// A same-host channel a session's worker answers itself (control page version 3,
// transport/SharedChannel.h): the executor hands its control page, regions, counts and the
// client's socket to the worker (MessageKind::Channel), which from then on runs each launch
// the client rings for on its kernels, beside the executor's own requests.
#ifndef COURIER_EXECUTOR_WORKERDIRECT_H
#define COURIER_EXECUTOR_WORKERDIRECT_H

#include "executor/WorkerMemory.h"
#include "executor/WorkerProtocol.h"
#include "transport/SharedChannel.h"

#include <functional>
#include <memory>

namespace courier::executor {

class InProcessKernels;

class WorkerDirect {
public:
  /// Maps the channel handed over in `request`: the result bound, then five descriptors
  /// (control page, input region, result region, worker counts, the client's socket).
  static llvm::Expected<std::unique_ptr<WorkerDirect>> map(MessageReader &in, Message &request);
  ~WorkerDirect();

  /// Has `channel` call `serve` whenever the client rings or closes the channel.
  void watchOn(WorkerChannel &channel, std::function<void()> serve);
  /// True once the client closed the channel: it is to be let go.
  bool closed() const;
  /// Answers the launch waiting in the request slot, if one is, running it on `kernels`.
  void answerWaiting(InProcessKernels &kernels);

private:
  WorkerDirect() = default;
  transport::shm::ControlPage &page() const;
  transport::shm::WorkerCounts &counts() const;
  /// Runs the launch of request `ticket` and returns its reply.
  std::string run(InProcessKernels &kernels, uint32_t ticket);
  /// Results larger than the result region, in a buffer of their own sent to the client.
  llvm::Error sendSeparately(ResultLayout &layout, uint64_t total, uint32_t ticket);
  void countDuration(std::chrono::steady_clock::duration took);

  transport::SharedBuffer control;
  std::unique_ptr<KnownArena> inputs, results;
  transport::SharedBuffer countsBuffer;
  transport::UniqueFd client;
  uint64_t maxResultBytes = 0;
  uint32_t seen = 0; ///< The request answered last.
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERDIRECT_H
