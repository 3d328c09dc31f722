// The executor core: sessions, the object store, launches and calls, whichever host the
// sessions' kernels run in (executor/KernelHost.h). See executor/ExecutorCore.h.
#include "executor/ExecutorCore.h"

#include "executor/Arena.h"
#include "executor/AsyncLaunches.h"
#include "executor/CoreMetrics.h"
#include "executor/ElfValidation.h"
#include "executor/HostCpu.h"
#include "executor/KernelThreads.h"
#include "executor/ObjectHost.h"
#include "executor/SessionObjects.h"
#include "executor/WorkerPool.h"
#include "transport/Log.h"
#include "transport/Metrics.h"

#include "Version.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;
namespace wire = transport::wire;

/// A session: its kernel host, so objects shipped by one client never resolve another's
/// symbols, what it holds of the store, and the async launches it started.
class Session {
public:
  explicit Session(std::string id) : id(id), attached(id), launches(std::move(id)) {}
  const std::string id;
  std::shared_ptr<KernelHost> host;
  std::atomic<int64_t> lastUsed{0}; ///< Clock ticks; read by the idle reaper.
  /// What the host has loaded; each holds exactly one reference in the store. Closed when the
  /// session leaves the table, its holds released then, so an attach racing with the close
  /// takes no new one.
  SessionObjects attached;
  AsyncLaunches launches;

  void touch() { lastUsed.store(Clock::now().time_since_epoch().count()); }
  /// Requests running on the session now; the idle reaper leaves a busy session alone.
  std::atomic<int> busy{0};
};

namespace {
/// Marks a session in use for a request's length, and used again when it ends, where idle
/// sessions expire (`active`).
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
} // namespace

struct ExecutorCore::Impl {
  explicit Impl(CoreOptions optionsIn) : options(std::move(optionsIn)) {}

  CoreOptions options;
  CoreMetrics metrics;
  /// Whether idle sessions expire, and so requests mark their session in use.
  bool expiresSessions() const { return options.idleTimeout.count() > 0; }

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
  /// What the hosts borrow of the core, and what makes them (one kind, chosen at create()).
  std::unique_ptr<HostServices> services;
  std::unique_ptr<HostFactory> hosts;

  llvm::Expected<std::shared_ptr<Session>> createSession(const std::string &id, bool &created);
  std::optional<ObjectBlob> findObject(llvm::StringRef sha);
  /// Takes a hold on the stored `sha` for a session about to load it.
  llvm::Expected<ObjectBlob> takeHold(llvm::StringRef sha);
  llvm::Error attach(Session &session, llvm::StringRef sha);
  bool detach(Session &session, llvm::StringRef sha);
  /// Ends every hold of a session that has left the table.
  void releaseHolds(Session &session);
  void dropHold(llvm::StringRef sha);
  void dropUnheldObjects();
  void reapIdleSessions();
  /// Ends the hosts of sessions leaving the table.
  void endSessions(std::vector<std::shared_ptr<Session>> &ending);
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
  auto session = std::make_shared<Session>(id);
  llvm::Expected<std::shared_ptr<KernelHost>> host = hosts->open(id);
  if (!host)
    return host.takeError();
  session->host = std::move(*host);
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

llvm::Expected<ObjectBlob> ExecutorCore::Impl::takeHold(llvm::StringRef sha) {
  // The hold is taken before loading, so the store cannot drop the bytes meanwhile.
  std::lock_guard<std::mutex> lock(objectsMutex);
  auto it = objects.find(sha.str());
  if (it == objects.end())
    return makeCodedError(ErrorCode::UnknownObject, "object " + sha + " is not on this executor");
  if (it->second.holders++ == 0)
    heldBytes += it->second.blob.bytes->size();
  attachments++;
  return it->second.blob;
}

llvm::Error ExecutorCore::Impl::attach(Session &session, llvm::StringRef sha) {
  // Every launch passes here: an object already attached costs a look under a shared lock.
  auto load = [&]() -> llvm::Error {
    llvm::Expected<ObjectBlob> blob = takeHold(sha);
    if (!blob)
      return blob.takeError();
    llvm::Error loaded = session.host->attach(*blob);
    if (loaded)
      dropHold(sha);
    return loaded;
  };
  return session.attached.attach(sha, load, [&] { dropHold(sha); });
}

bool ExecutorCore::Impl::detach(Session &session, llvm::StringRef sha) {
  return session.attached.detach(sha, [&] {
    session.host->detach(sha);
    dropHold(sha);
  });
}

void ExecutorCore::Impl::releaseHolds(Session &session) {
  for (const std::string &sha : session.attached.close())
    dropHold(sha);
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

void ExecutorCore::Impl::endSessions(std::vector<std::shared_ptr<Session>> &ending) {
  for (const std::shared_ptr<Session> &session : ending) {
    releaseHolds(*session);
    // A request still running on the host fails at once instead of holding it.
    session->host->close();
  }
}

void ExecutorCore::Impl::reapIdleSessions() {
  Clock::duration grace = options.objectGrace;
  auto interval =
      (expiresSessions() ? std::min<Clock::duration>(options.idleTimeout, grace) : grace) / 4;
  interval =
      std::clamp<Clock::duration>(interval, std::chrono::milliseconds(50), std::chrono::seconds(5));
  while (!waitForStop(interval)) {
    // With no idle timeout no session is old enough.
    int64_t cutoff = expiresSessions()
                         ? (Clock::now() - options.idleTimeout).time_since_epoch().count()
                         : INT64_MIN;
    std::vector<std::shared_ptr<Session>> expired;
    {
      std::lock_guard<std::mutex> sessionsLock(sessionsMutex);
      for (auto it = sessions.begin(); it != sessions.end();) {
        // A request running on a session (a client waiting on it) keeps it; async launches
        // nobody waits for do not: an idle client's session goes, ending its worker.
        Session &candidate = *it->second;
        if (candidate.lastUsed.load() < cutoff && candidate.busy.load() == 0) {
          // Counted before it leaves the table: metrics that no longer show the session
          // show it expired.
          metrics.sessionsExpired++;
          expired.push_back(std::move(it->second));
          it = sessions.erase(it);
        } else {
          ++it;
        }
      }
    }
    endSessions(expired);
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
  // Async launches still queued or running finish first (a worker's host has had its
  // worker ended by stop(), so they finish at once).
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
  impl->launchPool = std::make_unique<llvm::StdThreadPool>(
      llvm::hardware_concurrency(std::max(1u, impl->options.asyncThreads)));
  Impl *raw = impl.get();
  impl->services.reset(new HostServices{raw->options, std::move(*plugins), raw->metrics,
                                        *raw->launchPool,
                                        [raw](llvm::StringRef sha) { return raw->findObject(sha); },
                                        [raw] { return raw->isStopping(); }});
  llvm::Expected<std::unique_ptr<HostFactory>> hosts =
      impl->options.isolation == transport::Isolation::Process
          ? makeWorkerHosts(*impl->services)
          : makeInProcessHosts(*impl->services);
  if (!hosts)
    return hosts.takeError();
  impl->hosts = std::move(*hosts);
  impl->reaper = std::thread([raw] { raw->reapIdleSessions(); });
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
    summary.objects = s->attached.list();
    summary.idleMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                         Clock::duration(std::max<int64_t>(0, now - s->lastUsed.load())))
                         .count();
    summary.requestsInFlight = s->busy.load();
    summary.workerPid = s->host->workerPid();
    summary.pendingLaunches = s->launches.pending();
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
  impl->endSessions(ending);
  return llvm::Error::success();
}

const std::string &ExecutorCore::sessionId(const Session &session) { return session.id; }

llvm::Expected<bool> ExecutorCore::storeObject(ObjectBlob blob) {
  // Read before the store is locked: the object is refused before it takes any room.
  if (llvm::Error error = checkObjectCpu(blob.sha256, *blob.bytes))
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
  BusyGuard busy(session, impl->expiresSessions());
  return impl->attach(session, sha);
}

bool ExecutorCore::detach(Session &session, llvm::StringRef sha) {
  return impl->detach(session, sha);
}

llvm::Expected<InputArea> ExecutorCore::inputArea(Session &session,
                                                  llvm::ArrayRef<wire::TensorHeader> headers) {
  return session.host->inputArea(headers);
}

llvm::Expected<LaunchResults>
ExecutorCore::launch(Session &s, llvm::StringRef sha, llvm::StringRef entry, InputArea *area,
                     llvm::ArrayRef<TensorView> inputs, llvm::ArrayRef<ResultSpec> results,
                     Clock::time_point deadline, SharedRegions *resultsInto) {
  BusyGuard busy(s, impl->expiresSessions());
  RunningLaunch running(impl->metrics, /*timed=*/true);
  llvm::Expected<LaunchResults> out =
      s.host->launch(LaunchCall{sha, entry, area, inputs, results, deadline, resultsInto}, running);
  if (!out)
    impl->metrics.launchFailures++;
  return out;
}

llvm::Expected<uint64_t> ExecutorCore::launchAsync(const SessionRef &session, llvm::StringRef sha,
                                                   llvm::StringRef entry,
                                                   Clock::time_point deadline) {
  Session &s = *session;
  if (llvm::Error error = attach(s, sha))
    return std::move(error);
  // Refused now rather than at await: the client learns of its mistake where it made it.
  if (llvm::Error error = s.host->checkAsyncEntry(sha, entry))
    return std::move(error);
  return s.launches.start(*s.host, sha, entry, deadline, impl->metrics.launchFailures);
}

Clock::time_point ExecutorCore::deadline(std::optional<std::chrono::milliseconds> requested) const {
  auto limit = impl->options.launchTimeout;
  if (requested)
    limit = std::min(limit, *requested);
  return Clock::now() + limit;
}

InputArea ExecutorCore::inputAreaIn(SharedRegions &regions,
                                    llvm::ArrayRef<wire::TensorHeader> headers) {
  InputArea area;
  InputArea::Impl &bytes = *area.impl;
  bytes.arena = regions.impl->inputs;
  for (const wire::TensorHeader &t : headers) {
    bytes.offsets.push_back(t.offset);
    bytes.total = std::max(bytes.total, t.offset + t.bytes);
  }
  return area;
}

llvm::Error ExecutorCore::await(Session &s, uint64_t id, Clock::time_point deadline) {
  BusyGuard busy(s, impl->expiresSessions());
  llvm::Error awaited = s.launches.await(*s.host, id, deadline);
  s.touch();
  return awaited;
}

llvm::Expected<std::string> ExecutorCore::call(Session &s, llvm::StringRef symbol,
                                               llvm::StringRef input, uint64_t outputSize,
                                               Clock::time_point deadline) {
  BusyGuard busy(s, impl->expiresSessions());
  CoreMetrics &metrics = impl->metrics;
  metrics.calls++;
  llvm::Expected<std::string> output = s.host->call(symbol, input, outputSize, deadline);
  if (!output) {
    metrics.callFailures++;
    return output.takeError();
  }
  if (llvm::Error error = checkCallOutput(symbol, *output, outputSize)) {
    metrics.callFailures++;
    return std::move(error);
  }
  return output;
}

HealthReport ExecutorCore::health() {
  HealthReport report = describeThisExecutor();
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    report.sessions = impl->sessions.size();
  }
  {
    std::lock_guard<std::mutex> lock(impl->objectsMutex);
    report.objects = impl->objects.size();
  }
  impl->hosts->report(report);
  return report;
}

llvm::Expected<bool> ExecutorCore::serveDirect(Session &s,
                                               std::shared_ptr<const DirectChannel> channel,
                                               Clock::time_point deadline, bool replace,
                                               bool wait) {
  return s.host->serveDirect(std::move(channel), deadline, replace, wait);
}

void ExecutorCore::stopDirect(Session &s, const DirectChannel *channel) {
  s.host->stopDirect(channel);
}

bool ExecutorCore::watchDirect(Session &s, const DirectChannel *channel, Clock::time_point until,
                               int64_t &workerPid) {
  return s.host->watchDirect(channel, until, workerPid);
}

void ExecutorCore::endDirectLaunch(Session &s, int64_t workerPid) {
  s.host->endDirectLaunch(workerPid);
}

bool ExecutorCore::workerHeld(Session &s) { return s.host->held(); }

bool ExecutorCore::hostsContained() const { return impl->hosts->contained(); }

bool ExecutorCore::sessionOpen(Session &s) { return s.attached.open(); }

void ExecutorCore::touch(Session &s) { s.touch(); }

void ExecutorCore::countDirectRunning(int64_t change) {
  impl->metrics.launchesRunning += static_cast<uint64_t>(change);
}

void ExecutorCore::countDirectLaunches(uint64_t started, uint64_t failed,
                                       std::vector<double> buckets, double seconds) {
  CoreMetrics &metrics = impl->metrics;
  metrics.launches += started;
  metrics.launchFailures += failed;
  if (!buckets.empty())
    metrics.launchSeconds.ObserveMultiple(buckets, seconds);
}

std::vector<prometheus::MetricFamily> ExecutorCore::collectMetrics() {
  using prometheus::MetricType;
  using transport::singleSample;
  CoreMetrics &metrics = impl->metrics;
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
  // Session workers keep their own tallies; in this process, the process's.
  for (prometheus::MetricFamily &family : kernelThreadFamilies(
           WorkerPool::kernelThreadTotals(),
           "Kernel threads running a kernel's parallel loop now, in every worker."))
    families.push_back(std::move(family));
  impl->hosts->addMetrics(families);
  return families;
}

bool ExecutorCore::stopping() { return impl->isStopping(); }

void ExecutorCore::stop() {
  {
    std::lock_guard<std::mutex> lock(impl->stopMutex);
    impl->stopping = true;
  }
  impl->stopSignal.notify_all();
  // Kernels may spin forever: ending them is what lets requests finish. The sessions'
  // workers end first, told why, before the pool's refiller thread, whose end would kill
  // them unexplained (their parent-death signal).
  impl->hosts->stopTaking();
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(impl->sessionsMutex);
    for (auto &[id, session] : impl->sessions)
      all.push_back(session);
  }
  for (const std::shared_ptr<Session> &session : all)
    session->host->endKernels(EndReason::Shutdown);
  impl->hosts->shutdown();
}

} // namespace courier::executor
