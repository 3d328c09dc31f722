// Where a session's kernels run: an interface with two implementations, chosen once when the
// executor core starts and used for every session it opens.
//  - In this process (executor/InProcessHost.cpp): an ObjectHost (ORC) per session, async
//    launches on the core's pool; nothing contains a kernel and nothing can end one.
//  - In a worker (executor/WorkerHost.cpp): a sandboxed courier-worker process per session,
//    started again (its objects relinked) when one dies; shared-memory arenas carry large
//    tensors, and the worker may answer a same-host channel itself.
// The core (executor/ExecutorCore.h) keeps what does not depend on the place: the session
// table, the object store and its holds, deadlines, async launch ids, and metrics.
#ifndef COURIER_EXECUTOR_KERNELHOST_H
#define COURIER_EXECUTOR_KERNELHOST_H

#include "executor/EndReason.h"
#include "transport/Backend.h"
#include "transport/SharedChannel.h"
#include "transport/Wire.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <prometheus/metric_family.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class StdThreadPool;
} // namespace llvm

namespace courier::executor {

using Clock = std::chrono::steady_clock;
using transport::ObjectBlob;
using transport::OwnedTensor;
using transport::ResultSpec;
using transport::SharedBuffer;
using transport::TensorView;

struct CoreOptions;
struct CoreMetrics;
class PluginSet;
struct ObjectInfo;
class RunningLaunch;

/// Where a launch's input bytes go before it runs: one buffer per input without isolation,
/// one area the worker maps with it (shared memory when large).
class InputArea {
public:
  InputArea();
  InputArea(InputArea &&) noexcept;
  InputArea &operator=(InputArea &&) noexcept;
  ~InputArea();
  /// Where input `i`'s packed bytes are to be written.
  char *input(size_t i) const;

  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Shared memory a same-host client maps (transport/SharedChannel.h): the region it writes a
/// launch's inputs into and the region the results come back in. With isolation the
/// session's worker maps both too, so a kernel reads its inputs where the client wrote them
/// and the worker packs results where the client reads them.
class SharedRegions {
public:
  /// Two sealed memfds of these sizes.
  static llvm::Expected<std::shared_ptr<SharedRegions>> create(uint64_t inputBytes,
                                                               uint64_t resultBytes);
  ~SharedRegions();
  const SharedBuffer &inputs() const;
  const SharedBuffer &results() const;

  struct Impl;
  std::unique_ptr<Impl> impl;

private:
  SharedRegions();
};

/// A same-host channel whose launches the session's worker answers itself (control page
/// version 3, transport/SharedChannel.h): what every worker the session starts is handed,
/// each piece held for as long as the last holder keeps the channel.
struct DirectChannel {
  /// This process's own mapping of the control page (and its descriptor): a launch a worker
  /// died before answering is answered here, before the next worker is handed the channel.
  transport::SharedBuffer control;
  std::shared_ptr<SharedRegions> regions;
  /// What the worker counts (transport::shm::WorkerCounts), which the client never maps.
  transport::SharedBuffer counts;
  transport::UniqueFd workerSocket; ///< The worker's end of the socket to the client.
  /// Launches answered here for a worker that ended, for the channel's metrics.
  mutable std::atomic<uint64_t> answeredForWorkers{0};

  transport::shm::ControlPage &page() const {
    return *reinterpret_cast<transport::shm::ControlPage *>(control.data());
  }
  transport::shm::WorkerCounts &workerCounts() const {
    return *reinterpret_cast<transport::shm::WorkerCounts *>(counts.data());
  }
};

/// A launch's results: views of packed or kernel-owned tensors, alive as long as this is.
struct LaunchResults {
  std::vector<TensorView> views;
  std::shared_ptr<void> keepAlive;
  /// Without isolation, the kernel's own buffers, which a caller may take over (the local
  /// backend hands them to its caller without a copy); empty otherwise.
  std::vector<OwnedTensor> *owned = nullptr;
};

/// What the core reports of itself (GET /v1/health); the host factory fills in its part.
struct HealthReport {
  std::string version, triple, cpu;
  std::vector<std::string> features;
  size_t sessions = 0, objects = 0;
  bool isolated = false;
  uint64_t workersLive = 0, workersWarm = 0, workersRestarted = 0;
  /// False when workers cannot be started; `reason` says why.
  bool healthy = true;
  std::string reason;
};

/// One launch as the core hands it to a host: `entry` of the attached object `object`, on
/// inputs in `area` (or, with no area, on `inputs` where the caller holds them, which only a
/// host in this process can read). With `resultsInto`, large results go to its result region.
struct LaunchCall {
  llvm::StringRef object, entry;
  InputArea *area = nullptr;
  llvm::ArrayRef<TensorView> inputs;
  llvm::ArrayRef<ResultSpec> results;
  Clock::time_point deadline;
  SharedRegions *resultsInto = nullptr;
};

/// What the core lends the hosts it opens: its options, plugins and metrics, the pool async
/// launches run on, the object store (to load an object again into a fresh worker) and
/// whether it is stopping. Outlives every host.
struct HostServices {
  const CoreOptions &options;
  std::shared_ptr<PluginSet> plugins;
  CoreMetrics &metrics;
  llvm::StdThreadPool &asyncPool;
  std::function<std::optional<ObjectBlob>(llvm::StringRef sha)> findObject;
  std::function<bool()> stopping;
};

/// `unknown_entry` unless `info` (what a host knows of the loaded object `sha`, or null)
/// holds `entry`; a signature error unless the entry takes and returns nothing, as an async
/// launch must. What both hosts' checkAsyncEntry check.
llvm::Error checkAsyncLaunch(const ObjectInfo *info, llvm::StringRef sha, llvm::StringRef entry);

/// `call_failed` unless a call of `symbol` produced the `outputSize` bytes its caller expects.
llvm::Error checkCallOutput(llvm::StringRef symbol, llvm::StringRef output, uint64_t outputSize);

/// The health of an executor in this process before its sessions and hosts are counted: its
/// version, triple, CPU and CPU features.
HealthReport describeThisExecutor();

/// Where one session's kernels run. The core serializes attach and detach and launches only
/// objects the session holds; everything else may be called from any thread. Failures are
/// CodedErrors (transport/ErrorCode.h).
class KernelHost {
public:
  virtual ~KernelHost();

  /// Loads `blob`, which the session now holds, so its entries can be launched, within the
  /// launch timeout counted from when the host takes it up. Its message names the object.
  virtual llvm::Error attach(const ObjectBlob &blob) = 0;
  /// Unloads `sha`; launches of it still running keep its code until they return.
  virtual void detach(llvm::StringRef sha) = 0;
  /// `unknown_entry` unless `entry` of the attached `sha` exists; a signature error unless it
  /// takes and returns nothing, as an async launch must.
  virtual llvm::Error checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) = 0;

  /// An area for the inputs `headers` describe, to be filled before launch().
  virtual llvm::Expected<InputArea>
  inputArea(llvm::ArrayRef<transport::wire::TensorHeader> headers) = 0;
  /// Runs a launch; `running.finish()` is called once the kernel has answered.
  virtual llvm::Expected<LaunchResults> launch(const LaunchCall &call, RunningLaunch &running) = 0;
  /// Starts `entry` (no inputs, no results) on the core's async pool; `finish` gets its
  /// outcome. The task never keeps a closed session's host from going.
  virtual void launchAsync(std::string object, std::string entry, Clock::time_point deadline,
                           std::function<void(llvm::Error)> finish) = 0;
  /// Calls `symbol` with `input`; the reply's size is checked by the core.
  virtual llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                           uint64_t outputSize, Clock::time_point deadline) = 0;

  /// The session left the table: what runs fails at once, and nothing new starts.
  virtual void close() = 0;
  /// Ends what runs now (`Deadline`, `Shutdown`), which then fails at once; false when
  /// nothing here can end a kernel.
  virtual bool endKernels(EndReason reason) = 0;
  /// The process kernels run in, when it is not this one (0 otherwise, or none now).
  virtual int64_t workerPid() = 0;

  /// The same-host channel (see ExecutorCore): only a host whose kernels run in a worker of
  /// their own can have it answer launches itself; others are `unavailable`.
  virtual llvm::Expected<bool> serveDirect(std::shared_ptr<const DirectChannel> channel,
                                           Clock::time_point deadline, bool replace, bool wait);
  virtual void stopDirect(const DirectChannel *channel);
  virtual bool watchDirect(const DirectChannel *channel, Clock::time_point until,
                           int64_t &workerPid);
  virtual void endDirectLaunch(int64_t workerPid);
  /// Whether a request holds the host now (a launch, a call, an attach).
  virtual bool held();
};

/// Makes the hosts of one core's sessions, all of one kind, and reports on them.
class HostFactory {
public:
  virtual ~HostFactory();
  /// A host for session `id` (a worker's is taken now, so the first launch does not wait).
  virtual llvm::Expected<std::shared_ptr<KernelHost>> open(const std::string &id) = 0;
  /// Whether hosts run kernels outside this process, can end them, and can answer a
  /// same-host channel themselves.
  virtual bool contained() const = 0;
  /// Fills in the health figures of the hosts' kind (workers live and warm, restarts).
  virtual void report(HealthReport &report) = 0;
  /// Adds the hosts' kind's own metric families.
  virtual void addMetrics(std::vector<prometheus::MetricFamily> &families) = 0;
  /// Starts no more hosts' processes; what runs is ended by the core next (endKernels).
  virtual void stopTaking() = 0;
  /// After stopTaking() and every host's endKernels(Shutdown).
  virtual void shutdown() = 0;
};

/// Hosts in this process: each session its own ObjectHost.
llvm::Expected<std::unique_ptr<HostFactory>> makeInProcessHosts(const HostServices &services);
/// Hosts in workers: checks that a worker starts and enters its sandbox first.
llvm::Expected<std::unique_ptr<HostFactory>> makeWorkerHosts(const HostServices &services);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_KERNELHOST_H
