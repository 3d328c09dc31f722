// Kernels in a worker: each session's objects linked and run in a sandboxed courier-worker
// process of its own, started again (what the session holds relinked) when one dies.
// Large tensors cross in shared-memory arenas the session reuses; the worker may answer a
// same-host channel's launches itself. See executor/KernelHost.h.
#include "abi/MemRef.h"
#include "executor/Arena.h"
#include "executor/CoreMetrics.h"
#include "executor/ExecutorCore.h"
#include "executor/KernelThreads.h"
#include "executor/ObjectHost.h"
#include "executor/WorkerPool.h"
#include "transport/Log.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/ThreadPool.h"

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <poll.h>
#include <set>
#include <thread>
#include <unistd.h>

namespace courier::executor {

namespace shm = transport::shm;
using transport::ErrorCode;
using transport::makeCodedError;
namespace wire = transport::wire;

namespace {

constexpr uint64_t kInputAlignment = 64;
uint64_t alignInput(uint64_t n) { return (n + kInputAlignment - 1) & ~(kInputAlignment - 1); }

/// Arenas a session's worker keeps mapped at most; the oldest others are unmapped first.
constexpr size_t kMappedArenas = 8;

/// A launch's results as the worker sent them: packed tensors, inline or in shared memory.
struct WorkerResults {
  std::string inlineBytes;
  SharedBuffer shared;
  /// Results the worker wrote into the session's result arena, given back once sent.
  std::shared_ptr<ArenaPool> pool;
  std::shared_ptr<Arena> arena;
  std::vector<TensorView> views;
  ~WorkerResults() {
    if (arena)
      pool->give(pool->idleResults, std::move(arena));
  }
};

/// The bytes the worker's results claim, after checking each against what the caller
/// expects: in the result arena results may lie apart, where the kernel computed them, so
/// what counts against the limit is their bytes, not the span.
llvm::Expected<uint64_t> checkResultShapes(LaunchAnswer &answer,
                                           llvm::ArrayRef<ResultSpec> expected) {
  if (answer.results.size() != expected.size())
    return llvm::createStringError(
        llvm::formatv("{0} results, expected {1}", answer.results.size(), expected.size()));
  uint64_t counted = 0;
  for (size_t i = 0; i < answer.results.size(); ++i) {
    PlacedTensor &shape = answer.results[i];
    if (static_cast<int64_t>(shape.sizes.size()) != expected[i].rank ||
        shape.elemSize != expected[i].elemSize)
      return llvm::createStringError(
          llvm::formatv("result {0} does not have the declared rank and element size", i));
    llvm::Expected<uint64_t> bytes = wire::packedBytes(shape.elemSize, shape.sizes);
    if (!bytes)
      return bytes.takeError();
    shape.bytes = *bytes;
    counted = llvm::SaturatingAdd(counted, shape.bytes);
  }
  return answer.bodyIn == Payload::Arena ? counted : answer.total;
}

/// Where the worker's results lie: the result arena this process lent it (and sealed), the
/// reply itself, or a sealed memfd the reply carries.
llvm::Expected<const char *> placeResults(WorkerResults &results, LaunchAnswer &answer,
                                          Message &reply, std::shared_ptr<ArenaPool> pool,
                                          std::shared_ptr<Arena> &resultArena) {
  uint64_t total = answer.total;
  switch (answer.bodyIn) {
  case Payload::Arena:
    if (!resultArena || total > resultArena->buffer.size())
      return llvm::createStringError("results outside the result arena");
    results.pool = std::move(pool);
    results.arena = std::move(resultArena);
    return results.arena->buffer.data();
  case Payload::Inline:
    results.inlineBytes = answer.inlineBytes.str();
    if (results.inlineBytes.size() != total)
      return llvm::createStringError("a malformed reply");
    return results.inlineBytes.data();
  default: {
    if (reply.fds.size() != 1)
      return llvm::createStringError("no shared buffer");
    llvm::Expected<SharedBuffer> mapped =
        SharedBuffer::map(std::move(reply.fds[0]), total, /*requireSealed=*/true);
    if (!mapped)
      return mapped.takeError();
    results.shared = std::move(*mapped);
    return results.shared.data();
  }
  }
}

/// Reads the worker's reply to a launch, which is untrusted: every shape, offset and size
/// is checked against what the caller asked for and what the payload holds.
llvm::Expected<std::shared_ptr<WorkerResults>>
decodeWorkerResults(Message &reply, llvm::ArrayRef<ResultSpec> expected, llvm::StringRef entry,
                    uint64_t maxBytes, std::shared_ptr<ArenaPool> pool,
                    std::shared_ptr<Arena> &resultArena) {
  auto broken = [&](const llvm::Twine &what) {
    return makeCodedError(ErrorCode::LaunchFailed,
                          "'" + entry + "' returned results the executor cannot use: " + what);
  };
  MessageReader in(reply.bytes);
  LaunchAnswer answer = LaunchAnswer::read(in);
  llvm::Expected<uint64_t> counted = checkResultShapes(answer, expected);
  if (!counted)
    return broken(llvm::toString(counted.takeError()));
  if (!in.ok() || *counted > maxBytes)
    return broken(llvm::formatv("{0} bytes of results", *counted));
  auto results = std::make_shared<WorkerResults>();
  llvm::Expected<const char *> base =
      placeResults(*results, answer, reply, std::move(pool), resultArena);
  if (!base)
    return broken(llvm::toString(base.takeError()));
  for (const PlacedTensor &shape : answer.results) {
    if (!liesWithin(shape.offset, shape.bytes, answer.total))
      return broken("a result outside the reply");
    results->views.push_back(TensorView{*base + shape.offset, shape.elemSize, shape.sizes,
                                        wire::packedStrides(shape.sizes)});
  }
  return results;
}

class WorkerHosts;

/// One session's kernels in its worker process. `workerMutex` serializes what the session
/// asks of the worker (one request at a time); `slotMutex` guards the pointer itself, so a
/// close can end the worker mid-request.
class WorkerHost final : public KernelHost, public std::enable_shared_from_this<WorkerHost> {
public:
  WorkerHost(const HostServices &services, WorkerPool &pool, std::string id,
             std::unique_ptr<WorkerProcess> first)
      : services(services), pool(pool), id(std::move(id)), worker(std::move(first)) {}
  ~WorkerHost() override { close(); }

  llvm::Error attach(const ObjectBlob &blob) override;
  void detach(llvm::StringRef sha) override;
  llvm::Error checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) override;
  llvm::Expected<InputArea> inputArea(llvm::ArrayRef<wire::TensorHeader> headers) override;
  llvm::Expected<LaunchResults> launch(const LaunchCall &call, RunningLaunch &running) override;
  void launchAsync(std::string object, std::string entry, Clock::time_point deadline,
                   std::function<void(llvm::Error)> finish) override;
  llvm::Expected<std::string> call(llvm::StringRef symbol, llvm::StringRef input,
                                   uint64_t outputSize, Clock::time_point deadline) override;
  void close() override;
  bool endKernels(EndReason reason) override;
  int64_t workerPid() override;
  llvm::Expected<bool> serveDirect(std::shared_ptr<const DirectChannel> channel,
                                   Clock::time_point deadline, bool replace, bool wait) override;
  void stopDirect(const DirectChannel *channel) override;
  bool watchDirect(const DirectChannel *channel, Clock::time_point until,
                   int64_t &workerPid) override;
  void endDirectLaunch(int64_t workerPid) override;
  bool held() override;

private:
  /// A worker that ended while it served a channel, and that channel, until the launch it
  /// left unanswered there (if any) has been answered for.
  struct EndedServer {
    std::shared_ptr<WorkerProcess> worker;
    std::shared_ptr<const DirectChannel> channel;
  };

  llvm::Error closedError() const {
    return makeCodedError(ErrorCode::UnknownSession, "session '" + id + "' was closed");
  }
  bool isClosed() {
    std::lock_guard<std::mutex> lock(slotMutex);
    return closed;
  }
  /// The worker in the slot now, if any.
  std::shared_ptr<WorkerProcess> currentWorker() {
    std::lock_guard<std::mutex> lock(slotMutex);
    return worker;
  }
  /// Forgets what the worker holds: it is a new one, or a request to it failed part-way.
  void forgetWorkerState() {
    linked.clear();
    mapped.clear();
  }
  void workerEnded(const std::shared_ptr<WorkerProcess> &ended);
  /// The session's worker, started (its objects linked again, its channel handed) if it has
  /// none or its last one died. `workerMutex` held.
  llvm::Expected<std::shared_ptr<WorkerProcess>> liveWorker(Clock::time_point deadline);
  /// A worker from the pool in the slot, unless the session closed meanwhile.
  llvm::Expected<std::shared_ptr<WorkerProcess>> startWorker();
  /// Loads the stored object `sha` into `into`. `workerMutex` held.
  llvm::Error linkInto(WorkerProcess &into, llvm::StringRef sha, Clock::time_point deadline);
  /// One request to the worker; a worker that dies of it is logged, counted and forgotten, so
  /// the next request starts a fresh one. `workerMutex` held.
  llvm::Expected<Message> ask(WorkerProcess &to, MessageWriter &message, llvm::ArrayRef<int> fds,
                              Clock::time_point deadline, llvm::StringRef what);
  /// A launch of `sha` on the worker (started, and `sha` linked, as needed), its arena
  /// references filled in (referArenas). Takes `workerMutex`.
  llvm::Expected<Message> askLaunch(llvm::StringRef sha, LaunchRequest &launch,
                                    const std::shared_ptr<Arena> &input,
                                    const std::shared_ptr<Arena> &result,
                                    Clock::time_point deadline, llvm::StringRef what);
  /// Fills in a launch's arena references: the input arena (when the inputs are in one), the
  /// result arena, each saying whether its descriptor is in `fds` (only when the worker has
  /// not mapped it), and the ids the worker is to keep mapped. `workerMutex` held.
  void referArenas(LaunchRequest &launch, std::vector<int> &fds,
                   const std::shared_ptr<Arena> &input, const std::shared_ptr<Arena> &result);
  /// The result arena to lend a launch: the caller's result region, or one of the session's
  /// when results are likely large (its last results, or its inputs, were).
  std::shared_ptr<Arena> resultArenaFor(const LaunchCall &call, uint64_t inputBytes);
  /// Counts and logs how a worker ended (unless the executor ended it on purpose).
  void noteDeath(WorkerProcess &dead, const WorkerDeath &death, llvm::StringRef what);
  /// Answers the launch waiting on the channel `ended` served (if any: one rung that no
  /// worker answered) with the error its death gives it. `workerMutex` held.
  void answerForWorker(const EndedServer &ended);
  /// Answers the launch `dead` left unanswered on `channel`, if any, as ended with it.
  void answerForWorker(WorkerProcess &dead, const DirectChannel &channel);
  /// The session's channel goes: no worker is handed it any more, and its watcher ends it.
  void dropDirect(const std::string &why);
  /// Hands the session's same-host channel (if any) to `to`. `workerMutex` held.
  llvm::Error handDirect(WorkerProcess &to, Clock::time_point deadline);

  const HostServices &services;
  WorkerPool &pool;
  const std::string id;

  std::mutex workerMutex;
  std::mutex slotMutex;
  std::shared_ptr<WorkerProcess> worker;       ///< Under slotMutex.
  bool closed = false;                         ///< Under slotMutex: no worker starts again.
  std::set<std::string, std::less<>> attached; ///< Objects the session holds; under workerMutex.
  std::set<std::string, std::less<>> linked;   ///< Objects loaded in `worker`; under workerMutex.
  /// Arenas `worker` has mapped, by id; under workerMutex. A launch sends an arena's
  /// descriptor only when it is not here, and names every id the worker is to keep mapped:
  /// one that expired here (this process let the arena go) is unmapped there.
  std::map<uint64_t, std::weak_ptr<Arena>> mapped;
  /// What the worker reported of each object it loaded; under infoMutex.
  std::mutex infoMutex;
  std::map<std::string, ObjectInfo, std::less<>> infos;
  std::shared_ptr<ArenaPool> arenas = std::make_shared<ArenaPool>();

  /// The same-host channel each of the session's workers answers, if any; under slotMutex.
  std::shared_ptr<const DirectChannel> direct;
  /// The worker that was handed a channel, and that channel (`handed`, under workerMutex;
  /// weak: a channel that ended is not kept for the worker's life).
  std::atomic<const WorkerProcess *> directServedBy{nullptr};
  std::weak_ptr<const DirectChannel> handed;
  EndedServer lastEnded; ///< Under workerMutex.
};

void WorkerHost::workerEnded(const std::shared_ptr<WorkerProcess> &ended) {
  if (ended && directServedBy.load() == ended.get()) {
    if (std::shared_ptr<const DirectChannel> served = handed.lock())
      lastEnded = EndedServer{ended, std::move(served)};
    directServedBy.store(nullptr);
    handed.reset();
  }
  forgetWorkerState();
}

llvm::Expected<std::shared_ptr<WorkerProcess>> WorkerHost::startWorker() {
  // A closed session's work (an async launch still queued) must not start a worker.
  if (isClosed())
    return closedError();
  llvm::Expected<std::unique_ptr<WorkerProcess>> fresh = pool.take();
  if (!fresh)
    return fresh.takeError();
  std::shared_ptr<WorkerProcess> started = std::move(*fresh);
  std::lock_guard<std::mutex> lock(slotMutex);
  if (closed) {
    // A close that ran while the worker was being started ended no worker: end this one.
    started->kill(EndReason::Closed);
    return closedError();
  }
  if (services.stopping()) {
    // So did a stop: nothing may run on a worker it did not end.
    started->kill(EndReason::Shutdown);
    return makeCodedError(ErrorCode::WorkerUnavailable, "the executor is shutting down");
  }
  worker = started;
  return started;
}

llvm::Expected<std::shared_ptr<WorkerProcess>> WorkerHost::liveWorker(Clock::time_point deadline) {
  std::shared_ptr<WorkerProcess> current = currentWorker();
  if (current && current->quiet())
    return current;
  if (current) {
    // It died between requests or wrote to its channel out of turn: replaced, and not the
    // coming request's fault.
    noteDeath(*current, current->end(), "no request (between requests)");
    workerEnded(current);
    std::lock_guard<std::mutex> lock(slotMutex);
    worker.reset();
  }
  llvm::Expected<std::shared_ptr<WorkerProcess>> started = startWorker();
  if (!started)
    return started.takeError();
  forgetWorkerState();
  for (const std::string &sha : attached)
    if (llvm::Error error = linkInto(**started, sha, deadline))
      return std::move(error);
  if (llvm::Error error = handDirect(**started, deadline)) {
    // Not the request's fault: the channel goes (its client carries on over HTTP), the
    // request goes on unless the worker died of it.
    dropDirect(llvm::toString(std::move(error)));
    if (!(*started)->alive())
      return makeCodedError(ErrorCode::WorkerUnavailable,
                            "the session's worker died while it was set up: " +
                                (*started)->death().cause);
  }
  return started;
}

void WorkerHost::dropDirect(const std::string &why) {
  std::shared_ptr<const DirectChannel> channel;
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    channel = std::move(direct);
  }
  // A worker ended by the executor's stop as it was handed the channel is no news.
  if (channel)
    transport::logEvent(
        services.stopping() ? transport::LogLevel::Info : transport::LogLevel::Warn,
        "the same-host channel of session '" + id +
            "' could not be handed to its worker; its launches go over HTTP: " + why,
        {{"session", llvm::StringRef(id)}});
}

llvm::Error WorkerHost::handDirect(WorkerProcess &to, Clock::time_point deadline) {
  std::shared_ptr<const DirectChannel> channel;
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    channel = direct;
  }
  if (!channel || (directServedBy.load() == &to && handed.lock() == channel))
    return llvm::Error::success();
  // A launch the last worker left unanswered must not run again in this one.
  if (lastEnded.worker) {
    answerForWorker(lastEnded);
    lastEnded = {};
  }
  MessageWriter share(MessageKind::Channel);
  share.u64(services.options.maxBytes);
  if (llvm::Error error =
          ask(to, share,
              {channel->control.fd(), channel->regions->inputs().fd(),
               channel->regions->results().fd(), channel->counts.fd(), channel->workerSocket.get()},
              deadline, "handing it the same-host channel")
              .takeError()) {
    // The worker takes the channel's launches as soon as it maps it, one rung already
    // included: a launch it started and did not finish ran, and is answered for here (the
    // channel goes next, and its client would otherwise send the launch again). One it never
    // started is left to the client, which sends it again.
    const shm::WorkerCounts &counts = channel->workerCounts();
    if (!to.alive() && counts.started.load() != counts.finished.load())
      answerForWorker(to, *channel);
    return error;
  }
  directServedBy = &to;
  handed = channel;
  return llvm::Error::success();
}

/// What a worker reports of an object it loaded: its entries and their signature tables.
llvm::Expected<ObjectInfo> readObjectInfo(llvm::StringRef sha, const Message &reply) {
  MessageReader in(reply.bytes);
  ObjectInfo info;
  info.sha256 = sha.str();
  info.entries.resize(in.count(8));
  for (std::string &entry : info.entries) {
    entry = in.str().str();
    uint64_t words = in.count(8);
    if (!words)
      continue;
    std::vector<int64_t> &table = info.signatures[entry];
    table.resize(words);
    for (int64_t &word : table)
      word = in.i64();
  }
  if (!in.ok())
    return makeCodedError(ErrorCode::InvalidObject,
                          "loading object " + sha + ": the worker's description is malformed");
  return info;
}

llvm::Error WorkerHost::linkInto(WorkerProcess &into, llvm::StringRef sha,
                                 Clock::time_point deadline) {
  std::optional<ObjectBlob> blob = services.findObject(sha);
  if (!blob)
    return makeCodedError(ErrorCode::UnknownObject, "object " + sha + " is not on this executor");
  MessageWriter add(MessageKind::AddObject);
  add.str(sha);
  SharedBuffer shared;
  std::vector<int> fds;
  if (llvm::Error error = writeBody(add, *blob->bytes, shared, "courier-object"))
    return makeCodedError(ErrorCode::Internal,
                          "sharing object " + sha +
                              " with the session's worker: " + llvm::toString(std::move(error)));
  if (shared.fd() >= 0)
    fds.push_back(shared.fd());
  llvm::Expected<Message> reply = ask(into, add, fds, deadline, ("loading object " + sha).str());
  if (!reply)
    return reply.takeError();
  llvm::Expected<ObjectInfo> info = readObjectInfo(sha, *reply);
  if (!info)
    return info.takeError();
  {
    std::lock_guard<std::mutex> lock(infoMutex);
    infos[sha.str()] = std::move(*info);
  }
  linked.insert(sha.str());
  return llvm::Error::success();
}

void WorkerHost::answerForWorker(const EndedServer &ended) {
  if (ended.channel && ended.worker)
    answerForWorker(*ended.worker, *ended.channel);
}

void WorkerHost::answerForWorker(WorkerProcess &dead, const DirectChannel &channel) {
  shm::ControlPage &page = channel.page();
  uint32_t request = page.request.load(std::memory_order_acquire);
  if (page.reply.load(std::memory_order_acquire) == request)
    return;
  // The client wrote the request: read with the worker's checks.
  std::string what = "a same-host launch";
  llvm::Expected<shm::LaunchRequest> launch =
      shm::readRequest(page, channel.regions->inputs().size());
  if (launch)
    what = "'" + launch->launch.entry + "'";
  else
    llvm::consumeError(launch.takeError());
  // The dead worker finishes nothing more; the launch counts as ended (no longer running).
  shm::WorkerCounts &counts = channel.workerCounts();
  counts.finished.store(counts.started.load());
  std::string failure =
      services.stopping()
          ? shm::encodeFailure(ErrorCode::WorkerUnavailable,
                               "the executor is shutting down; " + what + " was ended")
          : shm::encodeFailure(dead.endedDuring(what), ErrorCode::KernelCrashed);
  // Counted before the client hears: a scrape it makes at once sees this failure.
  services.metrics.launchFailures++;
  channel.answeredForWorkers++;
  shm::answer(page, request, failure, shm::kPageVersion);
}

llvm::Expected<Message> WorkerHost::ask(WorkerProcess &to, MessageWriter &message,
                                        llvm::ArrayRef<int> fds, Clock::time_point deadline,
                                        llvm::StringRef what) {
  llvm::Expected<Message> reply = to.request(message, fds, deadline, what);
  if (reply || to.alive())
    return reply;
  noteDeath(to, to.death(), what);
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    if (worker.get() == &to) {
      workerEnded(worker);
      worker.reset();
    }
  }
  forgetWorkerState();
  return reply;
}

void WorkerHost::noteDeath(WorkerProcess &dead, const WorkerDeath &death, llvm::StringRef what) {
  // The executor ended it on purpose (close, shutdown): not a restart. Once the executor
  // stops, a worker may die before it is told why (with the thread that started it, which
  // the stop ends: the worker's parent-death signal).
  if (death.reason == EndReason::Closed || death.reason == EndReason::Shutdown ||
      services.stopping())
    return;
  std::string cause = death.reason == EndReason::Deadline ? "deadline"
                      : death.signal.empty()              ? "exit"
                                                          : "crash";
  CoreMetrics &metrics = services.metrics;
  {
    std::lock_guard<std::mutex> lock(metrics.labelledMutex);
    metrics.restartsByCause[cause]++;
    if (!death.signal.empty())
      metrics.crashesBySignal[death.signal]++;
  }
  metrics.workersRestarted++;
  if (death.reason == EndReason::Deadline)
    metrics.deadlineKills++;
  transport::logEvent(transport::LogLevel::Warn,
                      llvm::formatv("worker {0} of session '{1}' died: {2} in {3}", dead.pid(), id,
                                    death.cause, what)
                          .str(),
                      {{"session", llvm::StringRef(id)},
                       {"pid", int64_t(dead.pid())},
                       {"cause", llvm::StringRef(cause)}});
}

void WorkerHost::referArenas(LaunchRequest &launch, std::vector<int> &fds,
                             const std::shared_ptr<Arena> &input,
                             const std::shared_ptr<Arena> &result) {
  for (auto it = mapped.begin(); it != mapped.end();)
    it = it->second.expired() ? mapped.erase(it) : std::next(it);
  auto used = [&](uint64_t arena) {
    return (input && input->id == arena) || (result && result->id == arena);
  };
  size_t adding = (input && !mapped.count(input->id)) + (result && !mapped.count(result->id));
  for (auto it = mapped.begin(); mapped.size() + adding > kMappedArenas && it != mapped.end();)
    it = used(it->first) ? std::next(it) : mapped.erase(it);
  auto refer = [&](const std::shared_ptr<Arena> &arena) {
    bool sending = mapped.emplace(arena->id, arena).second;
    if (sending)
      fds.push_back(arena->buffer.fd());
    return ArenaRef{arena->id, sending};
  };
  if (input) {
    launch.inputsIn = Payload::Arena;
    launch.inputArena = refer(input);
  }
  if (result)
    launch.resultArena = refer(result);
  launch.keep.clear();
  for (const auto &entry : mapped)
    launch.keep.push_back(entry.first);
}

llvm::Expected<Message> WorkerHost::askLaunch(llvm::StringRef sha, LaunchRequest &launch,
                                              const std::shared_ptr<Arena> &input,
                                              const std::shared_ptr<Arena> &result,
                                              Clock::time_point deadline, llvm::StringRef what) {
  std::lock_guard<std::mutex> working(workerMutex);
  llvm::Expected<std::shared_ptr<WorkerProcess>> live = liveWorker(deadline);
  if (!live)
    return live.takeError();
  if (!linked.count(sha))
    if (llvm::Error error = linkInto(**live, sha, deadline))
      return std::move(error);
  std::vector<int> fds;
  referArenas(launch, fds, input, result);
  MessageWriter message(MessageKind::Launch);
  launch.write(message);
  llvm::Expected<Message> answered = ask(**live, message, fds, deadline, what);
  if (!answered)
    mapped.clear(); // The worker may have stopped before mapping what was sent.
  return answered;
}

llvm::Error WorkerHost::attach(const ObjectBlob &blob) {
  // The worker relinks what the session holds; workerMutex keeps other requests out. The
  // deadline counts from here: the wait for a launch holding the worker is not the attach's.
  std::lock_guard<std::mutex> working(workerMutex);
  Clock::time_point deadline = Clock::now() + services.options.launchTimeout;
  llvm::Expected<std::shared_ptr<WorkerProcess>> live = liveWorker(deadline);
  if (!live)
    return live.takeError();
  if (!linked.count(blob.sha256))
    if (llvm::Error error = linkInto(**live, blob.sha256, deadline))
      return error;
  attached.insert(blob.sha256);
  return llvm::Error::success();
}

void WorkerHost::detach(llvm::StringRef sha) {
  std::lock_guard<std::mutex> working(workerMutex);
  if (auto it = attached.find(sha); it != attached.end())
    attached.erase(it);
  auto it = linked.find(sha);
  if (it == linked.end())
    return;
  linked.erase(it);
  std::shared_ptr<WorkerProcess> current = currentWorker();
  if (!current || !current->alive())
    return;
  MessageWriter remove(MessageKind::RemoveObject);
  remove.str(sha);
  llvm::consumeError(ask(*current, remove, {}, Clock::now() + services.options.launchTimeout,
                         ("unloading object " + sha).str())
                         .takeError());
}

llvm::Error WorkerHost::checkAsyncEntry(llvm::StringRef sha, llvm::StringRef entry) {
  std::lock_guard<std::mutex> lock(infoMutex);
  auto info = infos.find(sha);
  return checkAsyncLaunch(info == infos.end() ? nullptr : &info->second, sha, entry);
}

llvm::Expected<InputArea> WorkerHost::inputArea(llvm::ArrayRef<wire::TensorHeader> headers) {
  InputArea area;
  InputArea::Impl &bytes = *area.impl;
  // Each input starts aligned, as a kernel may assume of its buffers.
  for (const wire::TensorHeader &t : headers) {
    bytes.offsets.push_back(bytes.total);
    bytes.total = alignInput(bytes.total + t.bytes);
  }
  if (bytes.total <= kInlineBytes) {
    bytes.inlineBytes.assign(bytes.total, '\0');
    return std::move(area);
  }
  llvm::Expected<std::shared_ptr<Arena>> arena = arenas->take(arenas->idleInputs, bytes.total);
  if (!arena)
    return makeCodedError(ErrorCode::PayloadTooLarge,
                          "cannot allocate " + llvm::Twine(bytes.total) +
                              " bytes for launch inputs: " + llvm::toString(arena.takeError()));
  bytes.pool = arenas;
  bytes.arena = std::move(*arena);
  return std::move(area);
}

std::shared_ptr<Arena> WorkerHost::resultArenaFor(const LaunchCall &call, uint64_t inputBytes) {
  if (call.resultsInto)
    return call.resultsInto->impl->results;
  uint64_t expected = std::max(inputBytes, arenas->lastResultBytes.load());
  if (expected <= kInlineBytes)
    return nullptr;
  llvm::Expected<std::shared_ptr<Arena>> lent = arenas->take(arenas->idleResults, expected);
  if (lent)
    return std::move(*lent);
  llvm::consumeError(lent.takeError()); // The worker then makes its own buffer.
  return nullptr;
}

llvm::Expected<LaunchResults> WorkerHost::launch(const LaunchCall &call, RunningLaunch &running) {
  if (!call.area)
    return makeCodedError(ErrorCode::Internal, "a worker's launch needs its inputs in an area");
  InputArea::Impl &bytes = *call.area->impl;
  LaunchRequest launch;
  launch.object = call.object;
  launch.entry = call.entry;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const TensorView &t = call.inputs[i];
    llvm::Expected<uint64_t> size = wire::packedBytes(t.elemSize, t.sizes);
    if (!size)
      return size.takeError();
    launch.inputs.push_back(PlacedTensor{t.elemSize, t.sizes, bytes.offsets[i], *size});
  }
  launch.results.assign(call.results.begin(), call.results.end());
  launch.total = bytes.total;
  launch.inlineBytes = bytes.inlineBytes; // Unless referArenas puts the inputs in an arena.
  std::shared_ptr<Arena> resultArena = resultArenaFor(call, bytes.total);
  llvm::Expected<Message> reply = askLaunch(call.object, launch, bytes.arena, resultArena,
                                            call.deadline, "'" + call.entry.str() + "'");
  running.finish();
  if (!reply)
    return reply.takeError();
  *call.area = InputArea(); // Inputs are no longer needed while the reply streams.
  llvm::Expected<std::shared_ptr<WorkerResults>> decoded = decodeWorkerResults(
      *reply, call.results, call.entry, services.options.maxBytes, arenas, resultArena);
  if (resultArena)
    arenas->give(arenas->idleResults, std::move(resultArena)); // Not used this time.
  if (!decoded)
    return decoded.takeError();
  uint64_t resultBytes = 0;
  for (const TensorView &view : (*decoded)->views)
    resultBytes += abi::elementCount(view.sizes) * static_cast<uint64_t>(view.elemSize);
  arenas->lastResultBytes = resultBytes;
  LaunchResults out;
  out.views = (*decoded)->views;
  out.keepAlive = std::move(*decoded);
  return std::move(out);
}

void WorkerHost::launchAsync(std::string object, std::string entry, Clock::time_point deadline,
                             std::function<void(llvm::Error)> finish) {
  // The task holds the host only while it runs: a close ends the worker, which ends the task
  // at once, and an unawaited session is never kept alive by its launches.
  std::weak_ptr<WorkerHost> weak = weak_from_this();
  CoreMetrics *metrics = &services.metrics;
  services.asyncPool.async([weak, object, entry, metrics, deadline, finish = std::move(finish)] {
    std::shared_ptr<WorkerHost> host = weak.lock();
    if (!host) {
      finish(makeCodedError(ErrorCode::UnknownSession,
                            "the session was closed before '" + entry + "' started"));
      return;
    }
    // No inputs, no results, and an empty inline body.
    LaunchRequest launch;
    launch.object = object;
    launch.entry = entry;
    llvm::Expected<Message> reply = [&] {
      RunningLaunch running(*metrics, true);
      return host->askLaunch(object, launch, nullptr, nullptr, deadline, "'" + entry + "'");
    }();
    finish(reply ? llvm::Error::success() : reply.takeError());
  });
}

llvm::Expected<std::string> WorkerHost::call(llvm::StringRef symbol, llvm::StringRef input,
                                             uint64_t outputSize, Clock::time_point deadline) {
  MessageWriter request(MessageKind::Call);
  request.str(symbol).u64(outputSize);
  SharedBuffer shared;
  std::vector<int> fds;
  if (llvm::Error error = writeBody(request, input, shared, "courier-call"))
    return makeCodedError(ErrorCode::PayloadTooLarge,
                          "cannot share the call's input: " + llvm::toString(std::move(error)));
  if (shared.fd() >= 0)
    fds.push_back(shared.fd());
  llvm::Expected<Message> reply = [&]() -> llvm::Expected<Message> {
    std::lock_guard<std::mutex> working(workerMutex);
    llvm::Expected<std::shared_ptr<WorkerProcess>> live = liveWorker(deadline);
    if (!live)
      return live.takeError();
    return ask(**live, request, fds, deadline, "'" + symbol.str() + "'");
  }();
  if (!reply)
    return reply.takeError();
  MessageReader in(reply->bytes);
  SharedBuffer mapped;
  // A reply of another size is refused before anything of it is mapped.
  llvm::Expected<llvm::StringRef> body = readBody(in, *reply, mapped, outputSize);
  if (!body)
    return makeCodedError(ErrorCode::CallFailed, "reading the reply of '" + symbol +
                                                     "': " + llvm::toString(body.takeError()));
  return body->str();
}

void WorkerHost::close() {
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    closed = true;
  }
  // A request still running on the worker fails at once instead of holding it.
  endKernels(EndReason::Closed);
}

bool WorkerHost::endKernels(EndReason reason) {
  std::shared_ptr<WorkerProcess> current = currentWorker();
  if (current)
    current->kill(reason);
  return true;
}

int64_t WorkerHost::workerPid() {
  std::lock_guard<std::mutex> lock(slotMutex);
  return worker ? worker->pid() : 0;
}

bool WorkerHost::held() {
  std::unique_lock<std::mutex> working(workerMutex, std::try_to_lock);
  return !working.owns_lock();
}

llvm::Expected<bool> WorkerHost::serveDirect(std::shared_ptr<const DirectChannel> channel,
                                             Clock::time_point deadline, bool replace, bool wait) {
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    // A channel that was replaced or dropped is not put back by its watcher.
    if (direct != channel && !replace)
      return false;
    if (direct == channel && worker && worker.get() == directServedBy.load() && worker->alive())
      return true; // Answered already: no wait for the worker's requests.
  }
  std::unique_lock<std::mutex> working(workerMutex, std::defer_lock);
  if (wait)
    working.lock();
  else if (!working.try_lock())
    return false; // Busy with a request: the caller does without rather than wait out a kernel.
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    if (direct != channel) {
      if (!replace)
        return false;
      direct = channel;
    }
  }
  llvm::Expected<std::shared_ptr<WorkerProcess>> live = liveWorker(deadline);
  if (!live)
    return live.takeError();
  if (llvm::Error error = handDirect(**live, deadline))
    return std::move(error);
  std::lock_guard<std::mutex> lock(slotMutex);
  return direct == channel;
}

void WorkerHost::stopDirect(const DirectChannel *channel) {
  std::lock_guard<std::mutex> lock(slotMutex);
  if (direct.get() == channel)
    direct.reset();
}

bool WorkerHost::watchDirect(const DirectChannel *channel, Clock::time_point until,
                             int64_t &workerPid) {
  std::shared_ptr<WorkerProcess> watched;
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    watched = worker;
    // Only a worker that answers this channel runs its launches: 0 for any other.
    workerPid = watched && direct.get() == channel && directServedBy.load() == watched.get()
                    ? watched->pid()
                    : 0;
  }
  if (!watched) {
    std::this_thread::sleep_until(until);
    return false;
  }
  if (watched->alive()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    struct pollfd ended {
      watched->socket(), 0, 0
    };
    // Only its end wakes this: what the worker writes is read by the request waiting for it.
    if (::poll(&ended, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX))) <= 0 &&
        watched->alive())
      return false;
  }
  // It ended. A request on it learns so at once; the death is settled here unless that
  // request did it.
  std::lock_guard<std::mutex> working(workerMutex);
  bool ours = false;
  {
    std::lock_guard<std::mutex> lock(slotMutex);
    if (worker == watched) {
      worker.reset();
      ours = true;
    }
  }
  if (ours) {
    noteDeath(*watched, watched->end(), "a same-host launch");
    workerEnded(watched);
  }
  // Once for each worker: a launch rung after this answer is the next worker's.
  if (lastEnded.worker == watched) {
    answerForWorker(lastEnded);
    lastEnded = {};
  }
  return true;
}

void WorkerHost::endDirectLaunch(int64_t workerPid) {
  std::shared_ptr<WorkerProcess> current = currentWorker();
  // The worker the watcher saw running the launch, not one started since.
  if (current && current->pid() == workerPid)
    current->kill(EndReason::Deadline);
}

class WorkerHosts final : public HostFactory {
public:
  WorkerHosts(const HostServices &services, std::unique_ptr<WorkerPool> pool)
      : services(services), pool(std::move(pool)) {}

  llvm::Expected<std::shared_ptr<KernelHost>> open(const std::string &id) override {
    // A warm worker is taken now, so the first launch does not wait for a process.
    llvm::Expected<std::unique_ptr<WorkerProcess>> worker = pool->take();
    if (!worker)
      return worker.takeError();
    return std::make_shared<WorkerHost>(services, *pool, id, std::move(*worker));
  }

  bool contained() const override { return true; }

  void report(HealthReport &report) override {
    report.isolated = true;
    report.workersLive = WorkerPool::live();
    report.workersWarm = pool->warmCount();
    report.workersRestarted = services.metrics.workersRestarted.load();
    if (!pool->healthy()) {
      report.healthy = false;
      report.reason = "cannot start worker processes: " + pool->lastError();
    }
  }

  void addMetrics(std::vector<prometheus::MetricFamily> &families) override;
  void stopTaking() override { pool->stopTaking(); }
  void shutdown() override { pool->shutdown(); }

private:
  const HostServices &services;
  std::unique_ptr<WorkerPool> pool;
};

void WorkerHosts::addMetrics(std::vector<prometheus::MetricFamily> &families) {
  using prometheus::MetricType;
  using transport::singleSample;
  CoreMetrics &metrics = services.metrics;
  families.push_back(singleSample("courier_workers", "Worker processes running, warm or serving.",
                                  MetricType::Gauge, static_cast<double>(WorkerPool::live())));
  families.push_back(singleSample("courier_workers_warm", "Worker processes started ahead of need.",
                                  MetricType::Gauge, static_cast<double>(pool->warmCount())));
  families.push_back(singleSample(
      "courier_deadline_kills_total", "Workers ended because a launch ran past its deadline.",
      MetricType::Counter, static_cast<double>(metrics.deadlineKills.load())));
  std::lock_guard<std::mutex> lock(metrics.labelledMutex);
  prometheus::MetricFamily restarts = transport::metricFamily(
      "courier_worker_restarts_total", "Session workers that died and were replaced, by cause.",
      MetricType::Counter);
  for (const auto &[cause, n] : metrics.restartsByCause)
    transport::addSample(restarts, static_cast<double>(n), "cause", cause);
  families.push_back(std::move(restarts));
  prometheus::MetricFamily crashes = transport::metricFamily(
      "courier_kernel_crashes_total",
      "Workers killed by a signal while running shipped code, by signal.", MetricType::Counter);
  for (const auto &[signal, n] : metrics.crashesBySignal)
    transport::addSample(crashes, static_cast<double>(n), "signal", signal);
  families.push_back(std::move(crashes));
}

/// The settings of the sessions' workers: courier-worker beside this process's executable
/// unless the options name another program.
llvm::Expected<WorkerSettings> workerSettings(const CoreOptions &options) {
  WorkerSettings settings;
  settings.program = options.workerProgram;
  if (settings.program.empty()) {
    char self[PATH_MAX];
    ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (length <= 0)
      return llvm::createStringError("cannot find this program's path to start workers");
    std::string path(self, static_cast<size_t>(length));
    settings.program = path.substr(0, path.rfind('/') + 1) + "courier-worker";
  }
  if (::access(settings.program.c_str(), X_OK) != 0)
    return llvm::createStringError("the worker program " + settings.program +
                                   " is missing; it is built and installed beside "
                                   "courier-executor (or run with --isolation=none)");
  settings.plugins = options.plugins;
  settings.doorbell = true;
  settings.memoryMiB = options.workerMemoryMiB;
  settings.cpuSeconds = options.workerCpuSeconds;
  settings.kernelThreads = options.kernelThreads;
  settings.sandbox = options.sandbox;
  settings.allowUnsignedObjects = options.allowUnsignedObjects;
  return settings;
}

} // namespace

llvm::Expected<std::unique_ptr<HostFactory>> makeWorkerHosts(const HostServices &services) {
  llvm::Expected<WorkerSettings> settings = workerSettings(services.options);
  if (!settings)
    return settings.takeError();
  auto pool = std::make_unique<WorkerPool>(std::move(*settings), services.options.warmWorkers);
  // Refuse to serve rather than serve uncontained: a worker must start, sandbox and all.
  if (llvm::Error error = pool->probe())
    return llvm::createStringError(
        "worker processes cannot start: " + llvm::toString(std::move(error)) +
        (services.options.sandbox ? " (if seccomp is unavailable here, --no-sandbox runs "
                                    "workers without it)"
                                  : ""));
  return std::make_unique<WorkerHosts>(services, std::move(pool));
}

} // namespace courier::executor
