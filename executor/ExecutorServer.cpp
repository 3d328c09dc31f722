// courier-executor's HTTP adapter: the /v1 routes (docs/protocol.md) over the executor core
// (executor/ExecutorCore.h) and HttpService, which holds the one wrapper that turns an
// llvm::Error (or a stray exception) into {"error":{"code","message"}} with the status of its
// code, so handlers never throw.
#include "executor/ExecutorServer.h"

#include "executor/ExecutorCore.h"
#include "executor/HostErrors.h"
#include "executor/SharedChannelServer.h"
#include "transport/HttpService.h"
#include "transport/Wire.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <optional>

// Ordered, so replies list their keys in the order docs/protocol.md shows them.
using json = nlohmann::ordered_json;

namespace courier::executor {

using transport::contentLength;
using transport::discardBody;
using transport::ErrorCode;
using transport::HttpService;
using transport::HttpServiceOptions;
using transport::makeCodedError;
using transport::requireTokenBeyondLoopback;
using transport::sendFrame;
namespace wire = transport::wire;

namespace {

void sendJson(httplib::Response &res, int status, const json &body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  wire::kJsonContentType);
}

void sendError(httplib::Response &res, ErrorCode code, llvm::StringRef message) {
  res.status = httpStatus(code);
  res.set_content(wire::errorBody(code, message), wire::kJsonContentType);
}

void reportFailure(httplib::Response &res, llvm::Error error) {
  auto [code, message] = takeCodeAndMessage(std::move(error), ErrorCode::Internal);
  sendError(res, code, message);
}

/// A JSON request body, within the nesting every JSON a peer sends is held to
/// (wire::kMaxJsonDepth); a body that is not JSON is a discarded value, for the caller's
/// own message.
llvm::Expected<json> parseBody(const httplib::Request &req) {
  if (llvm::Error error = wire::checkJsonDepth(req.body, "the request body"))
    return std::move(error);
  return json::parse(req.body, nullptr, /*allow_exceptions=*/false);
}

executor::CoreOptions coreOptions(const ExecutorServerOptions &options) {
  executor::CoreOptions core = options.core;
  core.maxBytes = options.maxBodyBytes;
  // Async launches run on threads of their own, fewer than connections: each holds a
  // session's worker, and sessions are fewer still.
  core.asyncThreads = std::clamp(options.threads, 1u, 64u);
  return core;
}

} // namespace

struct ExecutorServer::Impl {
  explicit Impl(ExecutorServerOptions optionsIn)
      : options(std::move(optionsIn)), service(serviceOptions()) {}

  ExecutorServerOptions options;
  HttpService service;
  std::unique_ptr<ExecutorCore> core;
  /// Same-host channels; made once the core is.
  std::unique_ptr<executor::SharedChannelServer> channels;

  HttpServiceOptions serviceOptions();
  std::vector<HttpService::Route> routes();

  llvm::Expected<SessionRef> findSession(const httplib::Request &req);
  /// The deadline a request asks for (X-Courier-Deadline-Ms), within the server's own.
  llvm::Expected<Clock::time_point> deadlineFor(const httplib::Request &req);
  /// What every session-scoped request needs: its session and its deadline. On failure a
  /// body still unread (`reader`) is drained, so the keep-alive connection stays in step.
  struct Scope {
    SessionRef session;
    Clock::time_point deadline;
  };
  llvm::Expected<Scope> scope(const httplib::Request &req, httplib::Response &res,
                              const httplib::ContentReader *reader);
  /// `draining` once a drain began, so clients open sessions on another executor.
  llvm::Error refuseWhileDraining() {
    if (!service.draining())
      return llvm::Error::success();
    return makeCodedError(ErrorCode::Draining, "the executor is draining before it exits; open the "
                                               "session on another executor");
  }

  // The routes' handlers, in the order of the route table.
  llvm::Error health(const httplib::Request &req, httplib::Response &res);
  llvm::Error ready(const httplib::Request &req, httplib::Response &res);
  llvm::Error metrics(const httplib::Request &req, httplib::Response &res);
  llvm::Error listObjects(const httplib::Request &req, httplib::Response &res);
  llvm::Error hasObject(const httplib::Request &req, httplib::Response &res);
  llvm::Error putObject(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader);
  /// The body of a session-opening reply: its id and whether its launches run contained.
  json sessionReply(const std::string &id) const;
  llvm::Error listSessions(const httplib::Request &req, httplib::Response &res);
  llvm::Error openSession(const httplib::Request &req, httplib::Response &res);
  llvm::Error reopenSession(const httplib::Request &req, httplib::Response &res);
  llvm::Error getSession(const httplib::Request &req, httplib::Response &res);
  llvm::Error closeSession(const httplib::Request &req, httplib::Response &res);
  llvm::Error offerChannel(const httplib::Request &req, httplib::Response &res);
  llvm::Error attachObject(const httplib::Request &req, httplib::Response &res);
  llvm::Error detachObject(const httplib::Request &req, httplib::Response &res);
  llvm::Error launch(const httplib::Request &req, httplib::Response &res,
                     const httplib::ContentReader &reader);
  llvm::Error launchAsync(const httplib::Request &req, httplib::Response &res);
  llvm::Error await(const httplib::Request &req, httplib::Response &res);
  llvm::Error call(const httplib::Request &req, httplib::Response &res,
                   const httplib::ContentReader &reader);

  /// A launch frame's header line: decodes it into `request`, attaches its object, checks
  /// its sizes and prepares `area` for the inputs, whose destinations it returns.
  llvm::Expected<std::vector<wire::Destination>>
  acceptLaunchHeader(const httplib::Request &req, Session &session, llvm::StringRef line,
                     wire::LaunchRequest &request, InputArea &area);
};

HttpServiceOptions ExecutorServer::Impl::serviceOptions() {
  HttpServiceOptions service;
  service.listen = options;
  service.name = "executor";
  service.payloadTooLargeMessage = "request body exceeds the executor's limit";
  service.sendError = sendError;
  service.reportFailure = reportFailure;
  service.metricPrefix = "courier";
  service.subjectKey = "session";
  service.subjectPlaceholder = "{id}";
  return service;
}

llvm::Expected<SessionRef> ExecutorServer::Impl::findSession(const httplib::Request &req) {
  std::string id = req.matches[1];
  std::string header = req.get_header_value(wire::kSessionHeader);
  if (!header.empty() && header != id)
    return makeCodedError(ErrorCode::BadRequest, "header " + llvm::Twine(wire::kSessionHeader) +
                                                     " '" + header + "' does not match session '" +
                                                     id + "' in the path");
  return core->findSession(id);
}

llvm::Expected<Clock::time_point> ExecutorServer::Impl::deadlineFor(const httplib::Request &req) {
  if (!req.has_header(wire::kDeadlineHeader))
    return core->deadline(std::nullopt);
  uint64_t ms = 0;
  if (llvm::StringRef(req.get_header_value(wire::kDeadlineHeader)).getAsInteger(10, ms) || ms == 0)
    return makeCodedError(ErrorCode::BadRequest, "header " + llvm::Twine(wire::kDeadlineHeader) +
                                                     " must give a deadline in milliseconds (> 0)");
  ms = std::min(ms, wire::kLongestDeadlineMs);
  return core->deadline(std::chrono::milliseconds(ms));
}

llvm::Expected<ExecutorServer::Impl::Scope>
ExecutorServer::Impl::scope(const httplib::Request &req, httplib::Response &res,
                            const httplib::ContentReader *reader) {
  llvm::Expected<SessionRef> session = findSession(req);
  llvm::Expected<Clock::time_point> deadline =
      session ? deadlineFor(req) : llvm::Expected<Clock::time_point>(session.takeError());
  if (!deadline) {
    if (reader)
      discardBody(*reader, res);
    return deadline.takeError();
  }
  return Scope{std::move(*session), *deadline};
}

std::vector<HttpService::Route> ExecutorServer::Impl::routes() {
  using Method = HttpService::Route::Method;
  const std::string session = R"(/v1/sessions/([A-Za-z0-9_-]{1,64}))";
  const std::string sha = R"(([0-9a-f]{64}))";
  const std::string launchId = R"((\d{1,19}))";
  const std::string symbol = R"(([A-Za-z_.$][A-Za-z0-9_.$]{0,255}))";
  auto to = [this](auto fn) { return HttpService::to(this, fn); };
  // GET also answers HEAD (httplib routes one to the other): "do you have this object?".
  return {
      {Method::Get, "/v1/health", "GET /v1/health", to(&Impl::health)},
      {Method::Get, "/v1/ready", "GET /v1/ready", to(&Impl::ready)},
      {Method::Get, "/metrics", "GET /metrics", to(&Impl::metrics)},
      {Method::Get, "/v1/objects", "GET /v1/objects", to(&Impl::listObjects)},
      {Method::Get, "/v1/objects/" + sha, "GET /v1/objects/{sha256}", to(&Impl::hasObject)},
      {Method::Put, "/v1/objects/" + sha, "PUT /v1/objects/{sha256}", to(&Impl::putObject)},
      {Method::Get, "/v1/sessions", "GET /v1/sessions", to(&Impl::listSessions)},
      {Method::Post, "/v1/sessions", "POST /v1/sessions", to(&Impl::openSession)},
      {Method::Put, session, "PUT /v1/sessions/{id}", to(&Impl::reopenSession)},
      {Method::Get, session, "GET /v1/sessions/{id}", to(&Impl::getSession)},
      {Method::Delete, session, "DELETE /v1/sessions/{id}", to(&Impl::closeSession)},
      {Method::Post, session + "/shm", "POST /v1/sessions/{id}/shm", to(&Impl::offerChannel)},
      {Method::Post, session + "/objects/" + sha, "POST /v1/sessions/{id}/objects/{sha256}",
       to(&Impl::attachObject)},
      {Method::Delete, session + "/objects/" + sha, "DELETE /v1/sessions/{id}/objects/{sha256}",
       to(&Impl::detachObject)},
      {Method::Post, session + "/launch", "POST /v1/sessions/{id}/launch", to(&Impl::launch)},
      {Method::Post, session + "/launch_async", "POST /v1/sessions/{id}/launch_async",
       to(&Impl::launchAsync)},
      {Method::Post, session + "/launches/" + launchId + "/await",
       "POST /v1/sessions/{id}/launches/{launch}/await", to(&Impl::await)},
      {Method::Post, session + "/call/" + symbol, "POST /v1/sessions/{id}/call/{symbol}",
       to(&Impl::call)},
  };
}

llvm::Error ExecutorServer::Impl::health(const httplib::Request &, httplib::Response &res) {
  executor::HealthReport report = core->health();
  json body = {{"status", report.healthy ? "ok" : "unhealthy"},
               {"version", report.version},
               {"protocol", "v1"},
               {"triple", report.triple},
               {"cpu", report.cpu},
               {"features", report.features},
               {"sessions", report.sessions},
               {"objects", report.objects},
               {"isolation", report.isolated ? "process" : "none"}};
  if (report.isolated)
    body["workers"] = {{"live", report.workersLive},
                       {"warm", report.workersWarm},
                       {"restarted", report.workersRestarted}};
  // A balancer must stop sending sessions here if none could run.
  if (!report.healthy)
    body["reason"] = report.reason;
  sendJson(res, report.healthy ? 200 : 503, body);
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::ready(const httplib::Request &, httplib::Response &res) {
  if (service.draining())
    return makeCodedError(ErrorCode::Draining, "the executor is draining before it exits");
  sendJson(res, 200, {{"status", "ready"}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::metrics(const httplib::Request &, httplib::Response &res) {
  channels->countWorkerLaunches(); // Into the core's launch metrics too.
  std::vector<prometheus::MetricFamily> families = core->collectMetrics();
  for (prometheus::MetricFamily &family : channels->collectMetrics())
    families.push_back(std::move(family));
  res.set_content(service.metricsText(families), "text/plain; version=0.0.4");
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::listObjects(const httplib::Request &, httplib::Response &res) {
  json objects = json::array();
  uint64_t bytes = 0;
  for (const executor::ObjectSummary &object : core->listObjects()) {
    objects.push_back(
        {{"sha256", object.sha256}, {"size", object.size}, {"holders", object.holders}});
    bytes += object.size;
  }
  sendJson(res, 200, {{"objects", std::move(objects)}, {"bytes", bytes}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::hasObject(const httplib::Request &req, httplib::Response &res) {
  std::optional<ObjectBlob> blob = core->findObject(req.matches[1].str());
  if (!blob)
    return makeCodedError(ErrorCode::UnknownObject,
                          "object " + req.matches[1].str() + " is not on this executor");
  sendJson(res, 200, {{"sha256", blob->sha256}, {"size", blob->bytes->size()}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::putObject(const httplib::Request &req, httplib::Response &res,
                                            const httplib::ContentReader &reader) {
  std::string sha = req.matches[1];
  // An object that could not fit is refused before its body is read; one that fits now may
  // still not once it has come, which storeObject says.
  if (req.has_header("Content-Length") && !core->findObject(sha)) {
    if (llvm::Error error = core->checkStoreRoom(contentLength(req))) {
      discardBody(reader, res);
      return error;
    }
  }
  auto bytes = std::make_shared<std::string>();
  if (llvm::Error error = service.readBody(req, res, reader, *bytes))
    return error;
  std::string actual = wire::sha256Hex(*bytes);
  if (actual != sha)
    return makeCodedError(ErrorCode::HashMismatch,
                          "object body hashes to " + actual + ", not " + sha);
  llvm::Expected<bool> stored = core->storeObject(ObjectBlob{sha, std::move(bytes)});
  if (!stored)
    return stored.takeError();
  sendJson(res, *stored ? 201 : 200, {{"sha256", sha}, {"stored", *stored}});
  return llvm::Error::success();
}

json ExecutorServer::Impl::sessionReply(const std::string &id) const {
  // Contained: each session's launches run in its own sandboxed worker, so nothing one did
  // outlives this executor and a client may run a launch lost with it again elsewhere.
  bool contained = core->hostsContained() && options.core.sandbox;
  return {{"session", id}, {"contained", contained}};
}

llvm::Error ExecutorServer::Impl::listSessions(const httplib::Request &, httplib::Response &res) {
  json sessions = json::array();
  for (const executor::SessionSummary &s : core->listSessions())
    sessions.push_back({{"session", s.id},
                        {"objects", s.objects},
                        {"idle_ms", s.idleMs},
                        {"requests_in_flight", s.requestsInFlight},
                        {"worker_pid", s.workerPid == 0 ? json(nullptr) : json(s.workerPid)},
                        {"pending_launches", s.pendingLaunches}});
  sendJson(res, 200, {{"sessions", std::move(sessions)}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::openSession(const httplib::Request &, httplib::Response &res) {
  if (llvm::Error error = refuseWhileDraining())
    return error;
  bool created = false;
  llvm::Expected<SessionRef> s = core->openSession(executor::randomSessionId(), created);
  if (!s)
    return s.takeError();
  const std::string &id = ExecutorCore::sessionId(**s);
  res.set_header(wire::kSessionHeader, id);
  HttpService::noteLogSubject(id);
  sendJson(res, 201, sessionReply(id));
  return llvm::Error::success();
}

// A client re-creates a lost session under its old id, so a balancer hashing on the id keeps
// sending it to the same place.
llvm::Error ExecutorServer::Impl::reopenSession(const httplib::Request &req,
                                                httplib::Response &res) {
  // While draining, only a session that already exists is confirmed.
  if (service.draining()) {
    llvm::Expected<SessionRef> existing = core->findSession(req.matches[1].str());
    if (!existing) {
      llvm::consumeError(existing.takeError());
      return refuseWhileDraining();
    }
  }
  bool created = false;
  llvm::Expected<SessionRef> s = core->openSession(req.matches[1].str(), created);
  if (!s)
    return s.takeError();
  const std::string &id = ExecutorCore::sessionId(**s);
  res.set_header(wire::kSessionHeader, id);
  sendJson(res, created ? 201 : 200, sessionReply(id));
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::getSession(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<SessionRef> s = findSession(req);
  if (!s)
    return s.takeError();
  sendJson(res, 200, {{"session", ExecutorCore::sessionId(**s)}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::closeSession(const httplib::Request &req,
                                               httplib::Response &res) {
  if (llvm::Error error = core->closeSession(req.matches[1].str()))
    return error;
  channels->endSession(req.matches[1].str());
  res.status = 204;
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::offerChannel(const httplib::Request &req,
                                               httplib::Response &res) {
  llvm::Expected<SessionRef> s = findSession(req);
  if (!s)
    return s.takeError();
  // Launches on a channel go straight to the session's worker: asked through a proxy, they
  // would go around it (a front door's hashing, drains and failover).
  for (const char *header : {"Forwarded", "X-Forwarded-For", "Via"})
    if (req.has_header(header))
      return makeCodedError(ErrorCode::NotFound,
                            llvm::Twine("no shared-memory channel for a request that came "
                                        "through a proxy (it carries ") +
                                header + "): its launches would go around the proxy");
  uint64_t requested = 0;
  uint32_t pageVersion = 1;
  if (!req.body.empty()) {
    llvm::Expected<json> parsed = parseBody(req);
    if (!parsed)
      return parsed.takeError();
    json &body = *parsed;
    auto unsignedOrAbsent = [&](const char *key) {
      return !body.contains(key) || body[key].is_number_unsigned();
    };
    if (!body.is_object() || !unsignedOrAbsent("arena_bytes") || !unsignedOrAbsent("page_version"))
      return makeCodedError(ErrorCode::BadRequest,
                            "expected {\"arena_bytes\": N, \"page_version\": N} (both optional) "
                            "or no body");
    if (body.contains("arena_bytes"))
      requested = body["arena_bytes"].get<uint64_t>();
    // Any version may be asked for: the offer names the newest both sides speak.
    if (body.contains("page_version"))
      pageVersion = static_cast<uint32_t>(
          std::min<uint64_t>(body["page_version"].get<uint64_t>(), UINT32_MAX));
  }
  llvm::Expected<executor::SharedChannelOffer> offer =
      channels->offer(ExecutorCore::sessionId(**s), requested, pageVersion);
  if (!offer)
    return offer.takeError();
  sendJson(res, 200,
           {{"socket", offer->socket},
            {"token", offer->token},
            {"input_bytes", offer->inputBytes},
            {"result_bytes", offer->resultBytes},
            {"host", offer->host},
            {"page_version", offer->pageVersion}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::attachObject(const httplib::Request &req,
                                               httplib::Response &res) {
  llvm::Expected<SessionRef> s = findSession(req);
  if (!s)
    return s.takeError();
  if (llvm::Error error = core->attach(**s, req.matches[2].str()))
    return error;
  sendJson(res, 200, {{"session", ExecutorCore::sessionId(**s)}, {"sha256", req.matches[2].str()}});
  return llvm::Error::success();
}

// Releasing an object the session does not hold is no error ("detached": false): a release
// may race with a restart that lost the session's objects.
llvm::Error ExecutorServer::Impl::detachObject(const httplib::Request &req,
                                               httplib::Response &res) {
  llvm::Expected<SessionRef> s = findSession(req);
  if (!s)
    return s.takeError();
  bool detached = core->detach(**s, req.matches[2].str());
  sendJson(res, 200,
           {{"session", ExecutorCore::sessionId(**s)},
            {"sha256", req.matches[2].str()},
            {"detached", detached}});
  return llvm::Error::success();
}

llvm::Expected<std::vector<wire::Destination>>
ExecutorServer::Impl::acceptLaunchHeader(const httplib::Request &req, Session &session,
                                         llvm::StringRef line, wire::LaunchRequest &request,
                                         InputArea &area) {
  llvm::Expected<wire::LaunchRequest> decoded = wire::decodeLaunchRequest(line);
  if (!decoded)
    return decoded.takeError();
  request = std::move(*decoded);
  if (llvm::Error error = core->attach(session, request.object))
    return std::move(error);
  uint64_t total = 0;
  for (const wire::TensorHeader &t : request.inputs) {
    if (t.bytes > options.maxBodyBytes - total)
      return makeCodedError(ErrorCode::PayloadTooLarge,
                            "launch inputs exceed the executor's limit");
    total += t.bytes;
  }
  // Checked before allocating, so a header cannot make us reserve what the body does not
  // bring. The header line came within the Content-Length, so the subtraction stays above
  // zero (a Content-Length beside Transfer-Encoding is refused before routing).
  uint64_t length = contentLength(req);
  if (req.has_header("Content-Length") && length != line.size() + 1 + total)
    return makeCodedError(ErrorCode::BadFrame,
                          llvm::formatv("the frame header declares {0} tensor bytes, the body "
                                        "holds {1}",
                                        total, length - line.size() - 1));
  llvm::Expected<InputArea> prepared = core->inputArea(session, request.inputs);
  if (!prepared)
    return prepared.takeError();
  area = std::move(*prepared);
  std::vector<wire::Destination> destinations;
  for (size_t i = 0; i < request.inputs.size(); ++i)
    destinations.push_back({area.input(i), request.inputs[i].bytes});
  return destinations;
}

llvm::Error ExecutorServer::Impl::launch(const httplib::Request &req, httplib::Response &res,
                                         const httplib::ContentReader &reader) {
  llvm::Expected<Scope> scoped = scope(req, res, &reader);
  if (!scoped)
    return scoped.takeError();
  SessionRef &session = scoped->session;
  wire::LaunchRequest request;
  InputArea area;
  wire::FrameReader frame(
      [&](llvm::StringRef line) { return acceptLaunchHeader(req, *session, line, request, area); });
  if (llvm::Error error = service.readFrame(req, res, reader, frame))
    return error;

  std::vector<TensorView> inputs;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const wire::TensorHeader &t = request.inputs[i];
    inputs.push_back(TensorView{area.input(i), t.elemSize, t.sizes, wire::packedStrides(t.sizes)});
  }
  llvm::Expected<LaunchResults> results = core->launch(
      *session, request.object, request.entry, &area, inputs, request.results, scoped->deadline);
  if (!results)
    return results.takeError();

  // The reply comes straight from the result buffers, released once sent.
  struct Reply {
    std::shared_ptr<void> keepAlive;
    std::unique_ptr<wire::FrameWriter> writer;
  };
  auto reply = std::make_shared<Reply>();
  reply->keepAlive = std::move(results->keepAlive);
  wire::LaunchReply header{wire::describePacked(results->views)};
  reply->writer = std::make_unique<wire::FrameWriter>(wire::encodeLaunchReply(header),
                                                      std::move(results->views));
  res.status = 200;
  sendFrame(res, std::shared_ptr<wire::FrameWriter>(reply, reply->writer.get()));
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::launchAsync(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<Scope> scoped = scope(req, res, nullptr);
  if (!scoped)
    return scoped.takeError();
  llvm::Expected<json> parsed = parseBody(req);
  if (!parsed)
    return parsed.takeError();
  json &body = *parsed;
  if (!body.is_object() || !body.contains("object") || !body["object"].is_string() ||
      !body.contains("entry") || !body["entry"].is_string())
    return makeCodedError(ErrorCode::BadRequest, "expected {\"object\": sha256, \"entry\": name}");
  std::string object = body["object"], entry = body["entry"];
  if (!wire::isSha256(object))
    return makeCodedError(ErrorCode::BadRequest, "'object' must be a lowercase hex SHA-256");
  llvm::Expected<uint64_t> id = core->launchAsync(scoped->session, object, entry, scoped->deadline);
  if (!id)
    return id.takeError();
  sendJson(res, 202, {{"launch", *id}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::await(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<Scope> scoped = scope(req, res, nullptr);
  if (!scoped)
    return scoped.takeError();
  uint64_t id = 0;
  if (llvm::StringRef(req.matches[2].str()).getAsInteger(10, id))
    return makeCodedError(ErrorCode::BadRequest, "launch id must be a number");
  if (llvm::Error error = core->await(*scoped->session, id, scoped->deadline))
    return error;
  sendJson(res, 200, {{"launch", id}});
  return llvm::Error::success();
}

llvm::Error ExecutorServer::Impl::call(const httplib::Request &req, httplib::Response &res,
                                       const httplib::ContentReader &reader) {
  llvm::Expected<Scope> scoped = scope(req, res, &reader);
  if (!scoped)
    return scoped.takeError();
  std::string symbol = req.matches[2];
  uint64_t outputSize = 0;
  bool badSize =
      llvm::StringRef(req.get_header_value(wire::kOutputSizeHeader)).getAsInteger(10, outputSize);
  // The executor holds a call's input and its reply at once, and the reply's buffer is
  // committed before the callee runs: the two together stay within the body limit, checked
  // before the reply is allocated (the reply alone before the body is read, since a
  // Content-Length is only a claim; with the input once it has arrived).
  auto replyTooLarge = [&](std::optional<uint64_t> inputBytes) {
    std::string input =
        inputBytes ? llvm::formatv(" with its input of {0} bytes", *inputBytes).str() : "";
    return makeCodedError(ErrorCode::PayloadTooLarge,
                          llvm::formatv("a call's reply of {0} bytes ({1}){2} exceeds the "
                                        "executor's limit of {3} bytes (--max-body-mib)",
                                        outputSize, wire::kOutputSizeHeader, input,
                                        options.maxBodyBytes));
  };
  if (!badSize && outputSize > options.maxBodyBytes) {
    discardBody(reader, res);
    return replyTooLarge(std::nullopt);
  }
  std::string input;
  if (llvm::Error error = service.readBody(req, res, reader, input))
    return error;
  if (badSize)
    return makeCodedError(ErrorCode::BadRequest, "header " + llvm::Twine(wire::kOutputSizeHeader) +
                                                     " must give the reply size in bytes");
  if (outputSize > options.maxBodyBytes - std::min<uint64_t>(input.size(), options.maxBodyBytes))
    return replyTooLarge(input.size());
  llvm::Expected<std::string> output =
      core->call(*scoped->session, symbol, input, outputSize, scoped->deadline);
  if (!output)
    return output.takeError();
  res.status = 200;
  // The reply is already in memory: moved in whole. (A content provider of length 0 is
  // httplib's "length unknown" and would stream forever.)
  res.set_content(std::move(*output), wire::kBytesContentType);
  return llvm::Error::success();
}

ExecutorServer::ExecutorServer(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

ExecutorServer::~ExecutorServer() {
  stop();
  impl->channels.reset();
  // The core's destructor lets async launches already started finish, as requests in
  // flight do.
  impl->core.reset();
}

llvm::Expected<std::unique_ptr<ExecutorServer>>
ExecutorServer::create(ExecutorServerOptions options) {
  if (llvm::Error error = requireTokenBeyondLoopback(
          options.host, options.token,
          "shipped objects are native code, so a non-loopback executor needs --token-file"))
    return std::move(error);
  auto impl = std::make_unique<Impl>(std::move(options));
  llvm::Expected<std::unique_ptr<ExecutorCore>> core =
      ExecutorCore::create(coreOptions(impl->options));
  if (!core)
    return core.takeError();
  impl->core = std::move(*core);
  impl->channels =
      std::make_unique<executor::SharedChannelServer>(*impl->core, impl->options.shmArenaMiB << 20);
  impl->service.addRoutes(impl->routes());
  if (llvm::Error error = impl->service.bind())
    return std::move(error);
  return std::unique_ptr<ExecutorServer>(new ExecutorServer(std::move(impl)));
}

std::string ExecutorServer::address() const { return impl->service.address(); }

int ExecutorServer::port() const { return impl->service.port(); }

llvm::Error ExecutorServer::run() { return impl->service.run(); }

void ExecutorServer::drainAndStop() {
  impl->service.drain();
  // HTTP first: a launch that came in as the drain ended runs to its end rather than being
  // cut short with its worker; then the workers go.
  impl->service.stop();
  stop();
}

void ExecutorServer::cutDrainShort() { impl->service.cutDrainShort(); }

void ExecutorServer::stop() {
  // Kernels may spin forever: ending their workers is what lets requests finish.
  if (impl->core)
    impl->core->stop();
  if (impl->channels)
    impl->channels->stop();
  impl->service.stop();
}

} // namespace courier::executor
