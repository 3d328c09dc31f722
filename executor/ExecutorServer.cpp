// The executor's HTTP server: the /v1 routes over HttpService, which holds the one wrapper
// that turns an llvm::Error (or a stray exception) into {"error":{"code","message"}} with
// the status of its code, so handlers never throw.
#include "executor/ExecutorServer.h"

#include "executor/HostErrors.h"
#include "executor/ObjectHost.h"
#include "executor/WorkerPool.h"
#include "transport/HttpService.h"
#include "transport/Wire.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/Host.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unistd.h>
#include <unordered_map>

// Ordered, so replies list their keys in the order docs/protocol.md shows them.
using json = nlohmann::ordered_json;

namespace courier::transport {

using executor::classifyHostError;
using executor::EndReason;
using executor::Message;
using executor::MessageKind;
using executor::MessageReader;
using executor::MessageWriter;
using executor::SharedBuffer;
using executor::WorkerProcess;
using wire::makeWireError;

namespace {

using Clock = std::chrono::steady_clock;

struct Metrics {
  std::array<std::atomic<uint64_t>, 600> requestsByStatus{};
  std::atomic<uint64_t> launches{0}, launchFailures{0}, calls{0}, callFailures{0};
  std::atomic<uint64_t> objectUploads{0}, objectsDropped{0}, sessionsOpened{0}, sessionsExpired{0};
  std::atomic<uint64_t> deadlineKills{0}, workersRestarted{0};
  Histogram launchSeconds;
  /// Worker deaths by cause ("crash", "deadline", "exit"), crashes by signal.
  std::mutex labelledMutex;
  std::map<std::string, uint64_t> restartsByCause, crashesBySignal;
};

/// An async launch's outcome: empty code on success.
struct AsyncOutcome {
  std::string code, message;
};

/// A session: its own ObjectHost, so objects shipped by one client never resolve another's
/// symbols, and the async launches it started.
struct Session {
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
  /// What the worker reported of each object it loaded; under workerMutex.
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
  /// Serializes attaching and detaching, so `attached` matches what `host` has loaded and
  /// each attached object holds exactly one reference in the store.
  std::mutex attachMutex;
  std::set<std::string> attached;
  /// Set when the session leaves the table; its holds are released then, so an attach
  /// racing with the close must not take a new one.
  bool closed = false;
  std::mutex launchesMutex;
  uint64_t nextLaunch = 1;
  std::map<uint64_t, std::shared_future<AsyncOutcome>> launches;

  void touch() { lastUsed.store(Clock::now().time_since_epoch().count()); }
};

std::string randomId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // Session ids name sessions, they do not guard them (the token does): any source will do.
    std::random_device device;
    for (unsigned char &b : bytes)
      b = static_cast<unsigned char>(device());
  }
  return llvm::toHex(llvm::ArrayRef<uint8_t>(bytes, sizeof(bytes)), /*LowerCase=*/true);
}

void sendJson(httplib::Response &res, int status, const json &body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  wire::kJsonContentType);
}

void sendError(httplib::Response &res, llvm::StringRef code, llvm::StringRef message) {
  res.status = wire::statusForCode(code);
  res.set_content(wire::errorBody(code, message), wire::kJsonContentType);
}

struct MallocDeleter {
  void operator()(char *p) const { std::free(p); }
};
using MallocBuffer = std::unique_ptr<char, MallocDeleter>;

} // namespace

void reportFailure(httplib::Response &res, llvm::Error error) {
  auto [code, message] = executor::describeError(std::move(error), "internal");
  sendError(res, code, message);
}

struct ExecutorServer::Impl {
  explicit Impl(ExecutorServerOptions optionsIn)
      : options(std::move(optionsIn)), service(serviceOptions()) {}

  ExecutorServerOptions options;
  HttpService service;
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
  uint64_t attachments = 0; ///< Sum of `holders`.

  /// Starts the sessions' workers (with isolation).
  std::unique_ptr<executor::WorkerPool> pool;
  bool isolated() const { return options.isolation == ExecutorServerOptions::Isolation::Process; }

  std::thread reaper;
  /// Runs async launches, `threads` at a time; the rest wait their turn. Created once the
  /// server is bound, shut down (finishing what is queued) when it is destroyed.
  std::unique_ptr<httplib::ThreadPool> launchPool;

  HttpServiceOptions serviceOptions();
  void installRoutes();

  llvm::Expected<std::shared_ptr<Session>> findSession(const httplib::Request &req);
  llvm::Expected<std::shared_ptr<Session>> createSession(std::string id, bool &created);
  std::optional<ObjectBlob> findObject(llvm::StringRef sha);
  llvm::Error attach(Session &session, llvm::StringRef sha);
  /// Unloads `sha` from the session and ends its hold; false if the session did not hold it.
  bool detach(Session &session, llvm::StringRef sha);
  /// Ends every hold of a session that has left the table.
  void releaseHolds(Session &session);
  void dropHold(llvm::StringRef sha);
  void dropUnheldObjects();
  void reapIdleSessions();
  /// Ends the workers of sessions leaving the table.
  void endSessions(std::vector<std::shared_ptr<Session>> &ending, EndReason reason);

  /// The deadline a request asks for (X-Courier-Deadline-Ms), within the server's own.
  llvm::Expected<Clock::time_point> deadlineFor(const httplib::Request &req);
  /// The session's worker, started (and its objects linked again) if it has none or its
  /// last one died. Called with `workerMutex` held.
  llvm::Expected<std::shared_ptr<WorkerProcess>> liveWorker(Session &s, Clock::time_point deadline);
  /// Loads the stored object `sha` into the session's worker. `workerMutex` held.
  llvm::Error linkInto(Session &s, WorkerProcess &worker, llvm::StringRef sha,
                       Clock::time_point deadline);
  /// One request to the session's worker; a worker that dies of it is logged, counted and
  /// forgotten, so the next request starts a fresh one. `workerMutex` held.
  llvm::Expected<Message> ask(Session &s, WorkerProcess &worker, llvm::StringRef bytes,
                              llvm::ArrayRef<int> fds, Clock::time_point deadline,
                              llvm::StringRef what);

  llvm::Error health(httplib::Response &res);
  llvm::Error putObject(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader);
  llvm::Error launch(const httplib::Request &req, httplib::Response &res,
                     const httplib::ContentReader &reader);
  llvm::Error launchAsync(const httplib::Request &req, httplib::Response &res);
  llvm::Error await(const httplib::Request &req, httplib::Response &res);
  llvm::Error call(const httplib::Request &req, httplib::Response &res,
                   const httplib::ContentReader &reader);
  std::string renderMetrics();
};

namespace {
/// Reads and discards the rest of a body, so a rejected request leaves the keep-alive
/// connection in step. Returns false when the body could not be read.
bool drain(const httplib::ContentReader &reader) {
  return reader([](const char *, size_t) { return true; });
}

/// What to reserve for a body before it arrives. The Content-Length is only a claim: taken
/// whole, a request that never sends its body could make the executor reserve up to
/// --max-body-mib per connection. Past 1 MiB the buffer grows as the bytes actually come.
size_t initialReserve(const httplib::Request &req) {
  constexpr uint64_t kMaxInitialReserve = 1 << 20;
  return static_cast<size_t>(std::min(contentLength(req), kMaxInitialReserve));
}

/// A read failure is the body being too large (httplib set 413) or cut short.
llvm::Error readFailure(const httplib::Response &res) {
  if (res.status == 413)
    return makeWireError("payload_too_large", "request body exceeds the executor's limit");
  return makeWireError("bad_frame", "request body could not be read");
}
} // namespace

HttpServiceOptions ExecutorServer::Impl::serviceOptions() {
  HttpServiceOptions service;
  service.listen = options;
  service.name = "executor";
  service.payloadTooLargeMessage = "request body exceeds the executor's limit";
  service.sendError = sendError;
  service.reportFailure = reportFailure;
  service.onServed = [this](const ServedRequest &served) {
    if (served.status >= 0 && static_cast<size_t>(served.status) < metrics.requestsByStatus.size())
      metrics.requestsByStatus[static_cast<size_t>(served.status)]++;
  };
  return service;
}

llvm::Expected<std::shared_ptr<Session>>
ExecutorServer::Impl::findSession(const httplib::Request &req) {
  std::string id = req.matches[1];
  std::string header = req.get_header_value(wire::kSessionHeader);
  if (!header.empty() && header != id)
    return makeWireError("bad_request", "header " + llvm::Twine(wire::kSessionHeader) + " '" +
                                            header + "' does not match session '" + id +
                                            "' in the path");
  std::lock_guard<std::mutex> lock(sessionsMutex);
  auto it = sessions.find(id);
  if (it == sessions.end())
    return makeWireError("unknown_session", "no session '" + id + "' on this executor");
  it->second->touch();
  return it->second;
}

llvm::Expected<std::shared_ptr<Session>> ExecutorServer::Impl::createSession(std::string id,
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
      return makeWireError("internal",
                           "creating an object host: " + llvm::toString(host.takeError()));
    session->host = std::move(*host);
  }
  session->touch();
  std::lock_guard<std::mutex> lock(sessionsMutex);
  // Another request may have created the same id meanwhile; the first one wins.
  auto [it, inserted] = sessions.emplace(id, session);
  created = inserted;
  if (inserted)
    metrics.sessionsOpened++;
  return it->second;
}

std::optional<ObjectBlob> ExecutorServer::Impl::findObject(llvm::StringRef sha) {
  std::lock_guard<std::mutex> lock(objectsMutex);
  auto it = objects.find(sha.str());
  if (it == objects.end())
    return std::nullopt;
  return it->second.blob;
}

llvm::Error ExecutorServer::Impl::attach(Session &session, llvm::StringRef sha) {
  std::unique_lock<std::mutex> working(session.workerMutex, std::defer_lock);
  if (isolated()) {
    working.lock();
  } else if (session.host->hasObject(sha)) {
    // Every launch passes here: an object already loaded costs one shared lock.
    return llvm::Error::success();
  }
  std::unique_lock<std::mutex> attaching(session.attachMutex);
  if (session.closed)
    return makeWireError("unknown_session", "session '" + session.id + "' was closed");
  if (session.attached.count(sha.str()))
    return llvm::Error::success();
  std::optional<ObjectBlob> blob;
  {
    // The hold is taken before loading, so the store cannot drop the bytes meanwhile.
    std::lock_guard<std::mutex> lock(objectsMutex);
    auto it = objects.find(sha.str());
    if (it == objects.end())
      return makeWireError("unknown_object", "object " + sha + " is not on this executor");
    it->second.holders++;
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
    loaded = makeWireError("invalid_object",
                           "loading object " + sha + ": " + llvm::toString(std::move(error)));
  }
  if (!attaching.owns_lock())
    attaching.lock();
  if (!loaded && session.closed)
    loaded = makeWireError("unknown_session", "session '" + session.id + "' was closed");
  if (loaded) {
    dropHold(sha);
    return loaded;
  }
  session.attached.insert(sha.str());
  return llvm::Error::success();
}

bool ExecutorServer::Impl::detach(Session &session, llvm::StringRef sha) {
  std::unique_lock<std::mutex> working(session.workerMutex, std::defer_lock);
  if (isolated())
    working.lock();
  std::lock_guard<std::mutex> attaching(session.attachMutex);
  if (!session.attached.erase(sha.str()))
    return false;
  // Unloading cannot fail in a way the client could act on.
  if (!isolated()) {
    // Launches of the object still running keep its code until they return (ObjectHost).
    llvm::consumeError(session.host->removeObject(sha));
  } else if (session.linked.erase(sha.str()) && session.worker && session.worker->alive()) {
    MessageWriter remove(MessageKind::RemoveObject);
    remove.str(sha);
    llvm::consumeError(ask(session, *session.worker, remove.view(), {},
                           Clock::now() + options.launchTimeout, ("unloading object " + sha).str())
                           .takeError());
  }
  dropHold(sha);
  return true;
}

void ExecutorServer::Impl::releaseHolds(Session &session) {
  std::lock_guard<std::mutex> attaching(session.attachMutex);
  session.closed = true;
  for (const std::string &sha : session.attached)
    dropHold(sha);
  session.attached.clear();
}

void ExecutorServer::Impl::dropHold(llvm::StringRef sha) {
  std::lock_guard<std::mutex> lock(objectsMutex);
  auto it = objects.find(sha.str());
  if (it == objects.end() || it->second.holders == 0)
    return;
  attachments--;
  if (--it->second.holders == 0)
    it->second.unheldSince = Clock::now();
}

void ExecutorServer::Impl::dropUnheldObjects() {
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

void ExecutorServer::Impl::endSessions(std::vector<std::shared_ptr<Session>> &ending,
                                       EndReason reason) {
  for (const std::shared_ptr<Session> &session : ending) {
    releaseHolds(*session);
    // A request still running on the worker fails at once instead of holding it.
    session->endWorker(reason);
  }
}

llvm::Expected<Clock::time_point> ExecutorServer::Impl::deadlineFor(const httplib::Request &req) {
  auto limit = options.launchTimeout;
  if (req.has_header(wire::kDeadlineHeader)) {
    uint64_t ms = 0;
    if (llvm::StringRef(req.get_header_value(wire::kDeadlineHeader)).getAsInteger(10, ms) ||
        ms == 0)
      return makeWireError("bad_request", "header " + llvm::Twine(wire::kDeadlineHeader) +
                                              " must give a deadline in milliseconds (> 0)");
    limit = std::min<std::chrono::milliseconds>(limit, std::chrono::milliseconds(ms));
  }
  return Clock::now() + limit;
}

llvm::Expected<std::shared_ptr<WorkerProcess>>
ExecutorServer::Impl::liveWorker(Session &s, Clock::time_point deadline) {
  if (s.worker && s.worker->alive())
    return s.worker;
  llvm::Expected<std::unique_ptr<WorkerProcess>> fresh = pool->take();
  if (!fresh)
    return fresh.takeError();
  std::shared_ptr<WorkerProcess> worker = std::move(*fresh);
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    s.worker = worker;
  }
  s.linked.clear();
  std::vector<std::string> objectsToLink;
  {
    std::lock_guard<std::mutex> attaching(s.attachMutex);
    objectsToLink.assign(s.attached.begin(), s.attached.end());
  }
  for (const std::string &sha : objectsToLink)
    if (llvm::Error error = linkInto(s, *worker, sha, deadline))
      return std::move(error);
  return worker;
}

llvm::Error ExecutorServer::Impl::linkInto(Session &s, WorkerProcess &worker, llvm::StringRef sha,
                                           Clock::time_point deadline) {
  std::optional<ObjectBlob> blob = findObject(sha);
  if (!blob)
    return makeWireError("unknown_object", "object " + sha + " is not on this executor");
  const std::string &bytes = *blob->bytes;
  MessageWriter add(MessageKind::AddObject);
  add.str(sha).u64(bytes.size());
  SharedBuffer shared;
  std::vector<int> fds;
  if (bytes.size() <= executor::kInlineBytes) {
    add.u64(1).str(bytes);
  } else {
    llvm::Expected<SharedBuffer> buffer = SharedBuffer::create(bytes.size(), "courier-object");
    if (!buffer)
      return makeWireError("internal", "sharing object " + sha + " with the session's worker: " +
                                           llvm::toString(buffer.takeError()));
    shared = std::move(*buffer);
    std::memcpy(shared.data(), bytes.data(), bytes.size());
    add.u64(0);
    fds.push_back(shared.fd());
  }
  llvm::Expected<Message> reply =
      ask(s, worker, add.view(), fds, deadline, ("loading object " + sha).str());
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
    return makeWireError("invalid_object",
                         "loading object " + sha + ": the worker's description is malformed");
  s.infos[sha.str()] = std::move(info);
  s.linked.insert(sha.str());
  return llvm::Error::success();
}

llvm::Expected<Message> ExecutorServer::Impl::ask(Session &s, WorkerProcess &worker,
                                                  llvm::StringRef bytes, llvm::ArrayRef<int> fds,
                                                  Clock::time_point deadline,
                                                  llvm::StringRef what) {
  llvm::Expected<Message> reply = worker.request(bytes, fds, deadline, what);
  if (reply || worker.alive())
    return reply;
  const executor::WorkerDeath &death = worker.death();
  // The executor ended it on purpose (close, shutdown): not a restart.
  if (death.cause == "closed" || death.cause == "shutdown")
    return reply;
  std::string cause = death.cause == "deadline" ? "deadline"
                      : death.signal.empty()    ? "exit"
                                                : "crash";
  {
    std::lock_guard<std::mutex> lock(metrics.labelledMutex);
    metrics.restartsByCause[cause]++;
    if (!death.signal.empty())
      metrics.crashesBySignal[death.signal]++;
  }
  metrics.workersRestarted++;
  if (cause == "deadline")
    metrics.deadlineKills++;
  llvm::errs() << llvm::formatv("courier-executor: worker {0} of session '{1}' died: {2} in {3}\n",
                                worker.pid(), s.id, death.cause, what);
  {
    std::lock_guard<std::mutex> lock(s.slotMutex);
    if (s.worker.get() == &worker)
      s.worker.reset();
  }
  s.linked.clear();
  return reply;
}

void ExecutorServer::Impl::reapIdleSessions() {
  auto interval = std::min(std::chrono::duration_cast<Clock::duration>(options.idleTimeout),
                           std::chrono::duration_cast<Clock::duration>(options.objectGrace)) /
                  4;
  interval =
      std::clamp<Clock::duration>(interval, std::chrono::milliseconds(50), std::chrono::seconds(5));
  while (!service.waitForStop(interval)) {
    int64_t cutoff = (Clock::now() - options.idleTimeout).time_since_epoch().count();
    std::vector<std::shared_ptr<Session>> expired;
    {
      std::lock_guard<std::mutex> sessionsLock(sessionsMutex);
      for (auto it = sessions.begin(); it != sessions.end();) {
        if (it->second->lastUsed.load() < cutoff) {
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

llvm::Error ExecutorServer::Impl::health(httplib::Response &res) {
  json features = json::array();
  llvm::StringMap<bool> hostFeatures = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> enabled;
  for (const auto &f : hostFeatures)
    if (f.second)
      enabled.push_back(f.first().str());
  std::sort(enabled.begin(), enabled.end());
  for (std::string &f : enabled)
    features.push_back(std::move(f));
  size_t sessionCount, objectCount;
  {
    std::lock_guard<std::mutex> lock(sessionsMutex);
    sessionCount = sessions.size();
  }
  {
    std::lock_guard<std::mutex> lock(objectsMutex);
    objectCount = objects.size();
  }
  json body = {{"status", "ok"},
               {"version", COURIER_VERSION},
               {"protocol", "v1"},
               {"triple", llvm::sys::getProcessTriple()},
               {"cpu", llvm::sys::getHostCPUName().str()},
               {"features", features},
               {"sessions", sessionCount},
               {"objects", objectCount},
               {"isolation", isolated() ? "process" : "none"}};
  int status = 200;
  if (isolated()) {
    body["workers"] = {{"live", executor::WorkerPool::live()},
                       {"warm", pool->warmCount()},
                       {"restarted", metrics.workersRestarted.load()}};
    // A balancer must stop sending sessions here if none could run.
    if (!pool->healthy()) {
      body["status"] = "unhealthy";
      body["reason"] = "cannot start worker processes: " + pool->lastError();
      status = 503;
    }
  }
  sendJson(res, status, body);
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::putObject(const httplib::Request &req, httplib::Response &res,
                                            const httplib::ContentReader &reader) {
  std::string sha = req.matches[1];
  auto bytes = std::make_shared<std::string>();
  bytes->reserve(initialReserve(req));
  if (!reader([&](const char *data, size_t size) {
        bytes->append(data, size);
        return true;
      }))
    return readFailure(res);
  std::string actual = wire::sha256Hex(*bytes);
  if (actual != sha)
    return makeWireError("hash_mismatch", "object body hashes to " + actual + ", not " + sha);
  bool stored = false;
  {
    std::lock_guard<std::mutex> lock(objectsMutex);
    auto it = objects.find(sha);
    if (it == objects.end()) {
      objectBytes += bytes->size();
      objects.emplace(sha, StoredObject{ObjectBlob{sha, std::move(bytes)}, 0, Clock::now()});
      stored = true;
    } else if (it->second.holders == 0) {
      // An upload announces an attach to come: the grace period starts again.
      it->second.unheldSince = Clock::now();
    }
  }
  if (stored)
    metrics.objectUploads++;
  sendJson(res, stored ? 201 : 200, {{"sha256", sha}, {"stored", stored}});
  return llvm::Error::success();
}

namespace {
constexpr uint64_t kInputAlignment = 64;
uint64_t alignInput(uint64_t n) { return (n + kInputAlignment - 1) & ~(kInputAlignment - 1); }

/// Where a launch's input bytes are received: without isolation one buffer per tensor; with
/// isolation one area the worker reads in place (shared memory when large).
struct InputArea {
  std::vector<MallocBuffer> buffers;
  std::string inlineBytes;
  SharedBuffer shared;
  std::vector<uint64_t> offsets; ///< Per input, into inlineBytes or shared.
  uint64_t total = 0;
  char *base() { return shared.data() ? shared.data() : inlineBytes.data(); }
};

/// A launch's results as the worker sent them: packed tensors, inline or in shared memory.
struct WorkerResults {
  std::string inlineBytes;
  SharedBuffer shared;
  std::vector<TensorView> views;
};

/// Reads the worker's reply to a launch, which is untrusted: every shape, offset and size
/// is checked against what the caller asked for and what the payload holds.
llvm::Expected<std::shared_ptr<WorkerResults>>
decodeWorkerResults(Message &reply, llvm::ArrayRef<ResultSpec> expected, llvm::StringRef entry,
                    uint64_t maxBytes) {
  MessageReader in(reply.bytes);
  auto broken = [&](const llvm::Twine &what) {
    return makeWireError("launch_failed", "'" + entry +
                                              "' returned results the executor cannot "
                                              "use: " +
                                              what);
  };
  auto results = std::make_shared<WorkerResults>();
  uint64_t count = in.count(24);
  if (count != expected.size())
    return broken(llvm::formatv("{0} results, expected {1}", count, expected.size()));
  struct Shape {
    int64_t elemSize;
    std::vector<int64_t> sizes;
    uint64_t offset, bytes;
  };
  std::vector<Shape> shapes(count);
  for (size_t i = 0; i < count; ++i) {
    Shape &shape = shapes[i];
    shape.elemSize = in.i64();
    uint64_t rank = in.count(8);
    if (!in.ok() || static_cast<int64_t>(rank) != expected[i].rank ||
        shape.elemSize != expected[i].elemSize)
      return broken(
          llvm::formatv("result {0} does not have the declared rank and element size", i));
    shape.sizes.resize(rank);
    for (int64_t &size : shape.sizes)
      size = in.i64();
    shape.offset = in.u64();
    llvm::Expected<uint64_t> bytes = wire::packedBytes(shape.elemSize, shape.sizes);
    if (!bytes)
      return broken(llvm::toString(bytes.takeError()));
    shape.bytes = *bytes;
  }
  uint64_t total = in.u64();
  bool inlined = in.u64() != 0;
  if (!in.ok() || total > maxBytes)
    return broken(llvm::formatv("{0} bytes of results", total));
  if (inlined) {
    results->inlineBytes = in.str().str();
    if (!in.ok() || results->inlineBytes.size() != total)
      return broken("a malformed reply");
  } else {
    if (reply.fds.size() != 1)
      return broken("no shared buffer");
    llvm::Expected<SharedBuffer> mapped = SharedBuffer::map(std::move(reply.fds[0]), total);
    if (!mapped)
      return broken(llvm::toString(mapped.takeError()));
    results->shared = std::move(*mapped);
  }
  const char *base = inlined ? results->inlineBytes.data() : results->shared.data();
  for (const Shape &shape : shapes) {
    if (shape.offset > total || total - shape.offset < shape.bytes)
      return broken("a result outside the reply");
    results->views.push_back(TensorView{base + shape.offset, shape.elemSize, shape.sizes,
                                        wire::packedStrides(shape.sizes)});
  }
  return results;
}
} // namespace

llvm::Error ExecutorServer::Impl::launch(const httplib::Request &req, httplib::Response &res,
                                         const httplib::ContentReader &reader) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session) {
    drain(reader);
    return session.takeError();
  }
  Session &s = **session;
  llvm::Expected<Clock::time_point> deadline = deadlineFor(req);
  if (!deadline) {
    drain(reader);
    return deadline.takeError();
  }
  wire::LaunchRequest request;
  InputArea area;
  wire::FrameReader frame(
      [&](llvm::StringRef line) -> llvm::Expected<std::vector<wire::Destination>> {
        llvm::Expected<wire::LaunchRequest> decoded = wire::decodeLaunchRequest(line);
        if (!decoded)
          return decoded.takeError();
        request = std::move(*decoded);
        if (llvm::Error error = attach(s, request.object))
          return std::move(error);
        uint64_t total = 0;
        for (const wire::TensorHeader &t : request.inputs) {
          if (t.bytes > options.maxBodyBytes - total)
            return makeWireError("payload_too_large", "launch inputs exceed the executor's limit");
          total += t.bytes;
        }
        // Checked before allocating, so a header cannot make us reserve what the body
        // does not bring. A chunked body may come with a Content-Length its header line
        // alone exceeds: say so rather than subtract past zero.
        uint64_t length = contentLength(req);
        if (req.has_header("Content-Length") && length != line.size() + 1 + total) {
          if (length < line.size() + 1)
            return makeWireError("bad_frame",
                                 llvm::formatv("the Content-Length of {0} bytes is shorter than "
                                               "the frame's header line ({1} bytes)",
                                               length, line.size() + 1));
          return makeWireError("bad_frame",
                               llvm::formatv("the frame header declares {0} tensor bytes, the "
                                             "body holds {1}",
                                             total, length - line.size() - 1));
        }
        std::vector<wire::Destination> destinations;
        if (isolated()) {
          // Each input starts aligned, as a kernel may assume of its buffers.
          for (const wire::TensorHeader &t : request.inputs) {
            area.offsets.push_back(area.total);
            area.total = alignInput(area.total + t.bytes);
          }
          if (area.total <= executor::kInlineBytes) {
            area.inlineBytes.assign(area.total, '\0');
          } else {
            llvm::Expected<SharedBuffer> shared =
                SharedBuffer::create(area.total, "courier-inputs");
            if (!shared)
              return makeWireError(
                  "payload_too_large",
                  "cannot allocate " + llvm::Twine(area.total) +
                      " bytes for launch inputs: " + llvm::toString(shared.takeError()));
            area.shared = std::move(*shared);
          }
          for (size_t i = 0; i < request.inputs.size(); ++i)
            destinations.push_back({area.base() + area.offsets[i], request.inputs[i].bytes});
          return destinations;
        }
        for (const wire::TensorHeader &t : request.inputs) {
          char *data = static_cast<char *>(wire::allocateTensorBuffer(t.bytes));
          if (!data)
            return makeWireError("payload_too_large", "cannot allocate " + llvm::Twine(t.bytes) +
                                                          " bytes for a launch input");
          area.buffers.emplace_back(data);
          destinations.push_back({data, t.bytes});
        }
        return destinations;
      });
  // After a framing error keep reading (and discarding) so the connection stays usable.
  llvm::Error frameError = llvm::Error::success();
  bool failed = false;
  if (!reader([&](const char *data, size_t size) {
        if (!failed) {
          frameError = frame.feed(data, size);
          failed = static_cast<bool>(frameError);
        }
        return true;
      })) {
    llvm::consumeError(std::move(frameError));
    return readFailure(res);
  }
  if (failed)
    return frameError;
  if (llvm::Error error = frame.finish())
    return error;

  std::string what = "'" + request.entry + "'";
  auto started = Clock::now();
  std::vector<TensorView> views;
  // Keeps whatever the views read from alive until the reply has been sent.
  std::shared_ptr<void> keepAlive;
  if (isolated()) {
    MessageWriter launch(MessageKind::Launch);
    launch.str(request.object).str(request.entry).u64(request.inputs.size());
    for (size_t i = 0; i < request.inputs.size(); ++i) {
      const wire::TensorHeader &t = request.inputs[i];
      launch.i64(t.elemSize).u64(t.sizes.size());
      for (int64_t size : t.sizes)
        launch.i64(size);
      launch.u64(area.offsets[i]).u64(t.bytes);
    }
    launch.u64(request.results.size());
    for (const ResultSpec &r : request.results)
      launch.i64(r.rank).i64(r.elemSize);
    launch.u64(area.total);
    std::vector<int> fds;
    if (area.shared.data()) {
      launch.u64(0);
      fds.push_back(area.shared.fd());
    } else {
      launch.u64(1).str(area.inlineBytes);
    }
    llvm::Expected<Message> reply = [&]() -> llvm::Expected<Message> {
      std::lock_guard<std::mutex> working(s.workerMutex);
      llvm::Expected<std::shared_ptr<WorkerProcess>> worker = liveWorker(s, *deadline);
      if (!worker)
        return worker.takeError();
      if (!s.linked.count(request.object))
        if (llvm::Error error = linkInto(s, **worker, request.object, *deadline))
          return std::move(error);
      return ask(s, **worker, launch.view(), fds, *deadline, what);
    }();
    metrics.launchSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
    metrics.launches++;
    if (!reply) {
      metrics.launchFailures++;
      return reply.takeError();
    }
    area = InputArea(); // Inputs are no longer needed while the reply streams.
    llvm::Expected<std::shared_ptr<WorkerResults>> results =
        decodeWorkerResults(*reply, request.results, request.entry, options.maxBodyBytes);
    if (!results) {
      metrics.launchFailures++;
      return results.takeError();
    }
    views = (*results)->views;
    keepAlive = std::move(*results);
  } else {
    std::vector<TensorView> inputs;
    for (size_t i = 0; i < request.inputs.size(); ++i) {
      const wire::TensorHeader &t = request.inputs[i];
      inputs.push_back(
          TensorView{area.buffers[i].get(), t.elemSize, t.sizes, wire::packedStrides(t.sizes)});
    }
    llvm::Expected<std::vector<OwnedTensor>> results =
        s.host->launch(request.object, request.entry, inputs, request.results);
    metrics.launchSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
    metrics.launches++;
    if (!results) {
      metrics.launchFailures++;
      return classifyHostError(results.takeError(), "unknown_entry", "launch_failed",
                               "launching '" + request.entry + "'");
    }
    if (results->size() != request.results.size()) {
      metrics.launchFailures++;
      return makeWireError("launch_failed",
                           llvm::formatv("'{0}' returned {1} results, expected {2}", request.entry,
                                         results->size(), request.results.size()));
    }
    area = InputArea(); // Inputs are no longer needed while the reply streams.
    auto tensors = std::make_shared<std::vector<OwnedTensor>>(std::move(*results));
    for (const OwnedTensor &t : *tensors)
      views.push_back(TensorView{t.data, t.elemSize, t.sizes, t.strides});
    keepAlive = std::move(tensors);
  }

  // The reply streams straight from the result buffers, released once sent.
  struct Reply {
    std::shared_ptr<void> keepAlive;
    std::unique_ptr<wire::FrameWriter> writer;
  };
  auto reply = std::make_shared<Reply>();
  reply->keepAlive = std::move(keepAlive);
  wire::LaunchReply header{wire::describePacked(views)};
  reply->writer =
      std::make_unique<wire::FrameWriter>(wire::encodeLaunchReply(header), std::move(views));
  res.status = 200;
  streamFrame(res, std::shared_ptr<wire::FrameWriter>(reply, reply->writer.get()));
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::launchAsync(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session)
    return session.takeError();
  llvm::Expected<Clock::time_point> deadline = deadlineFor(req);
  if (!deadline)
    return deadline.takeError();
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("object") || !body["object"].is_string() ||
      !body.contains("entry") || !body["entry"].is_string())
    return makeWireError("bad_request", "expected {\"object\": sha256, \"entry\": name}");
  std::string object = body["object"], entry = body["entry"];
  if (!wire::isSha256(object))
    return makeWireError("bad_request", "'object' must be a lowercase hex SHA-256");
  if (llvm::Error error = attach(**session, object))
    return error;
  Session &s = **session;
  // Refused now rather than at await: the client learns of its mistake where it made it.
  bool known = true;
  if (isolated()) {
    std::lock_guard<std::mutex> working(s.workerMutex);
    auto info = s.infos.find(object);
    known = info != s.infos.end() && info->second.hasEntry(entry);
    // An async entry takes nothing and returns nothing; its table must say so.
    if (known)
      if (llvm::Error error = transport::checkLaunch(info->second, entry, {}, {}))
        return error;
  } else {
    known = s.host->hasEntry(object, entry);
  }
  if (!known)
    return makeWireError("unknown_entry",
                         "launching '" + entry + "': no entry '" + entry + "' in object " + object);
  Metrics *m = &metrics;
  auto outcome = std::make_shared<std::promise<AsyncOutcome>>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(s.launchesMutex);
    if (s.launches.size() >= wire::kMaxPendingLaunches)
      return makeWireError(
          "too_many_launches",
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
    auto [code, message] = executor::describeError(std::move(error), "launch_failed");
    outcome->set_value({code, message});
  };
  if (isolated()) {
    // The task holds the session only while it runs: a close ends the worker, which ends
    // the task at once, and an unawaited session is never kept alive by its launches.
    std::weak_ptr<Session> weak = *session;
    Clock::time_point until = *deadline;
    launchPool->enqueue([this, weak, object, entry, m, until, finish] {
      std::shared_ptr<Session> held = weak.lock();
      if (!held) {
        finish(makeWireError("unknown_session",
                             "the session was closed before '" + entry + "' started"));
        return;
      }
      auto started = Clock::now();
      MessageWriter launch(MessageKind::Launch);
      launch.str(object).str(entry).u64(0).u64(0).u64(0).u64(1).str("");
      llvm::Expected<Message> reply = [&]() -> llvm::Expected<Message> {
        std::lock_guard<std::mutex> working(held->workerMutex);
        llvm::Expected<std::shared_ptr<WorkerProcess>> worker = liveWorker(*held, until);
        if (!worker)
          return worker.takeError();
        if (!held->linked.count(object))
          if (llvm::Error error = linkInto(*held, **worker, object, until))
            return std::move(error);
        return ask(*held, **worker, launch.view(), {}, until, "'" + entry + "'");
      }();
      m->launchSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
      m->launches++;
      finish(reply ? llvm::Error::success() : reply.takeError());
    });
  } else {
    // The task shares the host, not the session: a session that closes or expires
    // meanwhile goes at once (nothing waits for a kernel that may never return), and the
    // host with the object's code stays until the task is done. Capturing the session
    // would make a cycle through `launches` that keeps an unawaited session alive forever.
    launchPool->enqueue([host = s.host, object, entry, m, finish] {
      auto started = Clock::now();
      llvm::Expected<std::vector<OwnedTensor>> results = host->launch(object, entry, {}, {});
      m->launchSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
      m->launches++;
      finish(results ? llvm::Error::success()
                     : classifyHostError(results.takeError(), "unknown_entry", "launch_failed",
                                         "launching '" + entry + "'"));
    });
  }
  sendJson(res, 202, {{"launch", id}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::await(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session)
    return session.takeError();
  llvm::Expected<Clock::time_point> deadline = deadlineFor(req);
  if (!deadline)
    return deadline.takeError();
  uint64_t id = 0;
  if (llvm::StringRef(req.matches[2].str()).getAsInteger(10, id))
    return makeWireError("bad_request", "launch id must be a number");
  std::shared_future<AsyncOutcome> done;
  {
    std::lock_guard<std::mutex> lock((*session)->launchesMutex);
    auto it = (*session)->launches.find(id);
    if (it == (*session)->launches.end())
      return makeWireError("unknown_launch", "no pending launch " + llvm::Twine(id) +
                                                 " in session '" + (*session)->id + "'");
    done = std::move(it->second);
    (*session)->launches.erase(it);
  }
  if (done.wait_until(*deadline) != std::future_status::ready) {
    if (!isolated())
      return makeWireError("deadline_exceeded",
                           llvm::formatv("launch {0} is still running; without isolation the "
                                         "executor cannot end it",
                                         id));
    // Ending the worker ends the launch; its task then reports how it ended.
    (*session)->endWorker(EndReason::Deadline);
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready)
      return makeWireError("deadline_exceeded",
                           llvm::formatv("launch {0} ran past its deadline", id));
  }
  const AsyncOutcome &outcome = done.get();
  (*session)->touch();
  if (!outcome.code.empty())
    return makeWireError(outcome.code, outcome.message);
  sendJson(res, 200, {{"launch", id}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::call(const httplib::Request &req, httplib::Response &res,
                                       const httplib::ContentReader &reader) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session) {
    drain(reader);
    return session.takeError();
  }
  llvm::Expected<Clock::time_point> deadline = deadlineFor(req);
  if (!deadline) {
    drain(reader);
    return deadline.takeError();
  }
  std::string symbol = req.matches[2];
  uint64_t outputSize = 0;
  bool badSize =
      llvm::StringRef(req.get_header_value(wire::kOutputSizeHeader)).getAsInteger(10, outputSize);
  if (!badSize && outputSize > options.maxBodyBytes) {
    drain(reader);
    return makeWireError("payload_too_large", "requested output exceeds the executor's limit");
  }
  std::string input;
  input.reserve(initialReserve(req));
  if (!reader([&](const char *data, size_t size) {
        input.append(data, size);
        return true;
      }))
    return readFailure(res);
  if (badSize)
    return makeWireError("bad_request", "header " + llvm::Twine(wire::kOutputSizeHeader) +
                                            " must give the reply size in bytes");
  metrics.calls++;
  Session &s = **session;
  std::string output;
  if (isolated()) {
    MessageWriter call(MessageKind::Call);
    call.str(symbol).u64(outputSize).u64(input.size());
    SharedBuffer shared;
    std::vector<int> fds;
    if (input.size() <= executor::kInlineBytes) {
      call.u64(1).str(input);
    } else {
      llvm::Expected<SharedBuffer> buffer = SharedBuffer::create(input.size(), "courier-call");
      if (!buffer)
        return makeWireError("payload_too_large", "cannot share the call's input: " +
                                                      llvm::toString(buffer.takeError()));
      shared = std::move(*buffer);
      std::memcpy(shared.data(), input.data(), input.size());
      call.u64(0);
      fds.push_back(shared.fd());
    }
    llvm::Expected<Message> reply = [&]() -> llvm::Expected<Message> {
      std::lock_guard<std::mutex> working(s.workerMutex);
      llvm::Expected<std::shared_ptr<WorkerProcess>> worker = liveWorker(s, *deadline);
      if (!worker)
        return worker.takeError();
      return ask(s, **worker, call.view(), fds, *deadline, "'" + symbol + "'");
    }();
    if (!reply) {
      metrics.callFailures++;
      return reply.takeError();
    }
    MessageReader in(reply->bytes);
    uint64_t size = in.u64();
    bool inlined = in.u64() != 0;
    if (!in.ok() || size != outputSize) {
      metrics.callFailures++;
      return makeWireError("call_failed",
                           llvm::formatv("'{0}' produced {1} bytes, the caller expects {2}", symbol,
                                         size, outputSize));
    }
    if (inlined) {
      output = in.str().str();
      if (!in.ok() || output.size() != size)
        return makeWireError("call_failed", "'" + symbol + "' sent a malformed reply");
    } else {
      if (reply->fds.size() != 1)
        return makeWireError("call_failed", "'" + symbol + "' sent a malformed reply");
      llvm::Expected<SharedBuffer> mapped = SharedBuffer::map(std::move(reply->fds[0]), size);
      if (!mapped)
        return makeWireError("call_failed", "reading the reply of '" + symbol +
                                                "': " + llvm::toString(mapped.takeError()));
      output.assign(mapped->data(), size);
    }
  } else {
    llvm::Expected<std::string> produced = s.host->call(symbol, input, outputSize);
    if (!produced) {
      metrics.callFailures++;
      return classifyHostError(produced.takeError(), "unknown_symbol", "call_failed",
                               "calling '" + symbol + "'");
    }
    output = std::move(*produced);
  }
  if (output.size() != outputSize) {
    metrics.callFailures++;
    return makeWireError("call_failed",
                         llvm::formatv("'{0}' produced {1} bytes, the caller expects {2}", symbol,
                                       output.size(), outputSize));
  }
  res.status = 200;
  // The reply is already in memory: moved in whole. (A content provider of length 0 is
  // httplib's "length unknown" and would stream forever.)
  res.set_content(std::move(output), wire::kBytesContentType);
  return llvm::Error::success();
}

std::string ExecutorServer::Impl::renderMetrics() {
  std::string out;
  out += "# HELP courier_requests_total HTTP requests served, by status.\n"
         "# TYPE courier_requests_total counter\n";
  for (size_t status = 0; status < metrics.requestsByStatus.size(); ++status)
    if (uint64_t n = metrics.requestsByStatus[status].load())
      out += llvm::formatv("courier_requests_total{{status=\"{0}\"} {1}\n", status, n).str();
  appendPrometheusCounter(out, "courier_launches_total", "Kernel launches run.", metrics.launches);
  appendPrometheusCounter(out, "courier_launch_failures_total", "Kernel launches that failed.",
                          metrics.launchFailures);
  appendPrometheusCounter(out, "courier_calls_total", "Calls run.", metrics.calls);
  appendPrometheusCounter(out, "courier_call_failures_total", "Calls that failed.",
                          metrics.callFailures);
  appendPrometheusCounter(out, "courier_received_bytes_total", "Request body bytes received.",
                          service.requestStats().bytesIn);
  appendPrometheusCounter(out, "courier_sent_bytes_total", "Response body bytes sent.",
                          service.requestStats().bytesOut);
  appendPrometheusCounter(out, "courier_object_uploads_total", "Objects stored from an upload.",
                          metrics.objectUploads);
  appendPrometheusCounter(
      out, "courier_objects_dropped_total",
      "Objects dropped from the store after no session held them for the grace period.",
      metrics.objectsDropped);
  appendPrometheusCounter(out, "courier_sessions_opened_total", "Sessions created.",
                          metrics.sessionsOpened);
  appendPrometheusCounter(out, "courier_sessions_expired_total", "Sessions closed for being idle.",
                          metrics.sessionsExpired);
  {
    std::lock_guard<std::mutex> lock(sessionsMutex);
    appendPrometheusGauge(out, "courier_sessions", "Open sessions.", sessions.size());
  }
  {
    std::lock_guard<std::mutex> lock(objectsMutex);
    appendPrometheusGauge(out, "courier_objects", "Objects held.", objects.size());
    appendPrometheusGauge(out, "courier_object_bytes", "Bytes of objects held.", objectBytes);
    appendPrometheusGauge(out, "courier_attached_objects",
                          "Objects loaded in sessions, once per session holding one.", attachments);
  }
  service.requestStats().seconds.render(out, "courier_request_duration_seconds",
                                        "Time from request line to response written.");
  metrics.launchSeconds.render(out, "courier_launch_duration_seconds",
                               "Time spent in kernel entries.");
  if (isolated()) {
    appendPrometheusGauge(out, "courier_workers", "Worker processes running, warm or serving.",
                          executor::WorkerPool::live());
    appendPrometheusGauge(out, "courier_workers_warm", "Worker processes started ahead of need.",
                          pool->warmCount());
    appendPrometheusCounter(out, "courier_deadline_kills_total",
                            "Workers ended because a launch ran past its deadline.",
                            metrics.deadlineKills);
    std::lock_guard<std::mutex> lock(metrics.labelledMutex);
    out += "# HELP courier_worker_restarts_total Session workers that died and were replaced, by "
           "cause.\n# TYPE courier_worker_restarts_total counter\n";
    for (const auto &[cause, n] : metrics.restartsByCause)
      out += llvm::formatv("courier_worker_restarts_total{{cause=\"{0}\"} {1}\n", cause, n).str();
    out += "# HELP courier_kernel_crashes_total Workers killed by a signal while running shipped "
           "code, by signal.\n# TYPE courier_kernel_crashes_total counter\n";
    for (const auto &[signal, n] : metrics.crashesBySignal)
      out += llvm::formatv("courier_kernel_crashes_total{{signal=\"{0}\"} {1}\n", signal, n).str();
  }
  return out;
}

void ExecutorServer::Impl::installRoutes() {
  const std::string session = R"(/v1/sessions/([A-Za-z0-9_-]{1,64}))";
  const std::string sha = R"(([0-9a-f]{64}))";

  httplib::Server &server = service.server();
  server.Get("/v1/health", service.wrap([this](const httplib::Request &, httplib::Response &res) {
    return health(res);
  }));
  server.Get("/metrics", service.wrap([this](const httplib::Request &, httplib::Response &res) {
    res.set_content(renderMetrics(), "text/plain; version=0.0.4");
    return llvm::Error::success();
  }));

  // GET (and HEAD, which httplib routes to GET) answers "do you have this object?".
  server.Get("/v1/objects/" + sha, service.wrap([this](const httplib::Request &req,
                                                       httplib::Response &res) -> llvm::Error {
    std::optional<ObjectBlob> blob = findObject(req.matches[1].str());
    if (!blob)
      return makeWireError("unknown_object",
                           "object " + req.matches[1].str() + " is not on this executor");
    sendJson(res, 200, {{"sha256", blob->sha256}, {"size", blob->bytes->size()}});
    return llvm::Error::success();
  }));
  server.Put("/v1/objects/" + sha,
             service.wrap([this](const httplib::Request &req, httplib::Response &res,
                                 const httplib::ContentReader &reader) {
               return putObject(req, res, reader);
             }));

  server.Post("/v1/sessions",
              service.wrap([this](const httplib::Request &, httplib::Response &res) -> llvm::Error {
                bool created = false;
                llvm::Expected<std::shared_ptr<Session>> s = createSession(randomId(), created);
                if (!s)
                  return s.takeError();
                res.set_header(wire::kSessionHeader, (*s)->id);
                sendJson(res, 201, {{"session", (*s)->id}});
                return llvm::Error::success();
              }));
  // A client re-creates a lost session under its old id, so a balancer hashing on the id
  // keeps sending it to the same place.
  server.Put(session, service.wrap([this](const httplib::Request &req,
                                          httplib::Response &res) -> llvm::Error {
    bool created = false;
    llvm::Expected<std::shared_ptr<Session>> s = createSession(req.matches[1].str(), created);
    if (!s)
      return s.takeError();
    res.set_header(wire::kSessionHeader, (*s)->id);
    sendJson(res, created ? 201 : 200, {{"session", (*s)->id}});
    return llvm::Error::success();
  }));
  server.Get(session, service.wrap([this](const httplib::Request &req,
                                          httplib::Response &res) -> llvm::Error {
    llvm::Expected<std::shared_ptr<Session>> s = findSession(req);
    if (!s)
      return s.takeError();
    sendJson(res, 200, {{"session", (*s)->id}});
    return llvm::Error::success();
  }));
  server.Delete(session, service.wrap([this](const httplib::Request &req,
                                             httplib::Response &res) -> llvm::Error {
    std::shared_ptr<Session> closed;
    {
      std::lock_guard<std::mutex> lock(sessionsMutex);
      auto it = sessions.find(req.matches[1].str());
      if (it == sessions.end())
        return makeWireError("unknown_session",
                             "no session '" + req.matches[1].str() + "' on this executor");
      closed = std::move(it->second);
      sessions.erase(it);
    }
    std::vector<std::shared_ptr<Session>> ending{std::move(closed)};
    endSessions(ending, EndReason::Closed);
    res.status = 204;
    return llvm::Error::success();
  }));
  server.Post(
      session + "/objects/" + sha,
      service.wrap([this](const httplib::Request &req, httplib::Response &res) -> llvm::Error {
        llvm::Expected<std::shared_ptr<Session>> s = findSession(req);
        if (!s)
          return s.takeError();
        if (llvm::Error error = attach(**s, req.matches[2].str()))
          return error;
        sendJson(res, 200, {{"session", (*s)->id}, {"sha256", req.matches[2].str()}});
        return llvm::Error::success();
      }));
  // Releasing an object the session does not hold is no error ("detached": false): a
  // release may race with a restart that lost the session's objects.
  server.Delete(
      session + "/objects/" + sha,
      service.wrap([this](const httplib::Request &req, httplib::Response &res) -> llvm::Error {
        llvm::Expected<std::shared_ptr<Session>> s = findSession(req);
        if (!s)
          return s.takeError();
        bool detached = detach(**s, req.matches[2].str());
        sendJson(res, 200,
                 {{"session", (*s)->id}, {"sha256", req.matches[2].str()}, {"detached", detached}});
        return llvm::Error::success();
      }));
  server.Post(session + "/launch",
              service.wrap([this](const httplib::Request &req, httplib::Response &res,
                                  const httplib::ContentReader &reader) {
                return launch(req, res, reader);
              }));
  server.Post(session + "/launch_async",
              service.wrap([this](const httplib::Request &req, httplib::Response &res) {
                return launchAsync(req, res);
              }));
  server.Post(session + R"(/launches/(\d{1,19})/await)",
              service.wrap([this](const httplib::Request &req, httplib::Response &res) {
                return await(req, res);
              }));
  server.Post(session + R"(/call/([A-Za-z_.$][A-Za-z0-9_.$]{0,255}))",
              service.wrap(
                  [this](const httplib::Request &req, httplib::Response &res,
                         const httplib::ContentReader &reader) { return call(req, res, reader); }));
}

ExecutorServer::ExecutorServer(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

ExecutorServer::~ExecutorServer() {
  stop();
  if (impl->pool)
    impl->pool->shutdown();
  if (impl->reaper.joinable())
    impl->reaper.join();
  // Async launches still queued or running finish first, as requests in flight do.
  if (impl->launchPool)
    impl->launchPool->shutdown();
}

llvm::Expected<std::unique_ptr<ExecutorServer>>
ExecutorServer::create(ExecutorServerOptions options) {
  if (llvm::Error error = requireTokenBeyondLoopback(
          options.host, options.token,
          "shipped objects are native code, so a non-loopback executor needs --token-file"))
    return std::move(error);
  llvm::Expected<std::shared_ptr<PluginSet>> plugins = PluginSet::load(options.plugins);
  if (!plugins)
    return plugins.takeError();
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->plugins = std::move(*plugins);
  if (impl->isolated()) {
    executor::WorkerSettings settings;
    settings.program = impl->options.workerProgram;
    if (settings.program.empty()) {
      // courier-worker is installed beside courier-executor.
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
    settings.memoryMiB = impl->options.workerMemoryMiB;
    settings.cpuSeconds = impl->options.workerCpuSeconds;
    settings.sandbox = impl->options.sandbox;
    settings.allowUnsignedObjects = impl->options.allowUnsignedObjects;
    impl->pool =
        std::make_unique<executor::WorkerPool>(std::move(settings), impl->options.warmWorkers);
    // Refuse to serve rather than serve uncontained: a worker must start, sandbox and all.
    if (llvm::Error error = impl->pool->probe())
      return llvm::createStringError(
          "worker processes cannot start: " + llvm::toString(std::move(error)) +
          (impl->options.sandbox ? " (if seccomp is unavailable here, --no-sandbox runs "
                                   "workers without it)"
                                 : ""));
  }
  impl->installRoutes();
  if (llvm::Error error = impl->service.bind())
    return std::move(error);
  impl->reaper = std::thread([raw = impl.get()] { raw->reapIdleSessions(); });
  impl->launchPool = std::make_unique<httplib::ThreadPool>(std::max(1u, impl->options.threads));
  return std::unique_ptr<ExecutorServer>(new ExecutorServer(std::move(impl)));
}

std::string ExecutorServer::address() const { return impl->service.address(); }

int ExecutorServer::port() const { return impl->service.port(); }

llvm::Error ExecutorServer::run() { return impl->service.run(); }

void ExecutorServer::stop() {
  if (impl->pool) {
    // Kernels may spin forever: ending their workers is what lets requests finish.
    impl->pool->shutdown();
    std::vector<std::shared_ptr<Session>> all;
    {
      std::lock_guard<std::mutex> lock(impl->sessionsMutex);
      for (auto &[id, session] : impl->sessions)
        all.push_back(session);
    }
    for (const std::shared_ptr<Session> &session : all)
      session->endWorker(EndReason::Shutdown);
  }
  impl->service.stop();
}

} // namespace courier::transport
