// The executor core: sessions, the object store, launches and calls, run in each session's
// worker process (or, without isolation, in this one). See executor/ExecutorCore.h.
#include "executor/ExecutorCore.h"

#include "executor/KernelThreads.h"

#include "executor/ElfValidation.h"
#include "executor/HostCpu.h"
#include "executor/HostErrors.h"
#include "executor/ObjectHost.h"
#include "executor/WorkerPool.h"
#include "transport/Log.h"
#include "transport/Metrics.h"

#include "Version.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <poll.h>
#include <set>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <unordered_map>

namespace courier::executor {

namespace shm = transport::shm;
using transport::ErrorCode;
using transport::makeCodedError;
namespace wire = transport::wire;

namespace {

struct Metrics {
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
  RunningLaunch(Metrics &metrics, bool timed)
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
  Metrics &metrics;
  bool timed;
  bool finished = false;
  Clock::time_point started;
};

/// An async launch's outcome: no code when it succeeded.
struct AsyncOutcome {
  std::optional<ErrorCode> code;
  std::string message;
};

struct MallocDeleter {
  void operator()(char *p) const { std::free(p); }
};
using MallocBuffer = std::unique_ptr<char, MallocDeleter>;

} // namespace

/// A shared-memory buffer a session reuses launch after launch, so large tensors cross to
/// its worker without fresh pages being faulted in on both sides each time. The worker
/// keeps its own mapping of each arena by id.
struct Arena {
  uint64_t id = 0;
  SharedBuffer buffer;
  /// False for a same-host client's regions (SharedRegions), which no pool takes back.
  bool pooled = true;

  /// A new arena of `bytes`, its size sealed: the worker (and a same-host client) gets the
  /// descriptor, and none of them may shrink what another maps.
  static llvm::Expected<std::shared_ptr<Arena>> create(uint64_t bytes, const char *name) {
    llvm::Expected<SharedBuffer> buffer = SharedBuffer::create(bytes, name);
    if (!buffer)
      return buffer.takeError();
    if (llvm::Error error = buffer->sealSize())
      return std::move(error);
    auto arena = std::make_shared<Arena>();
    arena->buffer = std::move(*buffer);
    return arena;
  }
};

/// A session's idle arenas, for inputs and for results. Bounded: arenas larger than
/// kMaxArenaBytes are used once, and at most kIdleArenas of each kind wait for reuse.
class ArenaPool {
public:
  static constexpr uint64_t kMinArenaBytes = uint64_t(1) << 20;
  static constexpr uint64_t kMaxArenaBytes = uint64_t(256) << 20;
  static constexpr size_t kIdleArenas = 2;

  /// An idle arena of at least `size` bytes, or a new one.
  llvm::Expected<std::shared_ptr<Arena>> take(std::vector<std::shared_ptr<Arena>> &idle,
                                              uint64_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = idle.begin(); it != idle.end(); ++it)
        if ((*it)->buffer.size() >= size) {
          std::shared_ptr<Arena> arena = std::move(*it);
          idle.erase(it);
          return arena;
        }
    }
    uint64_t capacity = std::max(kMinArenaBytes, llvm::PowerOf2Ceil(size));
    llvm::Expected<std::shared_ptr<Arena>> arena = Arena::create(capacity, "courier-arena");
    if (!arena)
      return arena.takeError();
    std::lock_guard<std::mutex> lock(mutex);
    (*arena)->id = ++lastId;
    return arena;
  }

  /// Gives `arena` back for reuse, or drops it.
  void give(std::vector<std::shared_ptr<Arena>> &idle, std::shared_ptr<Arena> arena) {
    if (!arena->pooled)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    if (arena->buffer.size() <= kMaxArenaBytes && idle.size() < kIdleArenas) {
      idle.push_back(std::move(arena));
      return;
    }
    if (idle.size() >= kIdleArenas && arena->buffer.size() <= kMaxArenaBytes) {
      // Keep the larger ones: they serve every smaller request too.
      auto smallest = std::min_element(idle.begin(), idle.end(), [](const auto &a, const auto &b) {
        return a->buffer.size() < b->buffer.size();
      });
      if ((*smallest)->buffer.size() < arena->buffer.size())
        std::swap(*smallest, arena);
    }
    // The arena that is left goes here; the session's worker unmaps it with the next launch
    // (Session::mapped).
  }

  std::vector<std::shared_ptr<Arena>> idleInputs, idleResults;
  /// Bytes of the session's last results: the size of the next result arena to lend.
  std::atomic<uint64_t> lastResultBytes{0};

private:
  std::mutex mutex;
  uint64_t lastId = 0;
};

/// A session: its own worker (or ObjectHost), so objects shipped by one client never resolve
/// another's symbols, and the async launches it started.
class Session {
public:
  std::string id;
  /// Without isolation: shared with the async launches running on it, so closing the
  /// session never waits for a kernel: the host goes when the last of them returns.
  std::shared_ptr<ObjectHost> host;
  /// With isolation: the session's worker process. `workerMutex` serializes what the
  /// session asks of it (one request at a time) and is taken before `attachMutex`;
  /// `slotMutex` guards the pointer itself, so a close can end the worker mid-request.
  std::mutex workerMutex;
  std::mutex slotMutex;
  std::shared_ptr<WorkerProcess> worker;
  std::set<std::string> linked; ///< Objects loaded in `worker`; under workerMutex.
  /// Arenas `worker` has mapped, by id; under workerMutex. A launch sends an arena's
  /// descriptor only when it is not here, and names every id the worker is to keep mapped:
  /// one that expired here (this process let the arena go) is unmapped there.
  std::map<uint64_t, std::weak_ptr<Arena>> mapped;
  /// The same-host channel each of the session's workers answers, if any; under slotMutex.
  std::shared_ptr<const DirectChannel> direct;
  /// The worker that was handed a channel, and that channel (`handed`, under workerMutex;
  /// weak: a channel that ended is not kept for the worker's life).
  std::atomic<const WorkerProcess *> directServedBy{nullptr};
  std::weak_ptr<const DirectChannel> handed;
  /// A worker that ended while it served a channel, and that channel, until the launch it
  /// left unanswered there (if any) has been answered for; under workerMutex.
  struct EndedServer {
    std::shared_ptr<WorkerProcess> worker;
    std::shared_ptr<const DirectChannel> channel;
  } lastEnded;
  /// Forgets what `worker` holds: it is a new one, or a request to it failed part-way.
  void forgetWorkerState() {
    linked.clear();
    mapped.clear();
  }
  /// `ended` is no longer the session's worker: what it held goes, and if it served a
  /// channel it is kept to answer for. workerMutex held.
  void workerEnded(const std::shared_ptr<WorkerProcess> &ended) {
    if (ended && directServedBy.load() == ended.get()) {
      if (std::shared_ptr<const DirectChannel> served = handed.lock())
        lastEnded = EndedServer{ended, std::move(served)};
      directServedBy.store(nullptr);
      handed.reset();
    }
    forgetWorkerState();
  }
  /// What the worker reported of each object it loaded; under attachMutex.
  std::map<std::string, ObjectInfo, std::less<>> infos;
  /// Ends the session's worker, e.g. while a request on it is running.
  void endWorker(EndReason reason) {
    std::shared_ptr<WorkerProcess> current;
    {
      std::lock_guard<std::mutex> lock(slotMutex);
      current = worker;
    }
    if (current)
      current->kill(reason);
  }
  std::atomic<int64_t> lastUsed{0}; ///< Clock ticks; read by the idle reaper.
  /// Serializes attaching and detaching, so `attached` matches what is loaded and each
  /// attached object holds exactly one reference in the store.
  std::mutex attachMutex;
  std::set<std::string> attached;
  /// Set when the session leaves the table; its holds are released then, so an attach
  /// racing with the close must not take a new one.
  bool closed = false;
  std::mutex launchesMutex;
  uint64_t nextLaunch = 1;
  std::map<uint64_t, std::shared_future<AsyncOutcome>> launches;

  void touch() { lastUsed.store(Clock::now().time_since_epoch().count()); }
  /// Requests running on the session now; the idle reaper leaves a busy session alone.
  std::atomic<int> busy{0};
  std::shared_ptr<ArenaPool> arenas = std::make_shared<ArenaPool>();
};

namespace {
/// Marks a session in use for a request's length, and used again when it ends.
/// Only isolated sessions expire while a request could be running (the in-process backend's
/// never do), so only they pay for the bookkeeping.
class BusyGuard {
public:
  BusyGuard(Session &s, bool active) : s(active ? &s : nullptr) {
    if (this->s)
      this->s->busy++;
  }
  ~BusyGuard() {
    if (!s)
      return;
    s->touch();
    s->busy--;
  }

private:
  Session *s;
};

constexpr uint64_t kInputAlignment = 64;
uint64_t alignInput(uint64_t n) { return (n + kInputAlignment - 1) & ~(kInputAlignment - 1); }

/// Where a launch's input bytes are received: without isolation one buffer per tensor; with
/// isolation one area the worker reads in place (shared memory when large).
struct AreaBytes {
  std::vector<MallocBuffer> buffers;
  std::string inlineBytes;
  /// Large inputs: an arena of the session's, given back when the area goes.
  std::shared_ptr<ArenaPool> pool;
  std::shared_ptr<Arena> arena;
  std::vector<uint64_t> offsets; ///< Per input, into inlineBytes or the arena.
  uint64_t total = 0;
  char *base() { return arena ? arena->buffer.data() : inlineBytes.data(); }
  ~AreaBytes() {
    if (arena && pool)
      pool->give(pool->idleInputs, std::move(arena));
  }
};

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

/// Reads the worker's reply to a launch, which is untrusted: every shape, offset and size
/// is checked against what the caller asked for and what the payload holds.
llvm::Expected<std::shared_ptr<WorkerResults>>
decodeWorkerResults(Message &reply, llvm::ArrayRef<ResultSpec> expected, llvm::StringRef entry,
                    uint64_t maxBytes, std::shared_ptr<ArenaPool> pool,
                    std::shared_ptr<Arena> &resultArena) {
  MessageReader in(reply.bytes);
  auto broken = [&](const llvm::Twine &what) {
    return makeCodedError(ErrorCode::LaunchFailed, "'" + entry +
                                                       "' returned results the executor cannot "
                                                       "use: " +
                                                       what);
  };
  auto results = std::make_shared<WorkerResults>();
  LaunchAnswer answer = LaunchAnswer::read(in);
  if (answer.results.size() != expected.size())
    return broken(
        llvm::formatv("{0} results, expected {1}", answer.results.size(), expected.size()));
  for (size_t i = 0; i < answer.results.size(); ++i) {
    PlacedTensor &shape = answer.results[i];
    if (static_cast<int64_t>(shape.sizes.size()) != expected[i].rank ||
        shape.elemSize != expected[i].elemSize)
      return broken(
          llvm::formatv("result {0} does not have the declared rank and element size", i));
    llvm::Expected<uint64_t> bytes = wire::packedBytes(shape.elemSize, shape.sizes);
    if (!bytes)
      return broken(llvm::toString(bytes.takeError()));
    shape.bytes = *bytes;
  }
  uint64_t total = answer.total;
  Payload resultsIn = answer.bodyIn;
  bool inlined = resultsIn == Payload::Inline;
  // In the result arena, results may lie apart, where the kernel computed them: what counts
  // against the limit is their bytes, not the span.
  uint64_t counted = total;
  if (resultsIn == Payload::Arena) {
    counted = 0;
    for (const PlacedTensor &shape : answer.results)
      counted = llvm::SaturatingAdd(counted, shape.bytes);
  }
  if (!in.ok() || counted > maxBytes)
    return broken(llvm::formatv("{0} bytes of results", counted));
  const char *base = nullptr;
  if (resultsIn == Payload::Arena) {
    // In the result arena this process lent the worker (and sealed).
    if (!resultArena || total > resultArena->buffer.size())
      return broken("results outside the result arena");
    results->pool = std::move(pool);
    results->arena = std::move(resultArena);
    base = results->arena->buffer.data();
  } else if (inlined) {
    results->inlineBytes = answer.inlineBytes.str();
    if (results->inlineBytes.size() != total)
      return broken("a malformed reply");
  } else {
    if (reply.fds.size() != 1)
      return broken("no shared buffer");
    llvm::Expected<SharedBuffer> mapped =
        SharedBuffer::map(std::move(reply.fds[0]), total, /*requireSealed=*/true);
    if (!mapped)
      return broken(llvm::toString(mapped.takeError()));
    results->shared = std::move(*mapped);
  }
  if (resultsIn != Payload::Arena)
    base = inlined ? results->inlineBytes.data() : results->shared.data();
  for (const PlacedTensor &shape : answer.results) {
    if (shape.offset > total || total - shape.offset < shape.bytes)
      return broken("a result outside the reply");
    results->views.push_back(TensorView{base + shape.offset, shape.elemSize, shape.sizes,
                                        wire::packedStrides(shape.sizes)});
  }
  return results;
}
} // namespace

struct InputArea::Impl : AreaBytes {};

struct SharedRegions::Impl {
  std::shared_ptr<Arena> inputs, results;
};

SharedRegions::SharedRegions() : impl(std::make_unique<Impl>()) {}
SharedRegions::~SharedRegions() = default;
const SharedBuffer &SharedRegions::inputs() const { return impl->inputs->buffer; }
const SharedBuffer &SharedRegions::results() const { return impl->results->buffer; }

llvm::Expected<std::shared_ptr<SharedRegions>> SharedRegions::create(uint64_t inputBytes,
                                                                     uint64_t resultBytes) {
  // Worker arena ids of their own: a session's pool counts from 1, these from 2^63.
  static std::atomic<uint64_t> lastId{0};
  std::shared_ptr<SharedRegions> regions(new SharedRegions());
  for (auto [bytes, slot, name] :
       {std::tuple{inputBytes, &regions->impl->inputs, "courier-shm-inputs"},
        std::tuple{resultBytes, &regions->impl->results, "courier-shm-results"}}) {
    llvm::Expected<std::shared_ptr<Arena>> arena = Arena::create(bytes, name);
    if (!arena)
      return arena.takeError();
    (*arena)->pooled = false;
    (*arena)->id = (uint64_t(1) << 63) | ++lastId;
    *slot = std::move(*arena);
  }
  return regions;
}

InputArea::InputArea() : impl(std::make_unique<Impl>()) {}
InputArea::InputArea(InputArea &&) noexcept = default;
InputArea &InputArea::operator=(InputArea &&) noexcept = default;
InputArea::~InputArea() = default;
char *InputArea::input(size_t i) const {
  if (!impl->buffers.empty())
    return impl->buffers[i].get();
  return impl->base() + impl->offsets[i];
}

struct ExecutorCore::Impl {
  explicit Impl(CoreOptions optionsIn) : options(std::move(optionsIn)) {}

  CoreOptions options;
  std::shared_ptr<PluginSet> plugins;
  Metrics metrics;

  std::mutex sessionsMutex;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions;

  /// The object store, shared by sessions. An object stays while a session holds it
  /// (has it attached) and for `objectGrace` after the last hold ends or its last upload.
  struct StoredObject {
    ObjectBlob blob;
    uint64_t holders = 0;
    Clock::time_point unheldSince;
  };
  std::mutex objectsMutex;
  std::unordered_map<std::string, StoredObject> objects; ///< By SHA-256.
  uint64_t objectBytes = 0;
  uint64_t heldBytes = 0;   ///< Bytes of the objects some session holds.
  uint64_t attachments = 0; ///< Sum of `holders`.
  /// `store_full` naming `sha` if an object of `bytes` cannot fit beside the objects sessions
  /// hold; objectsMutex held.
  llvm::Error refuseUnlessRoom(llvm::StringRef sha, uint64_t bytes) const;
  /// Evicts objects no session holds, oldest first, until `bytes` more fit (which
  /// refuseUnlessRoom has checked they can); objectsMutex held.
  void makeRoom(uint64_t bytes);

  /// Starts the sessions' workers (with isolation).
  std::unique_ptr<WorkerPool> pool;
  bool isolated() const { return options.isolated(); }

  std::mutex stopMutex;
  std::condition_variable stopSignal;
  bool stopping = false;
  bool isStopping() {
    std::lock_guard<std::mutex> lock(stopMutex);
    return stopping;
  }
  bool waitForStop(Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(stopMutex);
    return stopSignal.wait_for(lock, timeout, [&] { return stopping; });
  }

  std::thread reaper;
  /// Runs async launches, `asyncThreads` at a time; the rest wait their turn.
  std::unique_ptr<llvm::StdThreadPool> launchPool;

  llvm::Expected<std::shared_ptr<Session>> createSession(const std::string &id, bool &created);
  std::optional<ObjectBlob> findObject(llvm::StringRef sha);
  llvm::Error attach(Session &session, llvm::StringRef sha);
  bool detach(Session &session, llvm::StringRef sha);
  /// Ends every hold of a session that has left the table.
  void releaseHolds(Session &session);
  void dropHold(llvm::StringRef sha);
  void dropUnheldObjects();
  void reapIdleSessions();
  /// Ends the workers of sessions leaving the table.
  void endSessions(std::vector<std::shared_ptr<Session>> &ending, EndReason reason);

  /// The session's worker, started (and its objects linked again) if it has none or its
  /// last one died. Called with `workerMutex` held.
  llvm::Expected<std::shared_ptr<WorkerProcess>> liveWorker(Session &s, Clock::time_point deadline);
  /// Loads the stored object `sha` into the session's worker. `workerMutex` held.
  llvm::Error linkInto(Session &s, WorkerProcess &worker, llvm::StringRef sha,
                       Clock::time_point deadline);
  /// One request to the session's worker; a worker that dies of it is logged, counted and
  /// forgotten, so the next request starts a fresh one. `workerMutex` held.
  /// Counts and logs how a session's worker ended (unless the executor ended it on purpose).
  void noteDeath(Session &s, WorkerProcess &worker, const WorkerDeath &death, llvm::StringRef what);
  /// Answers the launch waiting on the channel `ended` served (if any: one rung that no
  /// worker answered) with the error its death gives it. `workerMutex` held.
  void answerForWorker(const Session::EndedServer &ended);
  /// Answers the launch `worker` left unanswered on `channel`, if any, as ended with it.
  void answerForWorker(WorkerProcess &worker, const DirectChannel &channel);
  /// The session's channel goes: no worker is handed it any more, and its watcher ends it.
  void dropDirect(Session &s, const std::string &why);
  /// Hands the session's same-host channel (if any) to `worker`. `workerMutex` held.
  llvm::Error handDirect(Session &s, WorkerProcess &worker, Clock::time_point deadline);
  llvm::Expected<Message> ask(Session &s, WorkerProcess &worker, MessageWriter &message,
                              llvm::ArrayRef<int> fds, Clock::time_point deadline,
                              llvm::StringRef what);
  /// A launch of `sha` on the session's worker (started, and `sha` linked, as needed), its
  /// arena references filled in (referArenas). Takes `workerMutex`.
  llvm::Expected<Message> askLaunch(Session &s, llvm::StringRef sha, LaunchRequest &launch,
                                    const std::shared_ptr<Arena> &input,
                                    const std::shared_ptr<Arena> &result,
                                    Clock::time_point deadline, llvm::StringRef what);
};

llvm::Expected<std::shared_ptr<Session>> ExecutorCore::Impl::createSession(const std::string &id,
                                                                           bool &created) {
  {
    std::lock_guard<std::mutex> lock(sessionsMutex);
    auto it = sessions.find(id);
    if (it != sessions.end()) {
      created = false;
      it->second->touch();
      return it->second;
    }
  }
  auto full = [&] {
    return makeCodedError(ErrorCode::TooManySessions,
                          llvm::formatv("this executor holds its limit of {0} sessions; close one "
                                        "or use another executor",
                                        options.maxSessions));
  };
  {
    std::lock_guard<std::mutex> lock(sessionsMutex);
    if (sessions.size() >= options.maxSessions)
      return full();
  }
  auto session = std::make_shared<Session>();
  session->id = id;
  if (isolated()) {
    // A warm worker is taken now, so the first launch does not wait for a process.
    llvm::Expected<std::unique_ptr<WorkerProcess>> worker = pool->take();
    if (!worker)
      return worker.takeError();
    session->worker = std::move(*worker);
  } else {
    llvm::Expected<std::unique_ptr<ObjectHost>> host =
        ObjectHost::create(plugins, {options.allowUnsignedObjects});
    if (!host)
      return makeCodedError(ErrorCode::Internal,
                            "creating an object host: " + llvm::toString(host.takeError()));
    session->host = std::move(*host);
  }
  session->touch();
  std::lock_guard<std::mutex> lock(sessionsMutex);
  // Another request may have created the same id meanwhile; the first one wins.
  if (!sessions.count(id) && sessions.size() >= options.maxSessions)
    return full();
  auto [it, inserted] = sessions.emplace(id, session);
  created = inserted;
  if (inserted)
    metrics.sessionsOpened++;
  return it->second;
}

std::optional<ObjectBlob> ExecutorCore::Impl::findObject(llvm::StringRef sha) {
  std::lock_guard<std::mutex> lock(objectsMutex);
  auto it = objects.find(sha.str());
  if (it == objects.end())
    return std::nullopt;
  return it->second.blob;
}

llvm::Error ExecutorCore::Impl::attach(Session &session, llvm::StringRef sha) {
  std::unique_lock<std::mutex> working(session.workerMutex, std::defer_lock);
  if (isolated()) {
    {
      // Every launch passes here: an object already attached must not wait for the
      // session's worker, which may be running a long launch.
      std::lock_guard<std::mutex> attaching(session.attachMutex);
      if (session.closed)
        return makeCodedError(ErrorCode::UnknownSession, "session '" + session.id + "' was closed");
      if (session.attached.count(sha.str()))
        return llvm::Error::success();
    }
    working.lock();
  } else if (session.host->hasObject(sha)) {
    // Every launch passes here: an object already loaded costs one shared lock.
    return llvm::Error::success();
  }
  std::unique_lock<std::mutex> attaching(session.attachMutex);
  if (session.closed)
    return makeCodedError(ErrorCode::UnknownSession, "session '" + session.id + "' was closed");
  if (session.attached.count(sha.str()))
    return llvm::Error::success();
  std::optional<ObjectBlob> blob;
  {
    // The hold is taken before loading, so the store cannot drop the bytes meanwhile.
    std::lock_guard<std::mutex> lock(objectsMutex);
    auto it = objects.find(sha.str());
    if (it == objects.end())
      return makeCodedError(ErrorCode::UnknownObject, "object " + sha + " is not on this executor");
    if (it->second.holders++ == 0)
      heldBytes += it->second.blob.bytes->size();
    attachments++;
    blob = it->second.blob;
  }
  llvm::Error loaded = llvm::Error::success();
  if (isolated()) {
    // The worker relinks what the session holds; workerMutex keeps other attaches out.
    attaching.unlock();
    Clock::time_point deadline = Clock::now() + options.launchTimeout;
    llvm::Expected<std::shared_ptr<WorkerProcess>> worker = liveWorker(session, deadline);
    if (!worker)
      loaded = worker.takeError();
    else
      loaded = linkInto(session, **worker, sha, deadline);
  } else if (llvm::Error error = session.host->addObject(*blob)) {
    // The object host's message names the object.
    loaded = makeCodedError(ErrorCode::InvalidObject, llvm::toString(std::move(error)));
  }
  if (!attaching.owns_lock())
    attaching.lock();
  if (!loaded && session.closed)
    loaded = makeCodedError(ErrorCode::UnknownSession, "session '" + session.id + "' was closed");
  if (loaded) {
    dropHold(sha);
    return loaded;
  }
  session.attached.insert(sha.str());
  return llvm::Error::success();
}

bool ExecutorCore::Impl::detach(Session &session, llvm::StringRef sha) {
  if (!isolated()) {
    std::lock_guard<std::mutex> attaching(session.attachMutex);
    if (!session.attached.erase(sha.str()))
      return false;
    // Launches of the object still running keep its code until they return (ObjectHost).
    // Unloading cannot fail in a way the client could act on.
    llvm::consumeError(session.host->removeObject(sha));
    dropHold(sha);
    return true;
  }
  // workerMutex keeps other attaches out while the worker unloads; attachMutex, which every
  // launch's attach check takes, is not held across the round trip.
  std::lock_guard<std::mutex> working(session.workerMutex);
  {
    std::lock_guard<std::mutex> attaching(session.attachMutex);
    if (!session.attached.erase(sha.str()))
      return false;
  }
  if (session.linked.erase(sha.str()) && session.worker && session.worker->alive()) {
    MessageWriter remove(MessageKind::RemoveObject);
    remove.str(sha);
    llvm::consumeError(ask(session, *session.worker, remove, {},
                           Clock::now() + options.launchTimeout, ("unloading object " + sha).str())
                           .takeError());
  }
  dropHold(sha);
  return true;
}

void ExecutorCore::Impl::releaseHolds(Session &session) {
  std::lock_guard<std::mutex> attaching(session.attachMutex);
  session.closed = true;
  for (const std::string &sha : session.attached)
    dropHold(sha);
  session.attached.clear();
}

void ExecutorCore::Impl::dropHold(llvm::StringRef sha) {
  std::lock_guard<std::mutex> lock(objectsMutex);
  auto it = objects.find(sha.str());
  if (it == objects.end() || it->second.holders == 0)
    return;
  attachments--;
  if (--it->second.holders == 0) {
    it->second.unheldSince = Clock::now();
    heldBytes -= it->second.blob.bytes->size();
  }
}

llvm::Error ExecutorCore::Impl::refuseUnlessRoom(llvm::StringRef sha, uint64_t bytes) const {
  uint64_t limit = options.maxStoreBytes;
  if (bytes <= limit && heldBytes <= limit - bytes)
    return llvm::Error::success();
  std::string object = sha.empty() ? "an object" : ("object " + sha).str();
  return makeCodedError(
      ErrorCode::StoreFull,
      llvm::formatv("{0} of {1} bytes does not fit the object store: sessions hold {2} bytes of "
                    "objects and the store holds at most {3} bytes (--max-object-store-mib {4}); "
                    "objects no session holds are evicted to make room, but these are held: "
                    "detach objects or close sessions, or raise the limit",
                    object, bytes, heldBytes, limit, limit >> 20));
}

void ExecutorCore::Impl::makeRoom(uint64_t bytes) {
  if (objectBytes <= options.maxStoreBytes && bytes <= options.maxStoreBytes - objectBytes)
    return;
  std::vector<std::unordered_map<std::string, StoredObject>::iterator> unheld;
  for (auto it = objects.begin(); it != objects.end(); ++it)
    if (it->second.holders == 0)
      unheld.push_back(it);
  llvm::sort(unheld, [](const auto &a, const auto &b) {
    return a->second.unheldSince < b->second.unheldSince;
  });
  for (auto it : unheld) {
    if (objectBytes <= options.maxStoreBytes && bytes <= options.maxStoreBytes - objectBytes)
      return;
    objectBytes -= it->second.blob.bytes->size();
    metrics.objectsEvicted++;
    objects.erase(it);
  }
}

void ExecutorCore::Impl::dropUnheldObjects() {
  Clock::time_point cutoff = Clock::now() - options.objectGrace;
  std::lock_guard<std::mutex> lock(objectsMutex);
  for (auto it = objects.begin(); it != objects.end();) {
    if (it->second.holders == 0 && it->second.unheldSince <= cutoff) {
      objectBytes -= it->second.blob.bytes->size();
      metrics.objectsDropped++;
      it = objects.erase(it);
    } else {
      ++it;
    }
  }
}

void ExecutorCore::Impl::endSessions(std::vector<std::shared_ptr<Session>> &ending,
                                     EndReason reason) {
  for (const std::shared_ptr<Session> &session : ending) {
    releaseHolds(*session);
    // A request still running on the worker fails at once instead of holding it.
    session->endWorker(reason);
  }
}

llvm::Expected<std::shared_ptr<WorkerProcess>>
ExecutorCore::Impl::liveWorker(Session &s, Clock::time_point deadline) {
  if (s.worker && s.worker->quiet())
    return s.worker;
  if (s.worker) {
    // It died between requests or wrote to its channel out of turn: replaced, and not the
    // coming request's fault.
    noteDeath(s, *s.worker, s.worker->end(), "no request (between requests)");
    s.workerEnded(s.worker);
    std::lock_guard<std::mutex> lock(s.slotMutex);
    s.worker.reset();
  }
  {
    // A closed session's work (an async launch still queued) must not start a worker.
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    if (s.closed)
      return makeCodedError(ErrorCode::UnknownSession, "session '" + s.id + "' was closed");
  }
  llvm::Expected<std::unique_ptr<WorkerProcess>> fresh = pool->take();
  if (!fresh)
    return fresh.takeError();
  std::shared_ptr<WorkerProcess> worker = std::move(*fresh);
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    s.worker = worker;
  }
  {
    // A close that ran while the worker was being started ended no worker: end this one.
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    if (s.closed) {
      worker->kill(EndReason::Closed);
      return makeCodedError(ErrorCode::UnknownSession, "session '" + s.id + "' was closed");
    }
  }
  s.forgetWorkerState();
  std::vector<std::string> objectsToLink;
  {
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    objectsToLink.assign(s.attached.begin(), s.attached.end());
  }
  for (const std::string &sha : objectsToLink)
    if (llvm::Error error = linkInto(s, *worker, sha, deadline))
      return std::move(error);
  if (llvm::Error error = handDirect(s, *worker, deadline)) {
    // Not the request's fault: the channel goes (its client carries on over HTTP), the
    // request goes on unless the worker died of it.
    dropDirect(s, llvm::toString(std::move(error)));
    if (!worker->alive())
      return makeCodedError(ErrorCode::WorkerUnavailable,
                            "the session's worker died while it was set up: " +
                                worker->death().cause);
  }
  return worker;
}

void ExecutorCore::Impl::dropDirect(Session &s, const std::string &why) {
  std::shared_ptr<const DirectChannel> channel;
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    channel = std::move(s.direct);
  }
  if (channel)
    transport::logEvent(
        transport::LogLevel::Warn,
        "the same-host channel of session '" + s.id +
            "' could not be handed to its worker; its launches go over HTTP: " + why,
        {{"session", llvm::StringRef(s.id)}});
}

llvm::Error ExecutorCore::Impl::handDirect(Session &s, WorkerProcess &worker,
                                           Clock::time_point deadline) {
  std::shared_ptr<const DirectChannel> channel;
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    channel = s.direct;
  }
  if (!channel || (s.directServedBy.load() == &worker && s.handed.lock() == channel))
    return llvm::Error::success();
  // A launch the last worker left unanswered must not run again in this one.
  if (s.lastEnded.worker) {
    answerForWorker(s.lastEnded);
    s.lastEnded = {};
  }
  MessageWriter share(MessageKind::Channel);
  share.u64(options.maxBytes);
  if (llvm::Error error =
          ask(s, worker, share,
              {channel->control.fd(), channel->regions->inputs().fd(),
               channel->regions->results().fd(), channel->counts.fd(), channel->workerSocket.get()},
              deadline, "handing it the same-host channel")
              .takeError()) {
    // The worker takes the channel's launches as soon as it maps it, one rung already
    // included: a launch it started and did not finish ran, and is answered for here (the
    // channel goes next, and its client would otherwise send the launch again). One it never
    // started is left to the client, which sends it again.
    const shm::WorkerCounts &counts = channel->workerCounts();
    if (!worker.alive() && counts.started.load() != counts.finished.load())
      answerForWorker(worker, *channel);
    return error;
  }
  s.directServedBy = &worker;
  s.handed = channel;
  return llvm::Error::success();
}

llvm::Error ExecutorCore::Impl::linkInto(Session &s, WorkerProcess &worker, llvm::StringRef sha,
                                         Clock::time_point deadline) {
  std::optional<ObjectBlob> blob = findObject(sha);
  if (!blob)
    return makeCodedError(ErrorCode::UnknownObject, "object " + sha + " is not on this executor");
  const std::string &bytes = *blob->bytes;
  MessageWriter add(MessageKind::AddObject);
  add.str(sha);
  SharedBuffer shared;
  std::vector<int> fds;
  if (llvm::Error error = writeBody(add, bytes, shared, "courier-object"))
    return makeCodedError(ErrorCode::Internal,
                          "sharing object " + sha +
                              " with the session's worker: " + llvm::toString(std::move(error)));
  if (shared.fd() >= 0)
    fds.push_back(shared.fd());
  llvm::Expected<Message> reply =
      ask(s, worker, add, fds, deadline, ("loading object " + sha).str());
  if (!reply)
    return reply.takeError();
  MessageReader in(reply->bytes);
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
  {
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    s.infos[sha.str()] = std::move(info);
  }
  s.linked.insert(sha.str());
  return llvm::Error::success();
}

void ExecutorCore::Impl::answerForWorker(const Session::EndedServer &ended) {
  if (ended.channel && ended.worker)
    answerForWorker(*ended.worker, *ended.channel);
}

void ExecutorCore::Impl::answerForWorker(WorkerProcess &worker, const DirectChannel &channel) {
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
      isStopping() ? shm::encodeFailure(ErrorCode::WorkerUnavailable,
                                        "the executor is shutting down; " + what + " was ended")
                   : shm::encodeFailure(worker.endedDuring(what), ErrorCode::KernelCrashed);
  shm::answer(page, request, failure, shm::kPageVersion);
  metrics.launchFailures++;
  channel.answeredForWorkers++;
}

llvm::Expected<Message> ExecutorCore::Impl::ask(Session &s, WorkerProcess &worker,
                                                MessageWriter &message, llvm::ArrayRef<int> fds,
                                                Clock::time_point deadline, llvm::StringRef what) {
  llvm::Expected<Message> reply = worker.request(message, fds, deadline, what);
  if (reply || worker.alive())
    return reply;
  noteDeath(s, worker, worker.death(), what);
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    if (s.worker.get() == &worker) {
      s.workerEnded(s.worker);
      s.worker.reset();
    }
  }
  s.forgetWorkerState();
  return reply;
}

void ExecutorCore::Impl::noteDeath(Session &s, WorkerProcess &worker, const WorkerDeath &death,
                                   llvm::StringRef what) {
  // The executor ended it on purpose (close, shutdown): not a restart. Once the executor
  // stops, a worker may die before it is told why (with the thread that started it, which
  // the stop ends: the worker's parent-death signal).
  if (death.reason == EndReason::Closed || death.reason == EndReason::Shutdown || isStopping())
    return;
  std::string cause = death.reason == EndReason::Deadline ? "deadline"
                      : death.signal.empty()              ? "exit"
                                                          : "crash";
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
                      llvm::formatv("worker {0} of session '{1}' died: {2} in {3}", worker.pid(),
                                    s.id, death.cause, what)
                          .str(),
                      {{"session", llvm::StringRef(s.id)},
                       {"pid", int64_t(worker.pid())},
                       {"cause", llvm::StringRef(cause)}});
}

void ExecutorCore::Impl::reapIdleSessions() {
  auto interval = std::min(std::chrono::duration_cast<Clock::duration>(options.idleTimeout),
                           std::chrono::duration_cast<Clock::duration>(options.objectGrace)) /
                  4;
  interval =
      std::clamp<Clock::duration>(interval, std::chrono::milliseconds(50), std::chrono::seconds(5));
  while (!waitForStop(interval)) {
    int64_t cutoff = (Clock::now() - options.idleTimeout).time_since_epoch().count();
    std::vector<std::shared_ptr<Session>> expired;
    {
      std::lock_guard<std::mutex> sessionsLock(sessionsMutex);
      for (auto it = sessions.begin(); it != sessions.end();) {
        // A request running on a session (a client waiting on it) keeps it; async launches
        // nobody waits for do not: an idle client's session goes, ending its worker.
        Session &candidate = *it->second;
        if (candidate.lastUsed.load() < cutoff && candidate.busy.load() == 0) {
          expired.push_back(std::move(it->second));
          it = sessions.erase(it);
        } else {
          ++it;
        }
      }
    }
    metrics.sessionsExpired += expired.size();
    endSessions(expired, EndReason::Closed);
    // Requests still running keep their session alive; it dies with the last of them.
    expired.clear();
    dropUnheldObjects();
  }
}

ExecutorCore::ExecutorCore(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

ExecutorCore::~ExecutorCore() {
  stop();
  if (impl->reaper.joinable())
    impl->reaper.join();
  // Async launches still queued or running finish first (with isolation, stop() has ended
  // their workers, so they finish at once).
  if (impl->launchPool)
    impl->launchPool->wait();
  std::lock_guard<std::mutex> lock(impl->sessionsMutex);
  impl->sessions.clear();
}

llvm::Expected<std::unique_ptr<ExecutorCore>> ExecutorCore::create(CoreOptions options) {
  llvm::Expected<std::shared_ptr<PluginSet>> plugins = PluginSet::load(options.plugins);
  if (!plugins)
    return plugins.takeError();
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->plugins = std::move(*plugins);
  // In this process, kernels share the process's one team (executor/KernelThreads.h).
  if (!impl->isolated() && impl->options.kernelThreads)
    setKernelThreads(impl->options.kernelThreads);
  if (impl->isolated()) {
    WorkerSettings settings;
    settings.program = impl->options.workerProgram;
    if (settings.program.empty()) {
      // courier-worker is installed beside the program that runs the executor.
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
    settings.plugins = impl->options.plugins;
    settings.doorbell = true;
    settings.memoryMiB = impl->options.workerMemoryMiB;
    settings.cpuSeconds = impl->options.workerCpuSeconds;
    settings.kernelThreads = impl->options.kernelThreads;
    settings.sandbox = impl->options.sandbox;
    settings.allowUnsignedObjects = impl->options.allowUnsignedObjects;
    impl->pool = std::make_unique<WorkerPool>(std::move(settings), impl->options.warmWorkers);
    // Refuse to serve rather than serve uncontained: a worker must start, sandbox and all.
    if (llvm::Error error = impl->pool->probe())
      return llvm::createStringError(
          "worker processes cannot start: " + llvm::toString(std::move(error)) +
          (impl->options.sandbox ? " (if seccomp is unavailable here, --no-sandbox runs "
                                   "workers without it)"
                                 : ""));
  }
  impl->launchPool = std::make_unique<llvm::StdThreadPool>(
      llvm::hardware_concurrency(std::max(1u, impl->options.asyncThreads)));
  impl->reaper = std::thread([raw = impl.get()] { raw->reapIdleSessions(); });
  return std::unique_ptr<ExecutorCore>(new ExecutorCore(std::move(impl)));
}

const CoreOptions &ExecutorCore::options() const { return impl->options; }

llvm::Expected<SessionRef> ExecutorCore::openSession(const std::string &id, bool &created) {
  return impl->createSession(id, created);
}

bool ExecutorCore::hasSession(llvm::StringRef id) {
  std::lock_guard<std::mutex> lock(impl->sessionsMutex);
  return impl->sessions.count(id.str()) != 0;
}

std::vector<SessionSummary> ExecutorCore::listSessions() {
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    for (const auto &entry : impl->sessions)
      open.push_back(entry.second);
  }
  int64_t now = Clock::now().time_since_epoch().count();
  std::vector<SessionSummary> summaries;
  summaries.reserve(open.size());
  for (const std::shared_ptr<Session> &s : open) {
    SessionSummary summary;
    summary.id = s->id;
    {
      std::lock_guard<std::mutex> lock(s->attachMutex);
      summary.objects.assign(s->attached.begin(), s->attached.end());
    }
    summary.idleMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                         Clock::duration(std::max<int64_t>(0, now - s->lastUsed.load())))
                         .count();
    summary.requestsInFlight = s->busy.load();
    {
      std::lock_guard<std::mutex> lock(s->slotMutex);
      summary.workerPid = s->worker ? s->worker->pid() : 0;
    }
    {
      std::lock_guard<std::mutex> lock(s->launchesMutex);
      summary.pendingLaunches = s->launches.size();
    }
    summaries.push_back(std::move(summary));
  }
  llvm::sort(summaries,
             [](const SessionSummary &a, const SessionSummary &b) { return a.id < b.id; });
  return summaries;
}

llvm::Expected<SessionRef> ExecutorCore::findSession(llvm::StringRef id) {
  std::lock_guard<std::mutex> lock(impl->sessionsMutex);
  auto it = impl->sessions.find(id.str());
  if (it == impl->sessions.end())
    return makeCodedError(ErrorCode::UnknownSession, "no session '" + id + "' on this executor");
  it->second->touch();
  return it->second;
}

llvm::Error ExecutorCore::closeSession(llvm::StringRef id) {
  std::vector<std::shared_ptr<Session>> ending;
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    auto it = impl->sessions.find(id.str());
    if (it == impl->sessions.end())
      return makeCodedError(ErrorCode::UnknownSession, "no session '" + id + "' on this executor");
    ending.push_back(std::move(it->second));
    impl->sessions.erase(it);
  }
  impl->endSessions(ending, EndReason::Closed);
  return llvm::Error::success();
}

const std::string &ExecutorCore::sessionId(const Session &session) { return session.id; }

namespace {

/// Refuses an object whose features record (abi/KernelABI.h) names a feature this machine's
/// CPU lacks: its code would die of an illegal instruction at the first launch that reached it.
llvm::Error checkObjectCpu(const ObjectBlob &blob) {
  llvm::Expected<std::vector<std::string>> required =
      readRequiredFeatures(blob.sha256, *blob.bytes);
  if (!required)
    return transport::makeCodedError(ErrorCode::InvalidObject,
                                     llvm::toString(required.takeError()));
  std::vector<std::string> missing = missingHostFeatures(*required);
  if (missing.empty())
    return llvm::Error::success();
  return transport::makeCodedError(
      ErrorCode::UnsupportedCpu,
      llvm::formatv("object {0} needs CPU feature{1} {2}, which this executor's CPU ({3}) lacks: "
                    "compile it for this executor's CPU (its /v1/health names the CPU and "
                    "features) or send it to one that has them",
                    blob.sha256, missing.size() == 1 ? "" : "s", llvm::join(missing, ", "),
                    describeHostCpu().name));
}

} // namespace

llvm::Expected<bool> ExecutorCore::storeObject(ObjectBlob blob) {
  // Read before the store is locked: the object is refused before it takes any room.
  if (llvm::Error error = checkObjectCpu(blob))
    return std::move(error);
  bool stored = false;
  {
    std::lock_guard<std::mutex> lock(impl->objectsMutex);
    auto it = impl->objects.find(blob.sha256);
    if (it == impl->objects.end()) {
      uint64_t bytes = blob.bytes->size();
      if (llvm::Error error = impl->refuseUnlessRoom(blob.sha256, bytes))
        return std::move(error);
      impl->makeRoom(bytes);
      impl->objectBytes += bytes;
      std::string sha = blob.sha256;
      impl->objects.emplace(std::move(sha), Impl::StoredObject{std::move(blob), 0, Clock::now()});
      stored = true;
    } else if (it->second.holders == 0) {
      // An upload announces an attach to come: the grace period starts again.
      it->second.unheldSince = Clock::now();
    }
  }
  if (stored)
    impl->metrics.objectUploads++;
  return stored;
}

llvm::Error ExecutorCore::checkStoreRoom(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(impl->objectsMutex);
  return impl->refuseUnlessRoom("", bytes);
}

std::optional<ObjectBlob> ExecutorCore::findObject(llvm::StringRef sha) {
  return impl->findObject(sha);
}

std::vector<ObjectSummary> ExecutorCore::listObjects() {
  std::vector<ObjectSummary> summaries;
  {
    std::lock_guard<std::mutex> lock(impl->objectsMutex);
    summaries.reserve(impl->objects.size());
    for (const auto &[sha, stored] : impl->objects)
      summaries.push_back({sha, static_cast<uint64_t>(stored.blob.bytes->size()), stored.holders});
  }
  llvm::sort(summaries,
             [](const ObjectSummary &a, const ObjectSummary &b) { return a.sha256 < b.sha256; });
  return summaries;
}

llvm::Error ExecutorCore::attach(Session &session, llvm::StringRef sha) {
  BusyGuard busy(session, impl->isolated());
  return impl->attach(session, sha);
}

bool ExecutorCore::detach(Session &session, llvm::StringRef sha) {
  return impl->detach(session, sha);
}

Clock::time_point ExecutorCore::deadline(std::optional<std::chrono::milliseconds> requested) const {
  auto limit = impl->options.launchTimeout;
  if (requested)
    limit = std::min(limit, *requested);
  return Clock::now() + limit;
}

llvm::Expected<InputArea> ExecutorCore::inputArea(Session &session,
                                                  llvm::ArrayRef<wire::TensorHeader> headers) {
  InputArea area;
  AreaBytes &bytes = *area.impl;
  if (impl->isolated()) {
    // Each input starts aligned, as a kernel may assume of its buffers.
    for (const wire::TensorHeader &t : headers) {
      bytes.offsets.push_back(bytes.total);
      bytes.total = alignInput(bytes.total + t.bytes);
    }
    if (bytes.total <= kInlineBytes) {
      bytes.inlineBytes.assign(bytes.total, '\0');
    } else {
      ArenaPool &pool = *session.arenas;
      llvm::Expected<std::shared_ptr<Arena>> arena = pool.take(pool.idleInputs, bytes.total);
      if (!arena)
        return makeCodedError(ErrorCode::PayloadTooLarge,
                              "cannot allocate " + llvm::Twine(bytes.total) +
                                  " bytes for launch inputs: " + llvm::toString(arena.takeError()));
      bytes.pool = session.arenas;
      bytes.arena = std::move(*arena);
    }
    return std::move(area);
  }
  for (const wire::TensorHeader &t : headers) {
    char *data = static_cast<char *>(wire::allocateTensorBuffer(t.bytes));
    if (!data)
      return makeCodedError(ErrorCode::PayloadTooLarge, "cannot allocate " + llvm::Twine(t.bytes) +
                                                            " bytes for a launch input");
    bytes.buffers.emplace_back(data);
  }
  return std::move(area);
}

InputArea ExecutorCore::inputAreaIn(SharedRegions &regions,
                                    llvm::ArrayRef<wire::TensorHeader> headers) {
  InputArea area;
  AreaBytes &bytes = *area.impl;
  bytes.arena = regions.impl->inputs;
  for (const wire::TensorHeader &t : headers) {
    bytes.offsets.push_back(t.offset);
    bytes.total = std::max(bytes.total, t.offset + t.bytes);
  }
  return area;
}

namespace {
/// Arenas a session's worker keeps mapped at most; the oldest others are unmapped first.
constexpr size_t kMappedArenas = 8;

/// Fills in a launch's arena references: the input arena (when the inputs are in one), the
/// result arena, each saying whether its descriptor is in `fds` (only when the worker has not
/// mapped it), and the ids the worker is to keep mapped. `workerMutex` held.
void referArenas(Session &s, LaunchRequest &launch, std::vector<int> &fds,
                 const std::shared_ptr<Arena> &input, const std::shared_ptr<Arena> &result) {
  for (auto it = s.mapped.begin(); it != s.mapped.end();)
    it = it->second.expired() ? s.mapped.erase(it) : std::next(it);
  auto used = [&](uint64_t id) {
    return (input && input->id == id) || (result && result->id == id);
  };
  size_t adding = (input && !s.mapped.count(input->id)) + (result && !s.mapped.count(result->id));
  for (auto it = s.mapped.begin();
       s.mapped.size() + adding > kMappedArenas && it != s.mapped.end();)
    it = used(it->first) ? std::next(it) : s.mapped.erase(it);
  auto refer = [&](const std::shared_ptr<Arena> &arena) {
    bool sending = s.mapped.emplace(arena->id, arena).second;
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
  for (const auto &entry : s.mapped)
    launch.keep.push_back(entry.first);
}
} // namespace

llvm::Expected<Message> ExecutorCore::Impl::askLaunch(
    Session &s, llvm::StringRef sha, LaunchRequest &launch, const std::shared_ptr<Arena> &input,
    const std::shared_ptr<Arena> &result, Clock::time_point deadline, llvm::StringRef what) {
  std::lock_guard<std::mutex> working(s.workerMutex);
  llvm::Expected<std::shared_ptr<WorkerProcess>> worker = liveWorker(s, deadline);
  if (!worker)
    return worker.takeError();
  if (!s.linked.count(sha.str()))
    if (llvm::Error error = linkInto(s, **worker, sha, deadline))
      return std::move(error);
  std::vector<int> fds;
  referArenas(s, launch, fds, input, result);
  MessageWriter message(MessageKind::Launch);
  launch.write(message);
  llvm::Expected<Message> answered = ask(s, **worker, message, fds, deadline, what);
  if (!answered)
    s.mapped.clear(); // The worker may have stopped before mapping what was sent.
  return answered;
}

llvm::Expected<LaunchResults>
ExecutorCore::launch(Session &s, llvm::StringRef sha, llvm::StringRef entry, InputArea *area,
                     llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results,
                     Clock::time_point deadline, SharedRegions *resultsInto) {
  BusyGuard busy(s, impl->isolated());
  Metrics &metrics = impl->metrics;
  RunningLaunch running(metrics, impl->options.timeLaunches);
  LaunchResults out;
  if (impl->isolated()) {
    if (!area)
      return makeCodedError(ErrorCode::Internal,
                            "an isolated launch needs its inputs in an input area");
    AreaBytes &bytes = *area->impl;
    LaunchRequest launch;
    launch.object = sha;
    launch.entry = entry;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorView &t = inputs[i];
      llvm::Expected<uint64_t> size = wire::packedBytes(t.elemSize, t.sizes);
      if (!size)
        return size.takeError();
      launch.inputs.push_back(PlacedTensor{t.elemSize, t.sizes, bytes.offsets[i], *size});
    }
    launch.results.assign(results.begin(), results.end());
    launch.total = bytes.total;
    launch.inlineBytes = bytes.inlineBytes; // Unless referArenas puts the inputs in an arena.
    // Lend the worker a result arena when results are likely large: the session's last
    // large results, or inputs that were large, say so.
    ArenaPool &pool = *s.arenas;
    std::shared_ptr<Arena> resultArena;
    uint64_t expectResults = std::max(bytes.total, pool.lastResultBytes.load());
    if (resultsInto) {
      resultArena = resultsInto->impl->results;
    } else if (expectResults > kInlineBytes) {
      llvm::Expected<std::shared_ptr<Arena>> lent = pool.take(pool.idleResults, expectResults);
      if (lent)
        resultArena = std::move(*lent);
      else
        llvm::consumeError(lent.takeError()); // The worker then makes its own buffer.
    }
    llvm::Expected<Message> reply = impl->askLaunch(s, sha, launch, bytes.arena, resultArena,
                                                    deadline, "'" + entry.str() + "'");
    running.finish();
    if (!reply) {
      metrics.launchFailures++;
      return reply.takeError();
    }
    *area = InputArea(); // Inputs are no longer needed while the reply streams.
    llvm::Expected<std::shared_ptr<WorkerResults>> decoded =
        decodeWorkerResults(*reply, results, entry, impl->options.maxBytes, s.arenas, resultArena);
    if (resultArena)
      pool.give(pool.idleResults, std::move(resultArena)); // Not used this time.
    if (!decoded) {
      metrics.launchFailures++;
      return decoded.takeError();
    }
    uint64_t resultBytes = 0;
    for (const TensorView &view : (*decoded)->views) {
      uint64_t size = static_cast<uint64_t>(view.elemSize);
      for (int64_t extent : view.sizes)
        size *= static_cast<uint64_t>(extent);
      resultBytes += size;
    }
    pool.lastResultBytes = resultBytes;
    out.views = (*decoded)->views;
    out.keepAlive = std::move(*decoded);
    return std::move(out);
  }
  std::vector<TensorView> placed;
  if (area) {
    placed.assign(inputs.begin(), inputs.end());
    for (size_t i = 0; i < placed.size(); ++i)
      placed[i].data = area->input(i);
    inputs = placed;
  }
  llvm::Expected<std::vector<OwnedTensor>> produced = s.host->launch(sha, entry, inputs, results);
  running.finish();
  if (!produced) {
    metrics.launchFailures++;
    return classifyHostError(produced.takeError(), ErrorCode::UnknownEntry, ErrorCode::LaunchFailed,
                             "launching '" + entry + "'");
  }
  if (produced->size() != results.size()) {
    metrics.launchFailures++;
    return makeCodedError(ErrorCode::LaunchFailed,
                          llvm::formatv("'{0}' returned {1} results, expected {2}", entry,
                                        produced->size(), results.size()));
  }
  if (area)
    *area = InputArea();
  auto tensors = std::make_shared<std::vector<OwnedTensor>>(std::move(*produced));
  for (const OwnedTensor &t : *tensors)
    out.views.push_back(TensorView{t.data, t.elemSize, t.sizes, t.strides});
  out.owned = tensors.get();
  out.keepAlive = std::move(tensors);
  return std::move(out);
}

llvm::Expected<uint64_t> ExecutorCore::launchAsync(const SessionRef &session, llvm::StringRef sha,
                                                   llvm::StringRef entryRef,
                                                   Clock::time_point deadline) {
  Session &s = *session;
  std::string object = sha.str(), entry = entryRef.str();
  if (llvm::Error error = attach(s, object))
    return std::move(error);
  // Refused now rather than at await: the client learns of its mistake where it made it.
  bool known = true;
  if (impl->isolated()) {
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    auto info = s.infos.find(object);
    known = info != s.infos.end() && info->second.hasEntry(entry);
    // An async entry takes nothing and returns nothing; its table must say so.
    if (known)
      if (llvm::Error error = checkLaunch(info->second, entry, {}, {}))
        return std::move(error);
  } else {
    known = s.host->hasEntry(object, entry);
  }
  if (!known)
    return makeCodedError(ErrorCode::UnknownEntry, "launching '" + entry + "': no entry '" + entry +
                                                       "' in object " + object);
  Metrics *m = &impl->metrics;
  auto outcome = std::make_shared<std::promise<AsyncOutcome>>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(s.launchesMutex);
    if (s.launches.size() >= wire::kMaxPendingLaunches)
      return makeCodedError(
          ErrorCode::TooManyLaunches,
          llvm::formatv("session '{0}' has {1} async launches not yet awaited; await some first",
                        s.id, wire::kMaxPendingLaunches));
    id = s.nextLaunch++;
    s.launches.emplace(id, outcome->get_future().share());
  }
  auto finish = [m, outcome](llvm::Error error) {
    if (!error) {
      outcome->set_value({});
      return;
    }
    m->launchFailures++;
    auto [code, message] = transport::takeCodeAndMessage(std::move(error), ErrorCode::LaunchFailed);
    outcome->set_value({code, std::move(message)});
  };
  Impl *core = impl.get();
  if (impl->isolated()) {
    // The task holds the session only while it runs: a close ends the worker, which ends
    // the task at once, and an unawaited session is never kept alive by its launches.
    std::weak_ptr<Session> weak = session;
    impl->launchPool->async([core, weak, object, entry, m, deadline, finish] {
      std::shared_ptr<Session> held = weak.lock();
      if (!held) {
        finish(makeCodedError(ErrorCode::UnknownSession,
                              "the session was closed before '" + entry + "' started"));
        return;
      }
      // No inputs, no results, and an empty inline body.
      LaunchRequest launch;
      launch.object = object;
      launch.entry = entry;
      llvm::Expected<Message> reply = [&] {
        RunningLaunch running(*m, true);
        return core->askLaunch(*held, object, launch, nullptr, nullptr, deadline,
                               "'" + entry + "'");
      }();
      finish(reply ? llvm::Error::success() : reply.takeError());
    });
  } else {
    // The task shares the host, not the session: a session that closes or expires
    // meanwhile goes at once (nothing waits for a kernel that may never return), and the
    // host with the object's code stays until the task is done.
    impl->launchPool->async([host = s.host, object, entry, m, finish] {
      llvm::Expected<std::vector<OwnedTensor>> results = [&] {
        RunningLaunch running(*m, true);
        return host->launch(object, entry, {}, {});
      }();
      finish(results ? llvm::Error::success()
                     : classifyHostError(results.takeError(), ErrorCode::UnknownEntry,
                                         ErrorCode::LaunchFailed, "launching '" + entry + "'"));
    });
  }
  return id;
}

llvm::Error ExecutorCore::await(Session &s, uint64_t id, Clock::time_point deadline) {
  BusyGuard busy(s, impl->isolated());
  std::shared_future<AsyncOutcome> done;
  {
    std::lock_guard<std::mutex> lock(s.launchesMutex);
    auto it = s.launches.find(id);
    if (it == s.launches.end())
      return makeCodedError(ErrorCode::UnknownLaunch, "no pending launch " + llvm::Twine(id) +
                                                          " in session '" + s.id +
                                                          "' (unknown, or already awaited)");
    done = std::move(it->second);
    s.launches.erase(it);
  }
  if (done.wait_until(deadline) != std::future_status::ready) {
    if (!impl->isolated())
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            llvm::formatv("launch {0} is still running; without isolation the "
                                          "executor cannot end it",
                                          id));
    // Ending the worker ends the launch; its task then reports how it ended.
    s.endWorker(EndReason::Deadline);
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready)
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            llvm::formatv("launch {0} ran past its deadline", id));
  }
  const AsyncOutcome &outcome = done.get();
  s.touch();
  if (outcome.code)
    return makeCodedError(*outcome.code, outcome.message);
  return llvm::Error::success();
}

llvm::Expected<std::string> ExecutorCore::call(Session &s, llvm::StringRef symbol,
                                               llvm::StringRef input, uint64_t outputSize,
                                               Clock::time_point deadline) {
  BusyGuard busy(s, impl->isolated());
  Metrics &metrics = impl->metrics;
  metrics.calls++;
  std::string output;
  if (impl->isolated()) {
    MessageWriter call(MessageKind::Call);
    call.str(symbol).u64(outputSize);
    SharedBuffer shared;
    std::vector<int> fds;
    if (llvm::Error error = writeBody(call, input, shared, "courier-call"))
      return makeCodedError(ErrorCode::PayloadTooLarge,
                            "cannot share the call's input: " + llvm::toString(std::move(error)));
    if (shared.fd() >= 0)
      fds.push_back(shared.fd());
    llvm::Expected<Message> reply = [&]() -> llvm::Expected<Message> {
      std::lock_guard<std::mutex> working(s.workerMutex);
      llvm::Expected<std::shared_ptr<WorkerProcess>> worker = impl->liveWorker(s, deadline);
      if (!worker)
        return worker.takeError();
      return impl->ask(s, **worker, call, fds, deadline, "'" + symbol.str() + "'");
    }();
    if (!reply) {
      metrics.callFailures++;
      return reply.takeError();
    }
    MessageReader in(reply->bytes);
    SharedBuffer mapped;
    // A reply of another size is refused before anything of it is mapped.
    llvm::Expected<llvm::StringRef> body = readBody(in, *reply, mapped, outputSize);
    if (!body) {
      metrics.callFailures++;
      return makeCodedError(ErrorCode::CallFailed, "reading the reply of '" + symbol +
                                                       "': " + llvm::toString(body.takeError()));
    }
    output = body->str();
  } else {
    llvm::Expected<std::string> produced = s.host->call(symbol, input, outputSize);
    if (!produced) {
      metrics.callFailures++;
      return classifyHostError(produced.takeError(), ErrorCode::UnknownSymbol,
                               ErrorCode::CallFailed, "calling '" + symbol + "'");
    }
    output = std::move(*produced);
  }
  if (output.size() != outputSize) {
    metrics.callFailures++;
    return makeCodedError(ErrorCode::CallFailed,
                          llvm::formatv("'{0}' produced {1} bytes, the caller expects {2}", symbol,
                                        output.size(), outputSize));
  }
  return std::move(output);
}

HealthReport ExecutorCore::health() {
  HealthReport report;
  report.version = COURIER_VERSION;
  report.triple = llvm::sys::getProcessTriple();
  HostCpu cpu = describeHostCpu();
  report.cpu = std::move(cpu.name);
  report.features = std::move(cpu.features);
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    report.sessions = impl->sessions.size();
  }
  {
    std::lock_guard<std::mutex> lock(impl->objectsMutex);
    report.objects = impl->objects.size();
  }
  report.isolated = impl->isolated();
  if (impl->isolated()) {
    report.workersLive = WorkerPool::live();
    report.workersWarm = impl->pool->warmCount();
    report.workersRestarted = impl->metrics.workersRestarted.load();
    if (!impl->pool->healthy()) {
      report.healthy = false;
      report.reason = "cannot start worker processes: " + impl->pool->lastError();
    }
  }
  return report;
}

llvm::Expected<bool> ExecutorCore::serveDirect(Session &s,
                                               std::shared_ptr<const DirectChannel> channel,
                                               Clock::time_point deadline, bool replace,
                                               bool wait) {
  if (!impl->isolated())
    return makeCodedError(ErrorCode::Unavailable, "kernels run in the executor's own process");
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    // A channel that was replaced or dropped is not put back by its watcher.
    if (s.direct != channel && !replace)
      return false;
    if (s.direct == channel && s.worker && s.worker.get() == s.directServedBy.load() &&
        s.worker->alive())
      return true; // Answered already: no wait for the worker's requests.
  }
  std::unique_lock<std::mutex> working(s.workerMutex, std::defer_lock);
  if (wait)
    working.lock();
  else if (!working.try_lock())
    return false; // Busy with a request: the caller does without rather than wait out a kernel.
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    if (s.direct != channel) {
      if (!replace)
        return false;
      s.direct = channel;
    }
  }
  llvm::Expected<std::shared_ptr<WorkerProcess>> worker = impl->liveWorker(s, deadline);
  if (!worker)
    return worker.takeError();
  if (llvm::Error error = impl->handDirect(s, **worker, deadline))
    return std::move(error);
  std::lock_guard<std::mutex> lock(s.slotMutex);
  return s.direct == channel;
}

void ExecutorCore::stopDirect(Session &s, const DirectChannel *channel) {
  std::lock_guard<std::mutex> lock(s.slotMutex);
  if (s.direct.get() == channel)
    s.direct.reset();
}

bool ExecutorCore::watchDirect(Session &s, const DirectChannel *channel, Clock::time_point until,
                               int64_t &workerPid) {
  std::shared_ptr<WorkerProcess> worker;
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    worker = s.worker;
    // Only a worker that answers this channel runs its launches: 0 for any other.
    workerPid = worker && s.direct.get() == channel && s.directServedBy.load() == worker.get()
                    ? worker->pid()
                    : 0;
  }
  if (!worker) {
    std::this_thread::sleep_until(until);
    return false;
  }
  if (worker->alive()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    struct pollfd ended {
      worker->socket(), 0, 0
    };
    // Only its end wakes this: what the worker writes is read by the request waiting for it.
    if (::poll(&ended, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX))) <= 0 &&
        worker->alive())
      return false;
  }
  // It ended. A request on it learns so at once; the death is settled here unless that
  // request did it.
  std::lock_guard<std::mutex> working(s.workerMutex);
  bool ours = false;
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    if (s.worker == worker) {
      s.worker.reset();
      ours = true;
    }
  }
  if (ours) {
    impl->noteDeath(s, *worker, worker->end(), "a same-host launch");
    s.workerEnded(worker);
  }
  // Once for each worker: a launch rung after this answer is the next worker's.
  if (s.lastEnded.worker == worker) {
    impl->answerForWorker(s.lastEnded);
    s.lastEnded = {};
  }
  return true;
}

void ExecutorCore::endDirectLaunch(Session &s, int64_t workerPid) {
  std::shared_ptr<WorkerProcess> worker;
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    worker = s.worker;
  }
  // The worker the watcher saw running the launch, not one started since.
  if (worker && worker->pid() == workerPid)
    worker->kill(EndReason::Deadline);
}

bool ExecutorCore::sessionOpen(Session &s) {
  std::lock_guard<std::mutex> attaching(s.attachMutex);
  return !s.closed;
}

void ExecutorCore::touch(Session &s) { s.touch(); }

bool ExecutorCore::workerHeld(Session &s) {
  std::unique_lock<std::mutex> working(s.workerMutex, std::try_to_lock);
  return !working.owns_lock();
}

void ExecutorCore::countDirectRunning(int64_t change) {
  impl->metrics.launchesRunning += static_cast<uint64_t>(change);
}

void ExecutorCore::countDirectLaunches(uint64_t started, uint64_t failed,
                                       std::vector<double> buckets, double seconds) {
  Metrics &metrics = impl->metrics;
  metrics.launches += started;
  metrics.launchFailures += failed;
  if (!buckets.empty())
    metrics.launchSeconds.ObserveMultiple(buckets, seconds);
}

std::vector<prometheus::MetricFamily> ExecutorCore::collectMetrics() {
  using prometheus::MetricType;
  using transport::singleSample;
  Metrics &metrics = impl->metrics;
  auto counter = [](const char *name, const char *help, uint64_t value) {
    return singleSample(name, help, MetricType::Counter, static_cast<double>(value));
  };
  auto gauge = [](const char *name, const char *help, uint64_t value) {
    return singleSample(name, help, MetricType::Gauge, static_cast<double>(value));
  };
  std::vector<prometheus::MetricFamily> families = {
      counter("courier_launches_total", "Kernel launches run.", metrics.launches),
      counter("courier_launch_failures_total", "Kernel launches that failed.",
              metrics.launchFailures),
      counter("courier_calls_total", "Calls run.", metrics.calls),
      counter("courier_call_failures_total", "Calls that failed.", metrics.callFailures),
      counter("courier_object_uploads_total", "Objects stored from an upload.",
              metrics.objectUploads),
      counter("courier_objects_dropped_total",
              "Objects dropped from the store after no session held them for the grace period.",
              metrics.objectsDropped),
      counter("courier_objects_evicted_total",
              "Objects no session held, evicted to keep the store within its limit.",
              metrics.objectsEvicted),
      counter("courier_sessions_opened_total", "Sessions created.", metrics.sessionsOpened),
      counter("courier_sessions_expired_total", "Sessions closed for being idle.",
              metrics.sessionsExpired),
  };
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    families.push_back(gauge("courier_sessions", "Open sessions.", impl->sessions.size()));
  }
  families.push_back(gauge("courier_launches_running",
                           "Kernel launches under way, over HTTP or the same-host channel.",
                           metrics.launchesRunning));
  {
    std::lock_guard<std::mutex> lock(impl->objectsMutex);
    families.push_back(gauge("courier_objects", "Objects held.", impl->objects.size()));
    families.push_back(gauge("courier_object_bytes", "Bytes of objects held.", impl->objectBytes));
    families.push_back(gauge("courier_object_store_limit_bytes",
                             "Most bytes of objects the store holds (--max-object-store-mib).",
                             impl->options.maxStoreBytes));
    families.push_back(gauge("courier_attached_objects",
                             "Objects loaded in sessions, once per session holding one.",
                             impl->attachments));
  }
  families.push_back(transport::histogramFamily(
      "courier_launch_duration_seconds", "Time spent in kernel entries.", metrics.launchSeconds));
  // Session workers keep their own tallies; without isolation, the process's.
  for (prometheus::MetricFamily &family : kernelThreadFamilies(
           WorkerPool::kernelThreadTotals(),
           "Kernel threads running a kernel's parallel loop now, in every worker."))
    families.push_back(std::move(family));
  if (!impl->isolated())
    return families;
  families.push_back(
      gauge("courier_workers", "Worker processes running, warm or serving.", WorkerPool::live()));
  families.push_back(gauge("courier_workers_warm", "Worker processes started ahead of need.",
                           impl->pool->warmCount()));
  families.push_back(counter("courier_deadline_kills_total",
                             "Workers ended because a launch ran past its deadline.",
                             metrics.deadlineKills));
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
  return families;
}

bool ExecutorCore::stopping() { return impl->isStopping(); }

void ExecutorCore::stop() {
  {
    std::lock_guard<std::mutex> lock(impl->stopMutex);
    impl->stopping = true;
  }
  impl->stopSignal.notify_all();
  if (!impl->pool)
    return;
  // Kernels may spin forever: ending their workers is what lets requests finish. The
  // sessions' workers end first, told why, before the pool's refiller thread, whose end
  // would kill them unexplained (their parent-death signal).
  impl->pool->stopTaking();
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    for (auto &[id, session] : impl->sessions)
      all.push_back(session);
  }
  for (const std::shared_ptr<Session> &session : all)
    session->endWorker(EndReason::Shutdown);
  impl->pool->shutdown();
}

} // namespace courier::executor
