// The executor's HTTP server: the /v1 routes over HttpService, which holds the one wrapper
// that turns an llvm::Error (or a stray exception) into {"error":{"code","message"}} with
// the status of its code, so handlers never throw.
#include "executor/ExecutorServer.h"

#include "executor/ObjectHost.h"
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
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

// Ordered, so replies list their keys in the order docs/protocol.md shows them.
using json = nlohmann::ordered_json;

namespace courier::transport {

using wire::makeWireError;

namespace {

using Clock = std::chrono::steady_clock;

struct Metrics {
  std::array<std::atomic<uint64_t>, 600> requestsByStatus{};
  std::atomic<uint64_t> launches{0}, launchFailures{0}, calls{0}, callFailures{0};
  std::atomic<uint64_t> objectUploads{0}, objectsDropped{0}, sessionsOpened{0}, sessionsExpired{0};
  Histogram launchSeconds;
};

/// A session: its own ObjectHost, so objects shipped by one client never resolve another's
/// symbols, and the async launches it started.
struct Session {
  std::string id;
  /// Shared with the async launches running on it, so closing the session never waits for
  /// a kernel: the host goes when the last of them returns.
  std::shared_ptr<ObjectHost> host;
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
  /// Resolves to an empty string on success, "code\nmessage" otherwise.
  std::map<uint64_t, std::shared_future<std::string>> launches;

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

/// Keeps a WireError's code; any other error becomes `fallbackCode`.
std::pair<std::string, std::string> describe(llvm::Error error, llvm::StringRef fallbackCode) {
  std::string code = fallbackCode.str(), message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const wire::WireError &e) {
        code = e.code;
        message = e.message;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return {code, message};
}

/// A kernel's entry or a `call` symbol that ORC could not resolve is the caller's mistake
/// (404), anything else the kernel's (422).
llvm::Error classifyHostError(llvm::Error error, llvm::StringRef missingCode,
                              llvm::StringRef failureCode, llvm::StringRef context) {
  bool missing = false;
  std::string message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const llvm::orc::SymbolsNotFound &e) {
        missing = true;
        message = e.message();
      },
      [&](const wire::WireError &e) { message = e.message; },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  llvm::StringRef text(message);
  if (text.contains("not found") || text.contains("unknown symbol") || text.contains("no symbol") ||
      text.contains("unknown entry") || text.contains("Symbols not found"))
    missing = true;
  return makeWireError(missing ? missingCode : failureCode, context + ": " + message);
}

struct MallocDeleter {
  void operator()(char *p) const { std::free(p); }
};
using MallocBuffer = std::unique_ptr<char, MallocDeleter>;

} // namespace

void reportFailure(httplib::Response &res, llvm::Error error) {
  auto [code, message] = describe(std::move(error), "internal");
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
  llvm::Expected<std::unique_ptr<ObjectHost>> host = ObjectHost::create(plugins);
  if (!host)
    return makeWireError("internal",
                         "creating an object host: " + llvm::toString(host.takeError()));
  auto session = std::make_shared<Session>();
  session->id = id;
  session->host = std::move(*host);
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
  // Every launch passes here: an object already loaded costs one shared lock.
  if (session.host->hasObject(sha))
    return llvm::Error::success();
  std::lock_guard<std::mutex> attaching(session.attachMutex);
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
  if (llvm::Error error = session.host->addObject(*blob)) {
    dropHold(sha);
    return makeWireError("invalid_object",
                         "loading object " + sha + ": " + llvm::toString(std::move(error)));
  }
  session.attached.insert(sha.str());
  return llvm::Error::success();
}

bool ExecutorServer::Impl::detach(Session &session, llvm::StringRef sha) {
  std::lock_guard<std::mutex> attaching(session.attachMutex);
  if (!session.attached.erase(sha.str()))
    return false;
  // Launches of the object still running keep its code until they return (ObjectHost), and
  // unloading cannot fail in a way the client could act on.
  llvm::consumeError(session.host->removeObject(sha));
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
    for (const std::shared_ptr<Session> &session : expired)
      releaseHolds(*session);
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
  sendJson(res, 200,
           {{"status", "ok"},
            {"version", COURIER_VERSION},
            {"protocol", "v1"},
            {"triple", llvm::sys::getProcessTriple()},
            {"cpu", llvm::sys::getHostCPUName().str()},
            {"features", features},
            {"sessions", sessionCount},
            {"objects", objectCount}});
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

llvm::Error ExecutorServer::Impl::launch(const httplib::Request &req, httplib::Response &res,
                                         const httplib::ContentReader &reader) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session) {
    drain(reader);
    return session.takeError();
  }
  Session &s = **session;
  wire::LaunchRequest request;
  std::vector<MallocBuffer> buffers;
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
        for (const wire::TensorHeader &t : request.inputs) {
          char *data = static_cast<char *>(wire::allocateTensorBuffer(t.bytes));
          if (!data)
            return makeWireError("payload_too_large", "cannot allocate " + llvm::Twine(t.bytes) +
                                                          " bytes for a launch input");
          buffers.emplace_back(data);
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

  std::vector<TensorView> inputs;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const wire::TensorHeader &t = request.inputs[i];
    inputs.push_back(
        TensorView{buffers[i].get(), t.elemSize, t.sizes, wire::packedStrides(t.sizes)});
  }
  auto started = Clock::now();
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
  buffers.clear(); // Inputs are no longer needed while the reply streams.

  // The reply streams straight from the kernel's result buffers, freed once sent.
  struct Reply {
    std::vector<OwnedTensor> tensors;
    std::unique_ptr<wire::FrameWriter> writer;
  };
  auto reply = std::make_shared<Reply>();
  reply->tensors = std::move(*results);
  std::vector<TensorView> views;
  for (const OwnedTensor &t : reply->tensors)
    views.push_back(TensorView{t.data, t.elemSize, t.sizes, t.strides});
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
  if (!s.host->hasEntry(object, entry))
    return makeWireError("unknown_entry",
                         "launching '" + entry + "': no entry '" + entry + "' in object " + object);
  Metrics *m = &metrics;
  // The task shares the host, not the session: a session that closes or expires meanwhile
  // goes at once (nothing waits for a kernel that may never return), and the host with the
  // object's code stays until the task is done. Capturing the session would make a cycle
  // through `launches` that keeps an unawaited session alive forever.
  auto outcome = std::make_shared<std::promise<std::string>>();
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
  launchPool->enqueue([host = s.host, object, entry, m, outcome] {
    auto started = Clock::now();
    llvm::Expected<std::vector<OwnedTensor>> results = host->launch(object, entry, {}, {});
    m->launchSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
    m->launches++;
    if (results) {
      outcome->set_value("");
      return;
    }
    m->launchFailures++;
    auto [code, message] = describe(classifyHostError(results.takeError(), "unknown_entry",
                                                      "launch_failed", "launching '" + entry + "'"),
                                    "launch_failed");
    outcome->set_value(code + "\n" + message);
  });
  sendJson(res, 202, {{"launch", id}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::await(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<std::shared_ptr<Session>> session = findSession(req);
  if (!session)
    return session.takeError();
  uint64_t id = 0;
  if (llvm::StringRef(req.matches[2].str()).getAsInteger(10, id))
    return makeWireError("bad_request", "launch id must be a number");
  std::shared_future<std::string> done;
  {
    std::lock_guard<std::mutex> lock((*session)->launchesMutex);
    auto it = (*session)->launches.find(id);
    if (it == (*session)->launches.end())
      return makeWireError("unknown_launch", "no pending launch " + llvm::Twine(id) +
                                                 " in session '" + (*session)->id + "'");
    done = std::move(it->second);
    (*session)->launches.erase(it);
  }
  const std::string &outcome = done.get();
  (*session)->touch();
  if (!outcome.empty()) {
    auto [code, message] = llvm::StringRef(outcome).split('\n');
    return makeWireError(code, message);
  }
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
  llvm::Expected<std::string> output = (*session)->host->call(symbol, input, outputSize);
  if (!output) {
    metrics.callFailures++;
    return classifyHostError(output.takeError(), "unknown_symbol", "call_failed",
                             "calling '" + symbol + "'");
  }
  if (output->size() != outputSize) {
    metrics.callFailures++;
    return makeWireError("call_failed",
                         llvm::formatv("'{0}' produced {1} bytes, the caller expects {2}", symbol,
                                       output->size(), outputSize));
  }
  res.status = 200;
  // The reply is already in memory: moved in whole. (A content provider of length 0 is
  // httplib's "length unknown" and would stream forever.)
  res.set_content(std::move(*output), wire::kBytesContentType);
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
    releaseHolds(*closed);
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

void ExecutorServer::stop() { impl->service.stop(); }

} // namespace courier::transport
