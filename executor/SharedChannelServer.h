// The executor's end of same-host channels (transport/SharedChannel.h): offers made over
// HTTP, the abstract unix socket clients connect to with an offer's token, and one thread
// per channel. With isolation (page version 3) the session's worker answers the channel's
// launches and the thread watches from the side: each launch's deadline, the worker's death
// (it answers for the launch that was running and hands the channel to the next worker) and
// the launches the worker counted, which go into the same metrics as HTTP launches. Without
// isolation (version 2 and older) the thread runs the launches its client rings for, through
// the same ExecutorCore calls (sessions, attach, deadlines, metrics) as an HTTP launch.
#ifndef COURIER_EXECUTOR_SHAREDCHANNELSERVER_H
#define COURIER_EXECUTOR_SHAREDCHANNELSERVER_H

#include "executor/ExecutorCore.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <prometheus/metric_family.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::executor {

/// What a client needs to connect: the socket, a token good for one connection within a
/// few seconds, and the bytes of each of its two data regions.
struct SharedChannelOffer {
  std::string socket; ///< "@name": an abstract unix socket.
  std::string token;
  uint64_t inputBytes = 0, resultBytes = 0;
  std::string host;         ///< transport::shm::hostIdentity() of this process.
  uint32_t pageVersion = 1; ///< The control page version the channel will use.
};

class SharedChannelServer {
public:
  /// Each session's regions take at most `arenaBytes` (inputs and results, half each); 0
  /// turns channels off.
  SharedChannelServer(ExecutorCore &core, uint64_t arenaBytes);
  ~SharedChannelServer();

  bool enabled() const;
  /// An offer for session `sessionId`, whose regions take at most `requestedBytes` (0: the
  /// server's bound), with a control page of the newest version up to `pageVersion` the
  /// server speaks (a client that names none speaks version 1). Opens the socket on first use.
  llvm::Expected<SharedChannelOffer> offer(const std::string &sessionId, uint64_t requestedBytes,
                                           uint32_t pageVersion = 1);
  /// Ends session `sessionId`'s channel, if it has one.
  void endSession(llvm::StringRef sessionId);
  /// Ends every channel and stops accepting; a launch running on one finishes first (the
  /// core's stop() ends its worker).
  void stop();

  /// Adds what workers counted of the launches they answered to the metrics, the core's too:
  /// done before the metrics are read.
  void countWorkerLaunches();
  std::vector<prometheus::MetricFamily> collectMetrics();

  struct Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_SHAREDCHANNELSERVER_H
