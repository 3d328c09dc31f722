// The HTTP server plumbing shared by the executor and courier-serve (see HttpService.h).
#include "transport/HttpService.h"
#include "transport/Service.h"

#include "transport/ParkingServer.h"
#include "transport/ServerStream.h"
#include "transport/Tls.h"

#include "transport/Log.h"
#include "transport/Metrics.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <prometheus/text_serializer.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <arpa/inet.h>
#include <cassert>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

namespace courier::transport {

using Clock = std::chrono::steady_clock;

namespace {

// Set by the pre-routing handler and the route wrapper, read by the logger; all run on the
// thread that serves the request.
thread_local Clock::time_point requestStart;
thread_local size_t currentRoute = 0;
// Whether the request being served was counted in flight (httplib logs requests it rejects
// before routing, too).
thread_local bool requestCounted = false;
// Whether that request is work a drain waits for, rather than a probe.
thread_local bool requestIsWork = false;
// The request's id and what it concerns, for its log line.
thread_local std::string currentRequestId;
thread_local std::string currentSubject;
// The request's path, for sendError (HttpService::requestPath).
thread_local std::string currentPath;
// Whether the error handler gave an id to a request httplib refused before routing.
thread_local bool refusalIdGiven = false;

/// Request ids made here: a random start, so that two processes' ids hardly ever meet, then
/// one more per request.
std::atomic<uint64_t> nextRequestId{[] {
  std::random_device random;
  return (uint64_t(random()) << 32) ^ random();
}()};

/// The client's X-Request-Id when it is one a log line can carry as it is, else a new one.
std::string requestIdFor(const httplib::Request &req) {
  std::string given = req.get_header_value("X-Request-Id");
  bool usable = !given.empty() && given.size() <= 64 && llvm::all_of(given, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
  if (usable)
    return given;
  char made[17];
  std::snprintf(made, sizeof(made), "%016llx",
                static_cast<unsigned long long>(nextRequestId.fetch_add(1)));
  return made;
}

/// Listen backlog raised to after httplib's listen() (which uses 5): a burst of connections
/// beyond the backlog would otherwise be dropped or delayed by SYN retries.
constexpr int kListenBacklog = 1024;

/// The requests a balancer or a supervisor sends to watch a server; they are answered
/// during a drain and never keep one going.
bool isProbe(const httplib::Request &req) {
  return req.method == "GET" &&
         (req.path == "/v1/health" || req.path == "/v1/ready" || req.path == "/metrics");
}

/// Why the end of a request's body is ambiguous or unbounded, if it is: with two
/// Content-Length headers, or one beside Transfer-Encoding, a proxy in front and this server
/// could each find a different body, and bytes one takes for body the other would run as a
/// request of its own (httplib picks one of the headers itself, silently); a body with a
/// coding other than chunked would be read until the connection closes; and httplib reads no body
/// of a GET, HEAD or OPTIONS at all, so one such request declaring a body would have that body run
/// as the next request, which a proxy in front never sees.
std::optional<std::string> ambiguousFraming(const httplib::Request &req) {
  size_t lengths = req.get_header_value_count("Content-Length");
  if (lengths > 1)
    return "the request has " + std::to_string(lengths) +
           " Content-Length headers; send exactly one";
  if (lengths == 1 && req.has_header("Transfer-Encoding"))
    return std::string("the request has both Content-Length and Transfer-Encoding headers; "
                       "send one of them");
  uint64_t length = 0;
  if (lengths == 1 &&
      llvm::StringRef(req.get_header_value("Content-Length")).getAsInteger(10, length))
    return "the Content-Length header '" + req.get_header_value("Content-Length") +
           "' is not a number of bytes";
  // httplib decodes only "chunked"; with any other coding, or none at all, it would read a
  // POST's or PUT's body until the connection closes, past every body limit.
  size_t codings = req.get_header_value_count("Transfer-Encoding");
  if (codings > 1 || (codings == 1 && !llvm::StringRef(req.get_header_value("Transfer-Encoding"))
                                           .trim()
                                           .equals_insensitive("chunked")))
    return "the only Transfer-Encoding accepted is one 'chunked'; got '" +
           req.get_header_value("Transfer-Encoding") + "'";
  // The methods whose bodies httplib reads (detail::expect_content), and so discards or
  // hands to a route.
  bool bodyIsRead = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                    req.method == "DELETE";
  if (!bodyIsRead && (length > 0 || codings > 0))
    return "a " + req.method + " carries no body; this one declares " +
           (codings > 0 ? std::string("a chunked one") : std::to_string(length) + " bytes");
  return std::nullopt;
}

/// Brings a request to what HTTP/1.1 says it is before httplib reads its body or writes its
/// reply:
/// - A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, 6.3),
///   as nginx reads it; httplib would read a POST's, PUT's or PATCH's until the connection
///   closes, past every body limit. Clients send such POSTs when there is nothing to send
///   (Triton's client asks for the model repository's index so).
/// - Replies are never compressed: httplib would gzip or brotli a JSON reply whenever the
///   request's Accept-Encoding allows, costing the server more CPU than the bytes it saves on
///   loopback or a LAN (a 16 MiB tensor as JSON: 0.3-0.5 s plain, 1.4-1.8 s with br), and a
///   client reading an error's body may not expect it compressed (Triton's does not).
/// httplib hands the pre-routing handler a const view of the request it owns and reads next.
void normalizeRequest(const httplib::Request &view) {
  auto &req = const_cast<httplib::Request &>(view);
  if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding"))
    req.headers.emplace("Content-Length", "0");
  req.headers.erase("Accept-Encoding");
}

/// The Content-Encoding of a request body that is not sent as it is, if any. httplib inflates
/// gzip, deflate and br bodies as it reads them, so the body limit would count compressed
/// bytes (1 MiB of gzip inflates to 1 GiB); no route takes a compressed body, so any coding
/// but `identity` is refused before the body is read.
std::optional<std::string> refusedEncoding(const httplib::Request &req) {
  size_t count = req.get_header_value_count("Content-Encoding");
  for (size_t i = 0; i < count; ++i) {
    std::string coding = req.get_header_value("Content-Encoding", i);
    if (!llvm::StringRef(coding).trim().equals_insensitive("identity"))
      return coding;
  }
  return std::nullopt;
}

} // namespace

llvm::Error requireTokenBeyondLoopback(const std::string &host, const std::string &token,
                                       llvm::StringRef because) {
  if (isLoopbackHost(host) || !token.empty())
    return llvm::Error::success();
  return llvm::createStringError("refusing to listen on '" + host +
                                 "' without a token: " + because.str());
}

void streamFrame(httplib::Response &res, std::shared_ptr<wire::FrameWriter> writer) {
  // Never empty (a frame has its header line): a provider of length 0 would be httplib's
  // "length unknown" and never end.
  assert(writer->size() > 0);
  res.set_content_provider(writer->size(), wire::kFrameContentType,
                           [writer](size_t offset, size_t, httplib::DataSink &sink) {
                             return writer->writeNext(offset, [&](const char *data, size_t size) {
                               return sink.write(data, size);
                             });
                           });
}

uint64_t contentLength(const httplib::Request &req) {
  uint64_t length = 0;
  if (llvm::StringRef(req.get_header_value("Content-Length")).getAsInteger(10, length))
    return 0;
  return length;
}

void sendFrame(httplib::Response &res, std::shared_ptr<wire::FrameWriter> writer) {
  constexpr uint64_t kStreamAbove = 64 << 10;
  if (writer->size() > kStreamAbove)
    return streamFrame(res, std::move(writer));
  std::string body;
  body.reserve(writer->size());
  bool progressed = true;
  while (body.size() < writer->size() && progressed) {
    size_t before = body.size();
    writer->writeNext(body.size(), [&](const char *data, size_t size) {
      body.append(data, size);
      return true;
    });
    progressed = body.size() > before;
  }
  res.set_content(std::move(body), wire::kFrameContentType);
}

void discardBody(const httplib::ContentReader &reader, httplib::Response &res) {
  if (!reader([](const char *, size_t) { return true; }))
    res.set_header("Connection", "close");
}

namespace {

/// A body that could not be read: over the limit (httplib refuses a Content-Length over it
/// with 413 itself; a chunked body is counted as it comes) or cut short.
llvm::Error bodyFailure(httplib::Response &res, bool overLimit, const std::string &tooLarge) {
  res.set_header("Connection", "close");
  if (overLimit || res.status == 413)
    return makeCodedError(ErrorCode::PayloadTooLarge, tooLarge);
  const std::string &problem = RequestWatch::problem();
  return makeCodedError(ErrorCode::BadRequest, problem.empty()
                                                   ? "request body could not be read"
                                                   : "request body could not be read: " + problem);
}

} // namespace

llvm::Error HttpService::readBody(const httplib::Request &req, httplib::Response &res,
                                  const httplib::ContentReader &reader, std::string &out) const {
  // The Content-Length is only a claim: taken whole, a request that never sends its body
  // could make the server reserve up to the body limit per connection. The first 1 MiB is
  // reserved at once; once it has come, the rest of what the Content-Length says (or, for a
  // chunked body, twice what came), in one fresh buffer backed by huge pages. Each size holds
  // kBodyPadding bytes more, which a parser that reads past the end may need.
  constexpr uint64_t kMaxInitialReserve = 1 << 20;
  uint64_t limit = opts.listen.maxBodyBytes;
  uint64_t claimed = contentLength(req);
  out.reserve(
      static_cast<size_t>(std::min({claimed, kMaxInitialReserve, limit}) + wire::kBodyPadding));
  bool overLimit = false;
  if (!reader([&](const char *data, size_t size) {
        if (size > limit - std::min<uint64_t>(out.size(), limit)) {
          overLimit = true;
          return false;
        }
        uint64_t needed = out.size() + size + wire::kBodyPadding;
        if (needed > out.capacity()) {
          uint64_t next = std::max<uint64_t>(claimed, 2 * out.size());
          wire::reserveFresh(out, static_cast<size_t>(std::max(needed, std::min(next, limit) +
                                                                           wire::kBodyPadding)));
        }
        out.append(data, size);
        return true;
      }))
    return bodyFailure(res, overLimit, opts.payloadTooLargeMessage);
  return llvm::Error::success();
}

llvm::Error HttpService::readFrame(const httplib::Request &, httplib::Response &res,
                                   const httplib::ContentReader &reader,
                                   wire::FrameReader &frame) const {
  uint64_t limit = opts.listen.maxBodyBytes;
  llvm::Error failure = llvm::Error::success();
  bool failed = false, overLimit = false;
  uint64_t received = 0;
  if (!reader([&](const char *data, size_t size) {
        received += size;
        if (received > limit) {
          overLimit = true;
          return false;
        }
        if (!failed) {
          failure = frame.feed(data, size);
          failed = static_cast<bool>(failure);
        }
        return true;
      })) {
    llvm::consumeError(std::move(failure));
    return bodyFailure(res, overLimit, opts.payloadTooLargeMessage);
  }
  if (failed)
    return failure;
  return frame.finish();
}

namespace {

/// The server, plaintext or TLS (transport/ParkingServer.h), with `refusal` writing the 503
/// it sends a connection it refuses.
std::unique_ptr<ParkingServer> makeServer(const HttpListenOptions &listen, std::string &problem,
                                          ParkingServer::RefusalWriter refusal) {
  ParkingServer::Limits limits{std::max(1u, listen.threads), std::max(1u, listen.maxConnections),
                               listen.maxConnectionsPerClient};
  ParkingServer::TlsSetup tls;
  if (wantsTls(listen))
    tls = [&](SSL_CTX &ctx) {
      llvm::Error error = configureServerContext(ctx, listen);
      if (!error)
        return true;
      problem = llvm::toString(std::move(error));
      return false;
    };
  return std::make_unique<ParkingServer>(limits, std::move(refusal), std::move(tls));
}

} // namespace

HttpService::HttpService(HttpServiceOptions options)
    : opts(std::move(options)),
      ownedServer(
          makeServer(opts.listen, tlsProblem,
                     [this](ParkingServer::Refusal reason) { return refusalResponse(reason); })),
      http(*ownedServer), parking(ownedServer.get()) {
  http.set_tcp_nodelay(true);
  http.set_keep_alive_max_count(1000000);
  // Short, so idle connections do not hold worker threads for long; the executor's client
  // stops reusing a connection well before this (see HttpBackend.cpp).
  http.set_keep_alive_timeout(5);
  http.set_payload_max_length(static_cast<size_t>(opts.listen.maxBodyBytes));
  installHandlers();
  installMetrics();
}

bool HttpService::authorized(const httplib::Request &req) const {
  if (opts.listen.token.empty())
    return true;
  std::string expected = "Bearer " + opts.listen.token;
  std::string given = req.get_header_value("Authorization");
  // Compare digests so neither the content nor the length of the token leaks through timing.
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char *>(expected.data()), expected.size(), a);
  SHA256(reinterpret_cast<const unsigned char *>(given.data()), given.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

httplib::Server::Handler HttpService::wrap(size_t route, Handler handler) {
  return [this, route, handler = std::move(handler)](const httplib::Request &req,
                                                     httplib::Response &res) {
    currentRoute = route;
    try {
      if (llvm::Error error = handler(req, res))
        opts.reportFailure(res, std::move(error));
    } catch (...) {
      opts.sendError(res, ErrorCode::Internal,
                     "internal error while serving " + req.method + " " + req.path);
    }
  };
}

httplib::Server::HandlerWithContentReader HttpService::wrap(size_t route, ReaderHandler handler) {
  return [this, route, handler = std::move(handler)](const httplib::Request &req,
                                                     httplib::Response &res,
                                                     const httplib::ContentReader &reader) {
    currentRoute = route;
    try {
      if (llvm::Error error = handler(req, res, reader))
        opts.reportFailure(res, std::move(error));
    } catch (...) {
      opts.sendError(res, ErrorCode::Internal,
                     "internal error while serving " + req.method + " " + req.path);
    }
  };
}

void HttpService::addRoutes(std::vector<Route> table) {
  using Method = Route::Method;
  for (Route &route : table) {
    size_t tag = routeNames.size();
    routeNames.push_back(route.name);
    llvm::StringRef name(route.name);
    size_t placeholder = name.find('{');
    subjectFromPath.push_back(!opts.subjectPlaceholder.empty() && placeholder != name.npos &&
                              name.substr(placeholder).starts_with(opts.subjectPlaceholder));
    std::visit(
        [&](auto &handler) {
          auto wrapped = wrap(tag, std::move(handler));
          switch (route.method) {
          case Method::Get:
            if constexpr (std::is_same_v<decltype(wrapped), httplib::Server::Handler>)
              http.Get(route.pattern, std::move(wrapped));
            else
              assert(false && "a GET route has no body to read");
            break;
          case Method::Put:
            http.Put(route.pattern, std::move(wrapped));
            break;
          case Method::Post:
            http.Post(route.pattern, std::move(wrapped));
            break;
          case Method::Delete:
            http.Delete(route.pattern, std::move(wrapped));
            break;
          }
        },
        route.handler);
  }
  if (opts.countByRoute)
    requestCounters =
        std::make_unique<std::atomic<prometheus::Counter *>[]>(routeNames.size() * kStatuses);
}

void HttpService::installMetrics() {
  registry = std::make_unique<prometheus::Registry>();
  const std::string &prefix = opts.metricPrefix;
  requests = &prometheus::BuildCounter()
                  .Name(prefix + "_requests_total")
                  .Help(opts.countByRoute ? "HTTP requests served, by route and status."
                                          : "HTTP requests served, by status.")
                  .Register(*registry);
  auto counter = [&](const char *name, const char *help) {
    return &prometheus::BuildCounter().Name(prefix + name).Help(help).Register(*registry).Add({});
  };
  bytesIn = counter("_received_bytes_total", "Request body bytes received.");
  bytesOut = counter("_sent_bytes_total", "Response body bytes sent.");
  workGauge = &prometheus::BuildGauge()
                   .Name(prefix + "_requests_in_flight")
                   .Help("Requests being served, probes aside: what a drain waits for.")
                   .Register(*registry)
                   .Add({});
  connectionsGauge = &prometheus::BuildGauge()
                          .Name(prefix + "_connections_open")
                          .Help("Client connections open: served, or parked between requests.")
                          .Register(*registry)
                          .Add({});
  threadsGauge = &prometheus::BuildGauge()
                      .Name(prefix + "_request_threads")
                      .Help("Threads serving requests, busy or waiting for one.")
                      .Register(*registry)
                      .Add({});
  requestSeconds = &prometheus::BuildHistogram()
                        .Name(prefix + "_request_duration_seconds")
                        .Help("Time from request line to response written.")
                        .Register(*registry)
                        .Add({}, durationBuckets());
  requestCounters = std::make_unique<std::atomic<prometheus::Counter *>[]>(kStatuses);
}

void HttpService::countRequest(size_t route, int status) {
  if (status < 0 || static_cast<size_t>(status) >= kStatuses)
    return;
  size_t tag = opts.countByRoute && route < routeNames.size() ? route : 0;
  std::atomic<prometheus::Counter *> &slot = requestCounters[tag * kStatuses + status];
  prometheus::Counter *counter = slot.load(std::memory_order_acquire);
  if (!counter) {
    // The family hands out one counter per label set, so two threads racing here both get
    // the same one.
    prometheus::Labels labels{{"status", std::to_string(status)}};
    if (opts.countByRoute)
      labels.emplace("route", routeNames[tag]);
    counter = &requests->Add(labels);
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
}

std::string HttpService::metricsText(const std::vector<prometheus::MetricFamily> &more) {
  workGauge->Set(static_cast<double>(std::max<int64_t>(0, workInFlight)));
  ParkingServer::Counts held = parking->counts();
  connectionsGauge->Set(static_cast<double>(held.open));
  threadsGauge->Set(static_cast<double>(held.threads));
  std::vector<prometheus::MetricFamily> families = registry->Collect();
  const std::string &prefix = opts.metricPrefix;
  using prometheus::MetricType;
  prometheus::MetricFamily parked =
      metricFamily(prefix + "_connections_parked",
                   "Open connections without a thread, by what they wait for: their next "
                   "request (idle), the rest of a request head (head), or a TLS handshake.",
                   MetricType::Gauge);
  addSample(parked, static_cast<double>(held.idle), "state", "idle");
  addSample(parked, static_cast<double>(held.heads), "state", "head");
  addSample(parked, static_cast<double>(held.handshakes), "state", "handshake");
  families.push_back(std::move(parked));
  prometheus::MetricFamily refused =
      metricFamily(prefix + "_connections_refused_total",
                   "Connections answered 503 overloaded and closed, by the limit they met: "
                   "--max-connections with every connection busy (connections), or "
                   "--max-connections-per-client (per_client).",
                   MetricType::Counter);
  addSample(refused, static_cast<double>(held.refused[size_t(ParkingServer::Refusal::Overloaded)]),
            "reason", "connections");
  addSample(refused, static_cast<double>(held.refused[size_t(ParkingServer::Refusal::PerClient)]),
            "reason", "per_client");
  families.push_back(std::move(refused));
  const char *kinds[] = {"idle", "head", "handshake"};
  prometheus::MetricFamily evicted =
      metricFamily(prefix + "_connections_evicted_total",
                   "Parked connections closed to admit a new one at --max-connections, by "
                   "what they waited for.",
                   MetricType::Counter);
  prometheus::MetricFamily timedOut =
      metricFamily(prefix + "_connections_timed_out_total",
                   "Parked connections closed past their timeout (keep-alive, head, "
                   "handshake), by what they waited for.",
                   MetricType::Counter);
  for (size_t kind = 0; kind < ParkingServer::kParkedKinds; ++kind) {
    addSample(evicted, static_cast<double>(held.evicted[kind]), "state", kinds[kind]);
    addSample(timedOut, static_cast<double>(held.timedOut[kind]), "state", kinds[kind]);
  }
  families.push_back(std::move(evicted));
  families.push_back(std::move(timedOut));
  families.insert(families.end(), more.begin(), more.end());
  return prometheus::TextSerializer().Serialize(families);
}

std::string HttpService::refusalResponse(ParkingServer::Refusal reason) {
  httplib::Response res;
  if (reason == ParkingServer::Refusal::PerClient)
    opts.sendError(res, ErrorCode::Overloaded,
                   llvm::formatv("this client address has its limit of {0} connections open "
                                 "(--max-connections-per-client); reuse or close one, and retry",
                                 opts.listen.maxConnectionsPerClient)
                       .str());
  else
    opts.sendError(res, ErrorCode::Overloaded,
                   llvm::formatv("the server has its limit of {0} connections open "
                                 "(--max-connections), every one busy; retry, or use another "
                                 "server",
                                 std::max(1u, opts.listen.maxConnections))
                       .str());
  // Sent before any request is read (the connection is refused as it is accepted): the id
  // is made here.
  std::string id = requestIdFor(httplib::Request());
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " +
                     (res.status == 503 ? "Service Unavailable" : "Error") + "\r\n";
  for (const auto &header : res.headers)
    head += header.first + ": " + header.second + "\r\n";
  head += "Content-Length: " + std::to_string(res.body.size()) +
          "\r\nConnection: close\r\nRetry-After: 1\r\nX-Request-Id: " + id + "\r\n\r\n";
  return head + res.body;
}

void HttpService::noteLogSubject(std::string subject) { currentSubject = std::move(subject); }

const std::string &HttpService::requestId() { return currentRequestId; }

const std::string &HttpService::requestPath() { return currentPath; }

void HttpService::logRequest(const httplib::Request &req, const httplib::Response &res,
                             size_t route, double seconds, uint64_t in, uint64_t out) {
  std::string subject = currentSubject;
  if (subject.empty() && route < subjectFromPath.size() && subjectFromPath[route] &&
      req.matches.size() > 1)
    subject = req.matches[1].str();
  LogLevel level = res.status >= 500   ? LogLevel::Error
                   : res.status >= 400 ? LogLevel::Warn
                                       : LogLevel::Info;
  llvm::SmallVector<LogField, 12> fields;
  std::string message;
  LogFormat format = logFormat();
  if (format == LogFormat::Text) {
    // The shape request lines have always had, then what identifies the request.
    char summary[96];
    std::snprintf(summary, sizeof(summary), " %d in=%llu out=%llu %.3fms", res.status,
                  static_cast<unsigned long long>(in), static_cast<unsigned long long>(out),
                  seconds * 1e3);
    // The path is the client's, decoded: quoted when it could pass for fields of its own.
    message = textLogValue(req.method) + " " + textLogValue(req.path) + summary;
    fields.push_back({"request", llvm::StringRef(currentRequestId)});
  } else {
    message = "request";
    fields.push_back({"request_id", llvm::StringRef(currentRequestId)});
    fields.push_back({"method", llvm::StringRef(req.method)});
    fields.push_back({"route", llvm::StringRef(routeName(route))});
    fields.push_back({"path", llvm::StringRef(req.path)});
    fields.push_back({"status", int64_t(res.status)});
    fields.push_back({"duration_ms", seconds * 1e3});
    fields.push_back({"bytes_in", in});
    fields.push_back({"bytes_out", out});
  }
  if (!subject.empty() && !opts.subjectKey.empty())
    fields.push_back({opts.subjectKey, llvm::StringRef(subject)});
  writeLogLine(formatLogLine(format, logTimestamp(), level, message, fields));
}

const char *HttpService::routeName(size_t tag) const {
  return tag < routeNames.size() ? routeNames[tag] : routeNames[0];
}

void HttpService::installHandlers() {
  http.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    return beforeRouting(req, res);
  });
  // Statuses httplib produces itself (no route, body over the limit, unparsable request)
  // get the same JSON error shape as ours.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request &req, httplib::Response &res) {
        return httplibError(req, res);
      }));
  http.set_exception_handler(
      [this](const httplib::Request &req, httplib::Response &res, std::exception_ptr) {
        opts.sendError(res, ErrorCode::Internal,
                       "internal error while serving " + req.method + " " + req.path);
      });
  http.set_logger([this](const httplib::Request &req, const httplib::Response &res) {
    afterResponse(req, res);
  });
}

httplib::Server::HandlerResponse HttpService::beforeRouting(const httplib::Request &req,
                                                            httplib::Response &res) {
  currentPath = req.path;
  requestStart = Clock::now();
  currentRoute = 0;
  requestCounted = true;
  currentRequestId = requestIdFor(req);
  currentSubject.clear();
  res.set_header("X-Request-Id", currentRequestId);
  inFlight++;
  requestIsWork = !isProbe(req);
  if (requestIsWork)
    workInFlight++;
  if (std::optional<std::string> ambiguity = ambiguousFraming(req)) {
    opts.sendError(res, ErrorCode::BadRequest, *ambiguity);
    // Where this body ends is the question: nothing after the headers can be trusted.
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  }
  normalizeRequest(req);
  if (std::optional<std::string> coding = refusedEncoding(req)) {
    opts.sendError(res, ErrorCode::UnsupportedEncoding,
                   "Content-Encoding '" + *coding +
                       "' is not accepted: send the body uncompressed (no route takes a "
                       "compressed body)");
    // The body is not read: closing keeps its bytes from being parsed as a next request.
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  }
  // One Transfer-Encoding, chunked (ambiguousFraming): each chunk must end exactly where its
  // size line says, which httplib's reader does not check.
  if (req.has_header("Transfer-Encoding"))
    RequestWatch::expectChunkedBody();
  // A draining server is about to close its connections: each reply says so, so that no
  // client (nor a proxy's connection pool) sends another request on one.
  if (drainStarted)
    res.set_header("Connection", "close");
  if (authorized(req))
    return httplib::Server::HandlerResponse::Unhandled;
  opts.sendError(res, ErrorCode::Unauthorized, "missing or wrong bearer token");
  res.set_header("WWW-Authenticate", "Bearer");
  // The body was not read; closing keeps its bytes from being parsed as a next request.
  res.set_header("Connection", "close");
  return httplib::Server::HandlerResponse::Handled;
}

httplib::Server::HandlerResponse HttpService::httplibError(const httplib::Request &req,
                                                           httplib::Response &res) {
  currentPath = req.path;
  if (!requestCounted && !refusalIdGiven) {
    // Refused by httplib before routing (a request line or header it cannot take): the
    // id is made here, where the reply can still carry it, and the log line uses it.
    currentRequestId = requestIdFor(req);
    currentSubject.clear();
    refusalIdGiven = true;
    res.set_header("X-Request-Id", currentRequestId);
  }
  // A request httplib refused before routing, or whose body it would not read, leaves
  // the connection out of step: the reply says it closes (and it does, see the logger),
  // so the client does not send its next request on it.
  if (!requestCounted || (res.status != 404 && res.body.empty() && res.content_length_ == 0))
    res.set_header("Connection", "close");
  if (!res.body.empty() || res.content_length_ > 0)
    return httplib::Server::HandlerResponse::Unhandled;
  if (res.status == 404)
    opts.sendError(res, ErrorCode::NotFound, "no route for " + req.method + " " + req.path);
  else if (res.status == 413)
    opts.sendError(res, ErrorCode::PayloadTooLarge, opts.payloadTooLargeMessage);
  else if (res.status < 500)
    opts.sendError(res, ErrorCode::BadRequest,
                   RequestWatch::problem().empty()
                       ? std::string("malformed HTTP request")
                       : "malformed HTTP request: " + RequestWatch::problem());
  else
    opts.sendError(res, ErrorCode::Internal, "internal error");
  return httplib::Server::HandlerResponse::Handled;
}

void HttpService::afterResponse(const httplib::Request &req, const httplib::Response &res) {
  bool counted = std::exchange(requestCounted, false);
  // A response that says the connection closes (the error handler says so for a request
  // httplib refused before routing) is the connection's last.
  if (res.get_header_value("Connection") == "close")
    closeAfterResponse();
  bool work = counted && std::exchange(requestIsWork, false);
  // Only drain() and stop() wait for a count to reach zero; waking them on every request
  // would cost each request a futex call and a context switch.
  bool lastWork = work && --workInFlight == 0 && drainStarted;
  if ((counted && --inFlight == 0 && stopWaiting) || lastWork) {
    std::lock_guard<std::mutex> lock(stopMutex);
    stopSignal.notify_all();
  }
  double seconds =
      counted ? std::chrono::duration<double>(Clock::now() - requestStart).count() : 0.0;
  uint64_t in = req.body.empty() ? contentLength(req) : req.body.size();
  uint64_t out = res.content_length_ ? res.content_length_ : res.body.size();
  requestSeconds->Observe(seconds);
  bytesIn->Increment(static_cast<double>(in));
  bytesOut->Increment(static_cast<double>(out));
  countRequest(counted ? currentRoute : 0, res.status);
  if (!counted && !std::exchange(refusalIdGiven, false)) {
    // Refused by httplib before routing, with no error reply: no id was given to it yet.
    currentRequestId = requestIdFor(req);
    currentSubject.clear();
  }
  if (opts.listen.logRequests)
    logRequest(req, res, counted ? currentRoute : 0, seconds, in, out);
}

HttpService::~HttpService() {
  if (!ownsSocketFile)
    return;
  // Only the file this server created: another may have replaced it since.
  struct stat info;
  if (lstat(opts.listen.socketPath.c_str(), &info) == 0 && S_ISSOCK(info.st_mode) &&
      info.st_dev == socketDevice && info.st_ino == socketInode)
    unlink(opts.listen.socketPath.c_str());
}

namespace {

/// Readies `path` for a unix socket: nothing there, or a stale socket (nothing accepts on
/// it), which is removed. A live socket or any other file is refused.
llvm::Error clearSocketPath(const std::string &path) {
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT)
      return llvm::Error::success();
    return llvm::createStringError("cannot listen on unix:" + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(info.st_mode))
    return llvm::createStringError("cannot listen on unix:" + path +
                                   ": the path exists and is not a socket");
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0)
    return llvm::createStringError("cannot listen on unix:" + path + ": " + std::strerror(errno));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  int connected = connect(probe, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  int connectErrno = errno;
  close(probe);
  if (connected == 0)
    return llvm::createStringError("unix:" + path + " is already in use");
  if (connectErrno != ECONNREFUSED)
    return llvm::createStringError(
        "cannot listen on unix:" + path +
        ": the socket there could not be probed: " + std::strerror(connectErrno));
  if (unlink(path.c_str()) != 0)
    return llvm::createStringError("cannot listen on unix:" + path +
                                   ": removing the stale socket: " + std::strerror(errno));
  return llvm::Error::success();
}

} // namespace

llvm::Error HttpService::bind() {
  if (wantsTls(opts.listen) || !isLoopbackHost(opts.listen.host))
    if (llvm::Error error = checkListenTls(opts.listen))
      return error;
  if (!tlsProblem.empty())
    return llvm::createStringError(tlsProblem);
  // httplib's default options add SO_REUSEPORT, with which a second server on the same port
  // binds silently and the two split the requests. SO_REUSEADDR only lets a restarted
  // server bind while the old one's connections linger in TIME_WAIT.
  http.set_socket_options([this](socket_t sock) {
    listenFd = sock;
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const std::string &path = opts.listen.socketPath;
  if (!path.empty()) {
    if (llvm::Error error = clearSocketPath(path))
      return error;
    http.set_address_family(AF_UNIX);
    // The socket file is created by bind() with the umask's mode: 0600 from its first
    // moment, so no other user can connect in between.
    mode_t previous = umask(0177);
    bool bound = http.bind_to_port(path, 80);
    int bindErrno = errno;
    umask(previous);
    if (!bound)
      return llvm::createStringError("cannot listen on unix:" + path + ": " +
                                     std::strerror(bindErrno));
    struct stat info;
    if (lstat(path.c_str(), &info) == 0) {
      ownsSocketFile = true;
      socketDevice = info.st_dev;
      socketInode = info.st_ino;
    }
    boundPort = 0;
  } else {
    if (opts.listen.port == 0) {
      boundPort = http.bind_to_any_port(opts.listen.host);
    } else if (http.bind_to_port(opts.listen.host, opts.listen.port)) {
      boundPort = opts.listen.port;
    } else {
      boundPort = -1;
    }
    if (boundPort <= 0) {
      std::string where = address();
      if (errno == EADDRINUSE)
        return llvm::createStringError(where + " is already in use");
      return llvm::createStringError("cannot listen on " + where + ": " + std::strerror(errno));
    }
  }
  // A second listen() on a listening socket only changes its backlog.
  if (listenFd >= 0)
    listen(listenFd, kListenBacklog);
  return llvm::Error::success();
}

std::string HttpService::address() const {
  if (!opts.listen.socketPath.empty())
    return "unix:" + opts.listen.socketPath;
  bool v6 = opts.listen.host.find(':') != std::string::npos;
  int port = boundPort > 0 ? boundPort : opts.listen.port;
  return (wantsTls(opts.listen) ? "https://" : "") +
         (v6 ? "[" + opts.listen.host + "]" : opts.listen.host) + ":" + std::to_string(port);
}

llvm::Error HttpService::run() {
  {
    // Under the lock that stop() takes to set `stopping`: either this sees it, or stop()
    // sees that run() began and stops the listener.
    std::lock_guard<std::mutex> lock(stopMutex);
    if (stopping)
      return llvm::Error::success();
    runEntered = true;
  }
  bool served = http.listen_after_bind();
  listenReturned = true;
  // As with httplib's own threads, run() returns once every request has been answered:
  // stop() closes the connections, and the threads end with their last request.
  if (!served)
    parking->closeConnections(); // The listener failed: nothing else will.
  parking->awaitThreads();
  std::lock_guard<std::mutex> lock(stopMutex);
  if (!served && !stopping)
    return llvm::createStringError(opts.name + " on " + address() + " stopped serving");
  return llvm::Error::success();
}

void HttpService::stop() {
  {
    std::lock_guard<std::mutex> lock(stopMutex);
    stopping = true;
  }
  stopSignal.notify_all();
  // httplib's stop() does nothing until the accept loop runs; wait out that short window
  // when run() has been entered but is not listening yet. Once the loop has returned (a
  // stop() before this one, or a listener that failed), there is nothing to wait for: the
  // connections below must still be closed, or run() waits for their threads for ever.
  while (runEntered && !listenReturned && !http.is_running())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  http.stop();
  if (!runEntered)
    return;
  // httplib's stop() closes the listener, but a worker holding an idle keep-alive
  // connection waits for the next request until the keep-alive timeout, and run() waits for
  // every worker. Let requests in flight finish (bounded), then wake the idle connections by
  // shutting their sockets down; httplib then closes them.
  // After a drain, what is still in flight came in as the drain ended (the listener is
  // closed now, and a keep-alive connection takes no request after this one): it gets a short
  // while.
  stopWaiting = true;
  {
    std::unique_lock<std::mutex> lock(stopMutex);
    stopSignal.wait_for(lock, drainStarted ? std::chrono::seconds(2) : std::chrono::seconds(10),
                        [&] { return inFlight <= 0; });
  }
  parking->closeConnections();
}

void HttpService::drain() {
  drainStarted = true;
  std::unique_lock<std::mutex> lock(stopMutex);
  stopSignal.wait_for(lock, opts.listen.drainTimeout,
                      [&] { return stopping || drainCut || workInFlight <= 0; });
}

void HttpService::cutDrainShort() {
  {
    std::lock_guard<std::mutex> lock(stopMutex);
    drainCut = true;
  }
  stopSignal.notify_all();
}

bool HttpService::waitForStop(Clock::duration timeout) {
  std::unique_lock<std::mutex> lock(stopMutex);
  return stopSignal.wait_for(lock, timeout, [&] { return stopping; });
}

Service::~Service() = default;

} // namespace courier::transport
