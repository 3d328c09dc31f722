// The executor core: sessions, the content-addressed object store, launches, async launches,
// calls and health. Where a session's kernels run (a worker process of its own, or this
// process) is its kernel host (executor/KernelHost.h), of one kind for the whole core.
// courier-executor's HTTP adapter (executor/ExecutorServer.cpp) is a thin layer over it; the
// in-process "local" backend (executor/LocalBackend.cpp) uses the in-process hosts without
// it. No HTTP type appears here; failures are CodedErrors (transport/ErrorCode.h).
#ifndef COURIER_EXECUTOR_EXECUTORCORE_H
#define COURIER_EXECUTOR_EXECUTORCORE_H

#include "executor/KernelHost.h"
#include "transport/Backend.h"
#include "transport/Isolation.h"
#include "transport/SharedChannel.h"
#include "transport/Wire.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::executor {

struct CoreOptions {
  /// Shared libraries whose symbols `call` can reach.
  std::vector<std::string> plugins;
  /// Most sessions open at once (each in a worker of its own is a process); one more is
  /// `too_many_sessions`.
  size_t maxSessions = 128;
  /// Sessions unused for this long are closed; 0: none is (and requests skip the bookkeeping
  /// that keeps a session in use open).
  std::chrono::seconds idleTimeout{600};
  /// An object no session holds is dropped from the store after this long, so a client
  /// between its upload and its attach, or re-attaching soon after a release, finds it.
  std::chrono::milliseconds objectGrace{60000};
  /// Most bytes of objects the store holds. An upload that would pass it first evicts objects
  /// no session holds, oldest first; when those are not enough it is `store_full`.
  uint64_t maxStoreBytes = uint64_t(1024) << 20;
  /// Largest tensor bytes a launch may bring or return.
  uint64_t maxBytes = uint64_t(4) << 30;
  /// Async launches run on this many threads; the rest wait their turn.
  unsigned asyncThreads = 32;

  /// Where shipped code runs (the sessions' kernel hosts, executor/KernelHost.h). `Process`
  /// (the default): each session's objects are linked and run in its own sandboxed worker
  /// process, so a kernel that crashes, spins or misbehaves costs only its session's request
  /// in flight. `InProcess`: in this process (faster to start; not contained, and no
  /// deadline can end a kernel).
  transport::Isolation isolation = transport::Isolation::Process;
  /// A launch, call or async launch running longer than this is ended (its worker killed):
  /// `deadline_exceeded`. A request may ask for less, never more.
  std::chrono::milliseconds launchTimeout{60000};
  /// Address space a worker's kernels may use beyond the worker's own (RLIMIT_AS).
  uint64_t workerMemoryMiB = 4096;
  /// RLIMIT_CPU of a worker over its life; 0: none (deadlines bound each launch).
  uint64_t workerCpuSeconds = 0;
  /// Threads of a kernel's parallel loops, per worker (or in this process, not isolated);
  /// 0: the CPUs the process may run on (executor/KernelThreads.h).
  unsigned kernelThreads = 0;
  /// Workers started ahead of need, so opening a session does not wait for a process.
  unsigned warmWorkers = 2;
  /// Workers enter a seccomp sandbox before running shipped code. Without it (only where
  /// seccomp is unavailable) kernels run contained but unconfined.
  bool sandbox = true;
  /// Accept objects without signature tables (hand-written objects); launches of their
  /// entries can then only be checked for plausibility.
  bool allowUnsignedObjects = false;
  /// The worker program; empty means courier-worker beside this process's executable.
  std::string workerProgram;
};

/// A session as the core's users hold it: opaque, kept alive while a request uses it.
class Session;
using SessionRef = std::shared_ptr<Session>;

/// What an operator sees of one open session (GET /v1/sessions).
struct SessionSummary {
  std::string id;
  std::vector<std::string> objects; ///< The objects it holds (attached), by SHA-256, sorted.
  int64_t idleMs = 0;               ///< Since it was last used.
  int requestsInFlight = 0;         ///< Requests running on it now.
  int64_t workerPid = 0;            ///< Its worker process; 0 without one (or without isolation).
  size_t pendingLaunches = 0;       ///< Async launches not yet awaited.
};

/// What an operator sees of one stored object (GET /v1/objects).
struct ObjectSummary {
  std::string sha256;
  uint64_t size = 0;
  uint64_t holders = 0; ///< Sessions that hold it; at 0 it goes once its grace period ends.
};

class ExecutorCore {
public:
  /// Loads the plugins and, with isolation, starts the worker pool and checks that a worker
  /// starts and enters its sandbox.
  static llvm::Expected<std::unique_ptr<ExecutorCore>> create(CoreOptions options);
  ~ExecutorCore();

  const CoreOptions &options() const;

  /// Opens session `id`, or returns it if it is open (`created` says which).
  llvm::Expected<SessionRef> openSession(const std::string &id, bool &created);
  /// Whether session `id` is open (without marking it used).
  bool hasSession(llvm::StringRef id);
  /// The open session `id` (and marks it used), or `unknown_session`.
  llvm::Expected<SessionRef> findSession(llvm::StringRef id);
  /// Every open session, by id; looking does not mark a session used.
  std::vector<SessionSummary> listSessions();
  /// Closes `id`: its holds end and its worker (if any) is ended; `unknown_session` if absent.
  llvm::Error closeSession(llvm::StringRef id);
  static const std::string &sessionId(const Session &session);

  /// Stores `blob` (its hash already checked); true if it was new. An upload of a stored
  /// object restarts its grace period. A new object that would take the store past
  /// `maxStoreBytes` evicts objects no session holds, oldest first, or is `store_full` (and
  /// nothing is evicted) when sessions hold too much for it to fit. An object whose features
  /// record (abi/KernelABI.h) names a CPU feature this machine lacks is `unsupported_cpu`,
  /// naming what is missing, and is not stored.
  llvm::Expected<bool> storeObject(ObjectBlob blob);
  /// `store_full` if an object of `bytes` could not be stored even once every object no
  /// session holds were evicted: checked before an upload's body is read.
  llvm::Error checkStoreRoom(uint64_t bytes);
  std::optional<ObjectBlob> findObject(llvm::StringRef sha);
  /// Every stored object, by SHA-256.
  std::vector<ObjectSummary> listObjects();
  /// Loads the stored object `sha` into the session and holds it (`unknown_object`,
  /// `invalid_object`, `unsigned_object`...). Attaching twice is a no-op.
  llvm::Error attach(Session &session, llvm::StringRef sha);
  /// Unloads `sha` from the session and ends its hold; false if the session did not hold it.
  bool detach(Session &session, llvm::StringRef sha);

  /// The deadline of a request that asks for `requested` (none: the server's own).
  Clock::time_point deadline(std::optional<std::chrono::milliseconds> requested) const;

  /// An area for the inputs `headers` describe, to be filled before launch(). Large inputs
  /// go to shared memory the session reuses from launch to launch.
  llvm::Expected<InputArea> inputArea(Session &session,
                                      llvm::ArrayRef<transport::wire::TensorHeader> headers);
  /// An area whose inputs are already in `regions`' input region, at the offsets `headers`
  /// give (checked by the caller to lie inside it).
  InputArea inputAreaIn(SharedRegions &regions,
                        llvm::ArrayRef<transport::wire::TensorHeader> headers);
  /// Runs `entry` of `sha` (attached) on inputs in `area` (or, without isolation and with
  /// no area, on `inputs` in the caller's memory). With `resultsInto`, an isolated launch's
  /// worker packs large results into its result region.
  llvm::Expected<LaunchResults> launch(Session &session, llvm::StringRef sha, llvm::StringRef entry,
                                       InputArea *area, llvm::ArrayRef<TensorView> inputs,
                                       llvm::ArrayRef<ResultSpec> results,
                                       Clock::time_point deadline,
                                       SharedRegions *resultsInto = nullptr);
  /// Starts `entry` (takes and returns nothing) without waiting; the launch's id.
  llvm::Expected<uint64_t> launchAsync(const SessionRef &session, llvm::StringRef sha,
                                       llvm::StringRef entry, Clock::time_point deadline);
  /// Waits for launch `id` until `deadline`; past it, the launch is ended.
  llvm::Error await(Session &session, uint64_t id, Clock::time_point deadline);
  /// Calls `symbol` with `input`; the reply is exactly `outputSize` bytes.
  llvm::Expected<std::string> call(Session &session, llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize, Clock::time_point deadline);

  /// Has the session's worker (started now if it has none) answer `channel`'s launches, and
  /// every worker the session starts after it, until stopDirect(). `unavailable` without
  /// isolation. Nothing to do when the current worker already answers it. False when the
  /// session's channel is another one now, or none (it was dropped: no worker could take it),
  /// unless `replace` makes `channel` the session's; false too, without `wait`, when a request
  /// holds the worker now (the channel is not the session's then).
  llvm::Expected<bool> serveDirect(Session &session, std::shared_ptr<const DirectChannel> channel,
                                   Clock::time_point deadline, bool replace = false,
                                   bool wait = true);
  /// No worker the session starts from now on is handed `channel` (if it is the session's).
  void stopDirect(Session &session, const DirectChannel *channel);
  /// For the thread that watches `channel`: waits until `until`, or until the session's worker
  /// ends; `workerPid` says which worker answers the channel (0: none does now). If the
  /// worker ended it is counted and logged as any worker's death, the launch it was running
  /// on its channel is answered with the error an HTTP launch would get, and the session goes
  /// on without it (true).
  bool watchDirect(Session &session, const DirectChannel *channel, Clock::time_point until,
                   int64_t &workerPid);
  /// Ends the session's worker `workerPid` (not one started since): the channel launch it
  /// runs went past its deadline.
  void endDirectLaunch(Session &session, int64_t workerPid);
  /// Whether the session is still open (not closed or expired), without marking it used.
  bool sessionOpen(Session &session);
  /// Marks the session used now, for the idle reaper.
  void touch(Session &session);
  /// Whether something (an HTTP request, an async launch, a handover) holds the session's
  /// worker now.
  bool workerHeld(Session &session);
  /// Whether sessions' kernels run outside this process (and so can be ended, and a
  /// session's worker can answer a same-host channel itself).
  bool hostsContained() const;
  /// Adds to the launch metrics what workers counted of the launches they answered for
  /// channels: `buckets` per transport::durationBuckets() bucket and one past the last.
  void countDirectLaunches(uint64_t started, uint64_t failed, std::vector<double> buckets,
                           double seconds);
  /// Channel launches running now went from one figure to another (each channel runs one).
  void countDirectRunning(int64_t change);

  HealthReport health();
  /// The core's metrics, read from its counters now.
  std::vector<prometheus::MetricFamily> collectMetrics();
  /// Ends every worker and stops starting new ones: what runs on them fails at once.
  void stop();
  /// Whether stop() began.
  bool stopping();

  struct Impl;

private:
  explicit ExecutorCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

using transport::wire::randomSessionId;

} // namespace courier::executor

#endif // COURIER_EXECUTOR_EXECUTORCORE_H
