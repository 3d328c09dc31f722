// courier-serve's HTTP layer: the only file of the tool that touches cpp-httplib. Handlers
// translate a request into ModuleStore calls and the answer back; every route goes through
// one wrapper that turns an llvm::Error (or a stray exception) into
// {"error":{"code","message"}} with the status of its code, so handlers never throw.
#include "tools/courier-serve/RestService.h"

#include "transport/HttpServer.h"
#include "transport/Wire.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

namespace courier::serve {

namespace json = llvm::json;
namespace wire = courier::transport::wire;
using Clock = std::chrono::steady_clock;

namespace {

/// A double as Prometheus expects it; formatv would round to two decimals.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

/// Prometheus histogram with fixed buckets in seconds.
class Histogram {
public:
  void observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i])
      ++i;
    counts[i].fetch_add(1, std::memory_order_relaxed);
    sumNanos.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  }

  void render(std::string &out, const char *name, const char *help) const {
    out += llvm::formatv("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help).str();
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= kBounds.size(); ++i) {
      cumulative += counts[i].load(std::memory_order_relaxed);
      std::string le = i < kBounds.size() ? number(kBounds[i]) : "+Inf";
      out += llvm::formatv("{0}_bucket{{le=\"{1}\"} {2}\n", name, le, cumulative).str();
    }
    out += llvm::formatv("{0}_sum {1}\n{0}_count {2}\n", name,
                         number(static_cast<double>(sumNanos.load()) / 1e9), cumulative)
               .str();
  }

private:
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts{};
  std::atomic<uint64_t> sumNanos{0};
};

/// The route templates requests are counted under, so labels stay few.
constexpr const char *kRoutes[] = {
    "none",
    "GET /v1/health",
    "GET /v1/ready",
    "GET /metrics",
    "GET /v1/modules",
    "POST /v1/modules",
    "GET /v1/modules/{name}",
    "PUT /v1/modules/{name}",
    "DELETE /v1/modules/{name}",
    "POST /v1/modules/{name}/invoke/{entry}",
};
constexpr size_t kNumRoutes = sizeof(kRoutes) / sizeof(kRoutes[0]);
enum Route : size_t {
  NoRoute,
  Health,
  Ready,
  MetricsRoute,
  ListModules,
  CreateModule,
  GetModule,
  PutModule,
  DeleteModule,
  Invoke,
};
constexpr size_t kMaxStatus = 600;

struct Metrics {
  /// [route][status]
  std::array<std::array<std::atomic<uint64_t>, kMaxStatus>, kNumRoutes> requests{};
  std::atomic<uint64_t> bytesIn{0}, bytesOut{0};
  Histogram requestSeconds, invokeSeconds, compileSeconds;
};

// Set by the pre-routing handler and the route wrapper, read by the logger; all run on the
// thread that serves the request.
thread_local Clock::time_point requestStart;
thread_local Route currentRoute = NoRoute;
thread_local bool requestCounted = false;

/// Shuts down (without closing: the fds stay httplib's) every connected TCP socket of this
/// process whose local port is `port`, i.e. the connections this server accepted. The same
/// remedy as the executor's (transport/HttpServer.cpp) for the same httplib limitation.
void shutdownAcceptedConnections(int port) {
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = 0;
    if (llvm::StringRef(entry.path().filename().string()).getAsInteger(10, fd))
      continue;
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode))
      continue;
    sockaddr_storage local{}, peer{};
    socklen_t localLength = sizeof(local), peerLength = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &localLength) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &peerLength) != 0)
      continue;
    int localPort =
        local.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in *>(&local)->sin_port)
        : local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&local)->sin6_port)
                                      : -1;
    if (localPort == port)
      shutdown(fd, SHUT_RDWR);
  }
}

/// llvm::json wants valid UTF-8; messages may quote arbitrary source text.
std::string utf8(llvm::StringRef text) {
  return json::isUTF8(text) ? text.str() : json::fixUTF8(text);
}

std::string dump(const json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text;
}

void sendJson(httplib::Response &res, int status, json::Value body) {
  res.status = status;
  // The newline keeps consecutive curl outputs on lines of their own.
  res.set_content(dump(body) + "\n", wire::kJsonContentType);
}

json::Value diagnosticJson(const Diagnostic &d) {
  return json::Object{{"file", utf8(d.file)},
                      {"line", d.line},
                      {"column", d.column},
                      {"severity", d.severity},
                      {"message", utf8(d.message)}};
}

void sendError(httplib::Response &res, llvm::StringRef code, llvm::StringRef message,
               const std::vector<Diagnostic> &diagnostics = {}) {
  json::Object error{{"code", code.str()}, {"message", utf8(message)}};
  if (!diagnostics.empty()) {
    json::Array list;
    for (const Diagnostic &d : diagnostics)
      list.push_back(diagnosticJson(d));
    error["diagnostics"] = std::move(list);
  }
  sendJson(res, statusForCode(code), json::Object{{"error", std::move(error)}});
}

void reportFailure(httplib::Response &res, llvm::Error error) {
  llvm::handleAllErrors(
      std::move(error),
      [&](const ServeError &e) { sendError(res, e.code, e.message, e.diagnostics); },
      [&](const llvm::ErrorInfoBase &e) { sendError(res, "internal", e.message()); });
}

using Handler = std::function<llvm::Error(const httplib::Request &, httplib::Response &)>;
using ReaderHandler = std::function<llvm::Error(const httplib::Request &, httplib::Response &,
                                                const httplib::ContentReader &)>;

/// The one place failures become responses; nothing thrown below escapes into httplib.
httplib::Server::Handler wrap(Route route, Handler handler) {
  return
      [route, handler = std::move(handler)](const httplib::Request &req, httplib::Response &res) {
        currentRoute = route;
        try {
          if (llvm::Error error = handler(req, res))
            reportFailure(res, std::move(error));
        } catch (...) {
          sendError(res, "internal", "internal error while serving " + req.method + " " + req.path);
        }
      };
}

httplib::Server::HandlerWithContentReader wrap(Route route, ReaderHandler handler) {
  return [route, handler = std::move(handler)](const httplib::Request &req, httplib::Response &res,
                                               const httplib::ContentReader &reader) {
    currentRoute = route;
    try {
      if (llvm::Error error = handler(req, res, reader))
        reportFailure(res, std::move(error));
    } catch (...) {
      sendError(res, "internal", "internal error while serving " + req.method + " " + req.path);
    }
  };
}

uint64_t contentLength(const httplib::Request &req) {
  uint64_t length = 0;
  if (llvm::StringRef(req.get_header_value("Content-Length")).getAsInteger(10, length))
    return 0;
  return length;
}

/// Reads and discards the rest of a body, so a refused request leaves the keep-alive
/// connection in step.
void drain(const httplib::ContentReader &reader, httplib::Response &res) {
  if (!reader([](const char *, size_t) { return true; }))
    res.set_header("Connection", "close");
}

/// A body cut short, or over the limit: httplib refuses a Content-Length over the limit with
/// 413 itself; a chunked body is counted here and reading stops at the limit. Either way the
/// unread rest of the body would be parsed as the next request, so the connection closes.
llvm::Error readFailure(httplib::Response &res, bool overLimit, uint64_t limit) {
  res.set_header("Connection", "close");
  if (overLimit || res.status == 413)
    return makeServeError("payload_too_large", "request body exceeds the server's limit of " +
                                                   llvm::Twine(limit) + " bytes");
  return makeServeError("bad_request", "request body could not be read");
}

llvm::Expected<std::string> readBody(const httplib::Request &req, httplib::Response &res,
                                     const httplib::ContentReader &reader, uint64_t limit) {
  std::string body;
  if (req.has_header("Content-Length"))
    body.reserve(std::min<uint64_t>(contentLength(req), limit));
  bool overLimit = false;
  if (!reader([&](const char *data, size_t size) {
        if (body.size() + size > limit) {
          overLimit = true;
          return false;
        }
        body.append(data, size);
        return true;
      }))
    return readFailure(res, overLimit, limit);
  return body;
}

llvm::Expected<json::Object> parseObject(llvm::StringRef body, llvm::StringRef what) {
  // Bounded nesting: llvm::json parses recursively, on the stack of the thread serving.
  llvm::Expected<json::Value> parsed = parseJSON(body);
  if (!parsed)
    return makeServeError("bad_request",
                          what + " is not JSON: " + llvm::toString(parsed.takeError()));
  json::Object *object = parsed->getAsObject();
  if (!object)
    return makeServeError("bad_request", what + " must be a JSON object");
  return std::move(*object);
}

/// {"optLevel": 0-3, "executor": "local" | "host:port"}; unknown keys are refused so a typo
/// does not go unnoticed.
llvm::Expected<ModuleOptions> parseOptions(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  if (!object)
    return makeServeError("bad_request", "'options' must be an object");
  ModuleOptions options;
  for (const auto &[key, field] : *object) {
    if (key == "optLevel") {
      std::optional<int64_t> level = field.getAsInteger();
      if (!level || *level < 0 || *level > 3)
        return makeServeError("bad_request", "'options.optLevel' must be an integer from 0 to 3");
      options.optLevel = static_cast<unsigned>(*level);
    } else if (key == "executor") {
      std::optional<llvm::StringRef> executor = field.getAsString();
      unsigned port = 0;
      bool valid = executor &&
                   (*executor == "local" || (executor->contains(':') &&
                                             !executor->rsplit(':').second.getAsInteger(10, port) &&
                                             port > 0 && port < 65536));
      if (!valid)
        return makeServeError("bad_request",
                              "'options.executor' must be \"local\" or \"host:port\"");
      options.executor = executor->str();
    } else {
      return makeServeError("bad_request",
                            "unknown option '" + key.str() + "' (known: optLevel, executor)");
    }
  }
  return options;
}

std::string isoTime(std::chrono::system_clock::time_point time) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc;
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

json::Value specJson(const TensorSpec &spec) {
  json::Array shape;
  if (!spec.isScalar)
    for (int64_t d : spec.shape)
      shape.push_back(d);
  return json::Object{
      {"dtype", dtypeName(spec.dtype)}, {"shape", std::move(shape)}, {"type", spec.str()}};
}

json::Value entriesJson(const std::vector<EntrySignature> &entries) {
  json::Array list;
  for (const EntrySignature &entry : entries) {
    json::Array inputs, outputs;
    for (const TensorSpec &spec : entry.inputs)
      inputs.push_back(specJson(spec));
    for (const TensorSpec &spec : entry.outputs)
      outputs.push_back(specJson(spec));
    list.push_back(json::Object{
        {"name", entry.name}, {"inputs", std::move(inputs)}, {"outputs", std::move(outputs)}});
  }
  return list;
}

json::Value infoJson(const ModuleInfo &info) {
  json::Value lastError = nullptr;
  if (info.lastError)
    lastError = json::Object{{"code", info.lastError->code},
                             {"message", utf8(info.lastError->message)},
                             {"at", isoTime(info.lastError->at)}};
  json::Value executor = nullptr;
  if (!info.options.executor.empty())
    executor = info.options.executor;
  const PhaseTimes &p = info.phases;
  return json::Object{
      {"name", info.name},
      {"version", static_cast<int64_t>(info.version)},
      {"entries", entriesJson(info.entries)},
      {"options", json::Object{{"optLevel", info.options.optLevel}, {"executor", executor}}},
      {"origin", utf8(info.origin)},
      {"sha256", info.sha256},
      {"loadedAt", isoTime(info.loadedAt)},
      {"compileMs", info.compileMs},
      {"phases", json::Object{{"parseMs", p.parse},
                              {"passesMs", p.passes},
                              {"crossCompileMs", p.crossCompile},
                              {"linkMs", p.link},
                              {"cacheHit", p.cacheHit}}},
      {"calls", static_cast<int64_t>(info.calls)},
      {"failedCalls", static_cast<int64_t>(info.failedCalls)},
      {"reloads", static_cast<int64_t>(info.reloads)},
      {"failedReloads", static_cast<int64_t>(info.failedReloads)},
      {"lastError", std::move(lastError)},
  };
}

/// Frame errors from the shared reader keep their message; their code becomes ours.
llvm::Error frameError(llvm::Error error) {
  return llvm::handleErrors(std::move(error), [](const wire::WireError &e) {
    return makeServeError(e.code == "payload_too_large" ? "payload_too_large" : "bad_request",
                          e.message);
  });
}

} // namespace

struct RestService::Impl {
  ServeOptions options;
  ModuleStore &store;
  httplib::Server server;
  int boundPort = 0;
  Metrics metrics;
  std::atomic<bool> ready{false};

  std::mutex stopMutex;
  std::condition_variable stopSignal;
  bool stopping = false;
  std::atomic<bool> runEntered{false}, runExited{false}, draining{false};
  /// Requests between routing and their response being written.
  std::atomic<int64_t> inFlight{0};

  Impl(ServeOptions options, ModuleStore &store) : options(std::move(options)), store(store) {}

  void installRoutes();
  bool authorized(const httplib::Request &req) const;
  std::string renderMetrics();

  llvm::Error createModule(const httplib::Request &req, httplib::Response &res,
                           const httplib::ContentReader &reader);
  llvm::Error putModule(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader);
  llvm::Error invoke(const httplib::Request &req, httplib::Response &res,
                     const httplib::ContentReader &reader);
  llvm::Error invokeJson(const Pinned &pinned, const EntrySignature &entry,
                         const httplib::Request &req, httplib::Response &res,
                         const httplib::ContentReader &reader, bool &called);
  llvm::Error invokeFrame(const Pinned &pinned, const EntrySignature &entry,
                          const httplib::Request &req, httplib::Response &res,
                          const httplib::ContentReader &reader, bool &called);
  llvm::Expected<std::vector<Tensor>> call(const Pinned &pinned, const EntrySignature &entry,
                                           llvm::ArrayRef<Tensor> inputs, bool &called);
};

bool RestService::Impl::authorized(const httplib::Request &req) const {
  if (options.token.empty())
    return true;
  std::string expected = "Bearer " + options.token;
  std::string given = req.get_header_value("Authorization");
  // Compare digests so neither the content nor the length of the token leaks through timing.
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char *>(expected.data()), expected.size(), a);
  SHA256(reinterpret_cast<const unsigned char *>(given.data()), given.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

llvm::Error RestService::Impl::createModule(const httplib::Request &req, httplib::Response &res,
                                            const httplib::ContentReader &reader) {
  llvm::Expected<std::string> body = readBody(req, res, reader, options.maxBodyBytes);
  if (!body)
    return body.takeError();
  llvm::Expected<json::Object> request = parseObject(*body, "the request body");
  if (!request)
    return request.takeError();
  std::optional<llvm::StringRef> name = request->getString("name");
  std::optional<llvm::StringRef> mlir = request->getString("mlir");
  if (!name || !mlir)
    return makeServeError("bad_request",
                          "expected {\"name\": string, \"mlir\": string, \"options\": {...}}");
  std::optional<ModuleOptions> moduleOptions;
  if (const json::Value *given = request->get("options")) {
    llvm::Expected<ModuleOptions> parsed = parseOptions(*given);
    if (!parsed)
      return parsed.takeError();
    moduleOptions = std::move(*parsed);
  }
  auto started = Clock::now();
  llvm::Expected<LoadResult> loaded =
      store.load(*name, *mlir, moduleOptions, ModuleStore::Mode::Create, "api");
  metrics.compileSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
  if (!loaded)
    return loaded.takeError();
  res.set_header("Location", "/v1/modules/" + loaded->info.name);
  sendJson(res, 201, infoJson(loaded->info));
  return llvm::Error::success();
}

llvm::Error RestService::Impl::putModule(const httplib::Request &req, httplib::Response &res,
                                         const httplib::ContentReader &reader) {
  std::string name = req.matches[1];
  llvm::Expected<std::string> body = readBody(req, res, reader, options.maxBodyBytes);
  if (!body)
    return body.takeError();
  std::string mlir;
  std::optional<ModuleOptions> moduleOptions;
  // Plain MLIR text is accepted too, so `curl --data-binary @file.mlir` replaces a module.
  if (llvm::StringRef(req.get_header_value("Content-Type")).starts_with("text/plain")) {
    mlir = std::move(*body);
  } else {
    llvm::Expected<json::Object> request = parseObject(*body, "the request body");
    if (!request)
      return request.takeError();
    std::optional<llvm::StringRef> text = request->getString("mlir");
    if (!text)
      return makeServeError("bad_request", "expected {\"mlir\": string, \"options\": {...}}");
    if (std::optional<llvm::StringRef> bodyName = request->getString("name"))
      if (*bodyName != name)
        return makeServeError("bad_request",
                              "the body names module '" + *bodyName + "', the path '" + name + "'");
    mlir = text->str();
    if (const json::Value *given = request->get("options")) {
      llvm::Expected<ModuleOptions> parsed = parseOptions(*given);
      if (!parsed)
        return parsed.takeError();
      moduleOptions = std::move(*parsed);
    }
  }
  auto started = Clock::now();
  llvm::Expected<LoadResult> loaded =
      store.load(name, mlir, moduleOptions, ModuleStore::Mode::Upsert, "api");
  metrics.compileSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
  if (!loaded)
    return loaded.takeError();
  if (loaded->created)
    res.set_header("Location", "/v1/modules/" + name);
  sendJson(res, loaded->created ? 201 : 200, infoJson(loaded->info));
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>> RestService::Impl::call(const Pinned &pinned,
                                                            const EntrySignature &entry,
                                                            llvm::ArrayRef<Tensor> inputs,
                                                            bool &called) {
  called = true;
  auto started = Clock::now();
  llvm::Expected<std::vector<Tensor>> outputs = store.invoke(pinned, entry.name, inputs);
  metrics.invokeSeconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
  return outputs;
}

llvm::Error RestService::Impl::invoke(const httplib::Request &req, httplib::Response &res,
                                      const httplib::ContentReader &reader) {
  llvm::Expected<Pinned> pinned = store.pin(req.matches[1].str());
  if (!pinned) {
    drain(reader, res);
    return pinned.takeError();
  }
  llvm::Expected<const EntrySignature *> entry = store.entry(*pinned, req.matches[2].str());
  if (!entry) {
    drain(reader, res);
    return entry.takeError();
  }
  // The version pinned here serves the whole call, even if a reload lands meanwhile.
  res.set_header("X-Courier-Module-Version", std::to_string(pinned->version));
  std::string contentType = req.get_header_value("Content-Type");
  bool called = false;
  llvm::Error error = llvm::StringRef(contentType).starts_with(wire::kFrameContentType)
                          ? invokeFrame(*pinned, **entry, req, res, reader, called)
                          : invokeJson(*pinned, **entry, req, res, reader, called);
  if (!error || called)
    return error; // The store counted the call and any failure of it.
  return llvm::handleErrors(std::move(error), [&](std::unique_ptr<ServeError> e) -> llvm::Error {
    store.recordCallFailure(*pinned, e->code, e->message);
    return llvm::Error(std::move(e));
  });
}

llvm::Error RestService::Impl::invokeJson(const Pinned &pinned, const EntrySignature &entry,
                                          const httplib::Request &req, httplib::Response &res,
                                          const httplib::ContentReader &reader, bool &called) {
  llvm::Expected<std::string> body = readBody(req, res, reader, options.maxBodyBytes);
  if (!body)
    return body.takeError();
  llvm::Expected<json::Object> request = parseObject(*body, "the request body");
  if (!request)
    return request.takeError();
  const json::Array *given = request->getArray("inputs");
  if (!given)
    return makeServeError("bad_request", "expected {\"inputs\": [tensor, ...]}");
  if (given->size() != entry.inputs.size())
    return makeServeError("invalid_input", "entry '" + entry.name + "' takes " +
                                               llvm::Twine(entry.inputs.size()) + " inputs, got " +
                                               llvm::Twine(given->size()));
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < given->size(); ++i) {
    llvm::Expected<Tensor> tensor = tensorFromJSON((*given)[i], entry.inputs[i]);
    if (!tensor)
      return makeServeError("invalid_input",
                            "input " + llvm::Twine(i) + ": " + llvm::toString(tensor.takeError()));
    inputs.push_back(std::move(*tensor));
  }
  body->clear();
  body->shrink_to_fit();
  llvm::Expected<std::vector<Tensor>> outputs = call(pinned, entry, inputs, called);
  if (!outputs)
    return outputs.takeError();
  json::Array list;
  for (const Tensor &output : *outputs)
    list.push_back(tensorToJSON(output));
  sendJson(res, 200,
           json::Object{{"module", pinned.name},
                        {"version", static_cast<int64_t>(pinned.version)},
                        {"outputs", std::move(list)}});
  return llvm::Error::success();
}

llvm::Error RestService::Impl::invokeFrame(const Pinned &pinned, const EntrySignature &entry,
                                           const httplib::Request &req, httplib::Response &res,
                                           const httplib::ContentReader &reader, bool &called) {
  std::vector<Tensor> inputs;
  bool hasLength = req.has_header("Content-Length");
  uint64_t length = contentLength(req);
  wire::FrameReader frame([&](llvm::StringRef line)
                              -> llvm::Expected<std::vector<wire::Destination>> {
    llvm::Expected<json::Object> header = parseObject(line, "the frame header");
    if (!header)
      return header.takeError();
    const json::Array *given = header->getArray("inputs");
    if (!given)
      return makeServeError("bad_request", "expected a frame header {\"inputs\": [{\"dtype\", "
                                           "\"shape\"}, ...]}");
    uint64_t total = 0;
    for (size_t i = 0; i < given->size(); ++i) {
      const json::Object *item = (*given)[i].getAsObject();
      std::optional<llvm::StringRef> dtypeName = item ? item->getString("dtype") : std::nullopt;
      const json::Array *shape = item ? item->getArray("shape") : nullptr;
      if (!dtypeName || !shape)
        return makeServeError("bad_request", "frame input " + llvm::Twine(i) +
                                                 " must be {\"dtype\": string, \"shape\": [...]}");
      std::optional<DType> dtype = parseDType(*dtypeName);
      if (!dtype)
        return makeServeError("invalid_input", "frame input " + llvm::Twine(i) +
                                                   ": unknown dtype '" + *dtypeName + "'");
      Tensor tensor;
      tensor.dtype = *dtype;
      for (const json::Value &d : *shape) {
        std::optional<int64_t> size = d.getAsInteger();
        if (!size || *size < 0)
          return makeServeError("bad_request", "frame input " + llvm::Twine(i) +
                                                   ": \"shape\" must hold non-negative integers");
        tensor.shape.push_back(*size);
      }
      llvm::Expected<uint64_t> bytes =
          wire::packedBytes(static_cast<int64_t>(dtypeSize(*dtype)), tensor.shape);
      if (!bytes)
        return frameError(bytes.takeError());
      if (std::optional<int64_t> declared = item->getInteger("bytes"))
        if (static_cast<uint64_t>(*declared) != *bytes)
          return makeServeError("bad_request", "frame input " + llvm::Twine(i) + " declares " +
                                                   llvm::Twine(*declared) +
                                                   " bytes, its shape needs " +
                                                   llvm::Twine(*bytes));
      if (std::optional<int64_t> offset = item->getInteger("offset"))
        if (static_cast<uint64_t>(*offset) != total)
          return makeServeError("bad_request", "frame input " + llvm::Twine(i) +
                                                   " must start at offset " + llvm::Twine(total));
      total += *bytes;
      if (total > options.maxBodyBytes)
        return makeServeError("payload_too_large", "frame inputs exceed the server's limit of " +
                                                       llvm::Twine(options.maxBodyBytes) +
                                                       " bytes");
      inputs.push_back(std::move(tensor));
    }
    // Checked before allocating, so a small request cannot make the server reserve memory
    // for tensors it never sends.
    if (hasLength && length != line.size() + 1 + total)
      return makeServeError("bad_request", "the frame header declares " + llvm::Twine(total) +
                                               " bytes of tensors, the body carries " +
                                               llvm::Twine(length - line.size() - 1));
    std::vector<wire::Destination> destinations;
    for (size_t i = 0; i < inputs.size(); ++i) {
      uint64_t bytes = static_cast<uint64_t>(inputs[i].numElements()) * dtypeSize(inputs[i].dtype);
      inputs[i].bytes.resize(bytes);
      destinations.push_back({reinterpret_cast<char *>(inputs[i].bytes.data()), bytes});
    }
    return destinations;
  });
  // After a framing error keep reading (and discarding) so the connection stays usable.
  llvm::Error failure = llvm::Error::success();
  bool failed = false, overLimit = false;
  uint64_t received = 0;
  if (!reader([&](const char *data, size_t size) {
        received += size;
        if (received > options.maxBodyBytes) {
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
    return readFailure(res, overLimit, options.maxBodyBytes);
  }
  if (failed)
    return frameError(std::move(failure));
  if (llvm::Error error = frame.finish())
    return frameError(std::move(error));

  llvm::Expected<std::vector<Tensor>> outputs = call(pinned, entry, inputs, called);
  if (!outputs)
    return outputs.takeError();
  inputs.clear();

  // The reply streams straight from the output tensors, released once sent.
  struct Reply {
    std::vector<Tensor> tensors;
    std::unique_ptr<wire::FrameWriter> writer;
  };
  auto reply = std::make_shared<Reply>();
  reply->tensors = std::move(*outputs);
  std::vector<transport::TensorView> views;
  json::Array described;
  uint64_t offset = 0;
  for (const Tensor &t : reply->tensors) {
    auto elemSize = static_cast<int64_t>(dtypeSize(t.dtype));
    views.push_back(
        transport::TensorView{t.bytes.data(), elemSize, t.shape, wire::packedStrides(t.shape)});
    json::Array shape;
    for (int64_t d : t.shape)
      shape.push_back(d);
    described.push_back(json::Object{{"dtype", dtypeName(t.dtype)},
                                     {"shape", std::move(shape)},
                                     {"offset", static_cast<int64_t>(offset)},
                                     {"bytes", static_cast<int64_t>(t.bytes.size())}});
    offset += t.bytes.size();
  }
  std::string header = dump(json::Object{{"module", pinned.name},
                                         {"version", static_cast<int64_t>(pinned.version)},
                                         {"outputs", std::move(described)}});
  reply->writer = std::make_unique<wire::FrameWriter>(std::move(header), std::move(views));
  res.status = 200;
  // A small reply goes out in one piece: a streamed one costs extra writes per request.
  constexpr uint64_t kStreamAbove = 64 << 10;
  if (reply->writer->size() <= kStreamAbove) {
    std::string body;
    body.reserve(reply->writer->size());
    bool progressed = true;
    while (body.size() < reply->writer->size() && progressed) {
      size_t before = body.size();
      reply->writer->writeNext(body.size(), [&](const char *data, size_t size) {
        body.append(data, size);
        return true;
      });
      progressed = body.size() > before;
    }
    res.set_content(std::move(body), wire::kFrameContentType);
    return llvm::Error::success();
  }
  res.set_content_provider(reply->writer->size(), wire::kFrameContentType,
                           [reply](size_t offset, size_t, httplib::DataSink &sink) {
                             return reply->writer->writeNext(offset,
                                                             [&](const char *data, size_t size) {
                                                               return sink.write(data, size);
                                                             });
                           });
  return llvm::Error::success();
}

std::string RestService::Impl::renderMetrics() {
  std::string out;
  auto counter = [&](const char *name, const char *help, uint64_t value) {
    out += llvm::formatv("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, value).str();
  };
  out += "# HELP courier_serve_requests_total HTTP requests served, by route and status.\n"
         "# TYPE courier_serve_requests_total counter\n";
  for (size_t route = 0; route < kNumRoutes; ++route)
    for (size_t status = 0; status < kMaxStatus; ++status)
      if (uint64_t n = metrics.requests[route][status].load())
        out += llvm::formatv("courier_serve_requests_total{{route=\"{0}\",status=\"{1}\"} {2}\n",
                             kRoutes[route], status, n)
                   .str();
  const StoreCounters &c = store.counters();
  counter("courier_serve_invokes_total", "Entry invocations.", c.invokes);
  counter("courier_serve_invoke_failures_total", "Invocations that failed (inputs or executor).",
          c.invokeFailures);
  counter("courier_serve_compiles_total", "Compiles finished (the engine's cache hits included).",
          c.compiles);
  counter("courier_serve_compile_failures_total", "Compiles that failed.", c.compileFailures);
  counter("courier_serve_compile_timeouts_total",
          "Compiles a request stopped waiting for (compile_timeout).", c.compileTimeouts);
  counter("courier_serve_compiles_discarded_total",
          "Compiles that finished after their request gave up; their result was dropped.",
          c.discardedCompiles);
  out += llvm::formatv("# HELP courier_serve_compile_seconds_total Time spent compiling.\n"
                       "# TYPE courier_serve_compile_seconds_total counter\n"
                       "courier_serve_compile_seconds_total {0}\n",
                       number(static_cast<double>(c.compileNanos.load()) / 1e9))
             .str();
  out += llvm::formatv("# HELP courier_serve_reloads_total Module replacements, by outcome.\n"
                       "# TYPE courier_serve_reloads_total counter\n"
                       "courier_serve_reloads_total{{outcome=\"ok\"} {0}\n"
                       "courier_serve_reloads_total{{outcome=\"failed\"} {1}\n",
                       c.reloadsOk.load(), c.reloadsFailed.load())
             .str();
  out += llvm::formatv("# HELP courier_serve_modules Modules loaded.\n"
                       "# TYPE courier_serve_modules gauge\ncourier_serve_modules {0}\n",
                       store.size())
             .str();
  counter("courier_serve_received_bytes_total", "Request body bytes received.", metrics.bytesIn);
  counter("courier_serve_sent_bytes_total", "Response body bytes sent.", metrics.bytesOut);
  metrics.requestSeconds.render(out, "courier_serve_request_duration_seconds",
                                "Time from request line to response written.");
  metrics.invokeSeconds.render(out, "courier_serve_invoke_duration_seconds",
                               "Time spent in the engine's invoke.");
  metrics.compileSeconds.render(out, "courier_serve_compile_request_duration_seconds",
                                "Time a create or replace request waited for its compile.");
  return out;
}

void RestService::Impl::installRoutes() {
  const std::string module = R"(/v1/modules/([A-Za-z0-9_][A-Za-z0-9_.-]{0,63}))";
  const std::string entry = R"(([A-Za-z_.$][A-Za-z0-9_.$-]{0,255}))";

  server.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    requestStart = Clock::now();
    currentRoute = NoRoute;
    requestCounted = true;
    inFlight++;
    if (authorized(req))
      return httplib::Server::HandlerResponse::Unhandled;
    sendError(res, "unauthorized", "missing or wrong bearer token");
    res.set_header("WWW-Authenticate", "Bearer");
    // The body was not read; closing keeps its bytes from being parsed as a next request.
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Statuses httplib produces itself (no route, body over the limit, unparsable request) get
  // the same JSON error shape as ours.
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty() || res.content_length_ > 0)
          return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404)
          sendError(res, "not_found", "no route for " + req.method + " " + req.path);
        else if (res.status == 413)
          sendError(res, "payload_too_large",
                    "request body exceeds the server's limit of " +
                        std::to_string(options.maxBodyBytes) + " bytes");
        else if (res.status < 500)
          sendError(res, "bad_request", "malformed HTTP request");
        else
          sendError(res, "internal", "internal error");
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [](const httplib::Request &req, httplib::Response &res, std::exception_ptr) {
        sendError(res, "internal", "internal error while serving " + req.method + " " + req.path);
      });

  server.set_logger([this](const httplib::Request &req, const httplib::Response &res) {
    // Only stop() waits for the count to reach zero, so only a draining server is woken.
    if (std::exchange(requestCounted, false) && --inFlight == 0 && draining) {
      std::lock_guard<std::mutex> lock(stopMutex);
      stopSignal.notify_all();
    }
    double seconds = std::chrono::duration<double>(Clock::now() - requestStart).count();
    uint64_t in = req.body.empty() ? contentLength(req) : req.body.size();
    uint64_t out = res.content_length_ ? res.content_length_ : res.body.size();
    metrics.requestSeconds.observe(seconds);
    metrics.bytesIn += in;
    metrics.bytesOut += out;
    if (res.status >= 0 && static_cast<size_t>(res.status) < kMaxStatus)
      metrics.requests[currentRoute][static_cast<size_t>(res.status)]++;
    if (options.logRequests)
      std::fprintf(stderr, "%s %s %d in=%llu out=%llu %.3fms\n", req.method.c_str(),
                   req.path.c_str(), res.status, static_cast<unsigned long long>(in),
                   static_cast<unsigned long long>(out), seconds * 1e3);
  });

  server.Get("/v1/health", wrap(Health, [this](const httplib::Request &, httplib::Response &res) {
               sendJson(res, 200,
                        json::Object{{"status", "ok"},
                                     {"version", COURIER_VERSION},
                                     {"modules", static_cast<int64_t>(store.size())}});
               return llvm::Error::success();
             }));
  server.Get("/v1/ready",
             wrap(Ready, [this](const httplib::Request &, httplib::Response &res) -> llvm::Error {
               if (!ready)
                 return makeServeError("not_ready", "loading watched modules or shutting down");
               sendJson(res, 200,
                        json::Object{{"status", "ready"},
                                     {"modules", static_cast<int64_t>(store.size())}});
               return llvm::Error::success();
             }));
  server.Get("/metrics",
             wrap(MetricsRoute, [this](const httplib::Request &, httplib::Response &res) {
               res.set_content(renderMetrics(), "text/plain; version=0.0.4");
               return llvm::Error::success();
             }));

  server.Get("/v1/modules",
             wrap(ListModules, [this](const httplib::Request &, httplib::Response &res) {
               json::Array list;
               for (const ModuleInfo &info : store.list())
                 list.push_back(infoJson(info));
               sendJson(res, 200, json::Object{{"modules", std::move(list)}});
               return llvm::Error::success();
             }));
  server.Post("/v1/modules",
              wrap(CreateModule, [this](const httplib::Request &req, httplib::Response &res,
                                        const httplib::ContentReader &reader) {
                return createModule(req, res, reader);
              }));
  server.Get(
      module,
      wrap(GetModule, [this](const httplib::Request &req, httplib::Response &res) -> llvm::Error {
        llvm::Expected<ModuleInfo> info = store.info(req.matches[1].str());
        if (!info)
          return info.takeError();
        sendJson(res, 200, infoJson(*info));
        return llvm::Error::success();
      }));
  server.Put(module, wrap(PutModule, [this](const httplib::Request &req, httplib::Response &res,
                                            const httplib::ContentReader &reader) {
               return putModule(req, res, reader);
             }));
  server.Delete(module,
                wrap(DeleteModule,
                     [this](const httplib::Request &req, httplib::Response &res) -> llvm::Error {
                       if (llvm::Error error = store.remove(req.matches[1].str()))
                         return error;
                       res.status = 204;
                       return llvm::Error::success();
                     }));
  server.Post(module + "/invoke/" + entry,
              wrap(Invoke, [this](const httplib::Request &req, httplib::Response &res,
                                  const httplib::ContentReader &reader) {
                return invoke(req, res, reader);
              }));
}

RestService::RestService(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

RestService::~RestService() { stop(); }

llvm::Expected<std::unique_ptr<RestService>> RestService::create(ServeOptions options,
                                                                 ModuleStore &store) {
  if (!transport::isLoopbackHost(options.host) && options.token.empty())
    return llvm::createStringError(
        "refusing to listen on '" + options.host +
        "' without a token: submitted modules run native code, so a non-loopback server "
        "needs --token-file");
  auto impl = std::make_unique<Impl>(std::move(options), store);
  const ServeOptions &opts = impl->options;
  httplib::Server &server = impl->server;
  unsigned threads = std::max(1u, opts.threads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_tcp_nodelay(true);
  server.set_keep_alive_max_count(1000000);
  server.set_keep_alive_timeout(5);
  server.set_payload_max_length(static_cast<size_t>(opts.maxBodyBytes));
  impl->installRoutes();

  if (opts.port == 0) {
    impl->boundPort = server.bind_to_any_port(opts.host);
  } else if (server.bind_to_port(opts.host, opts.port)) {
    impl->boundPort = opts.port;
  } else {
    impl->boundPort = -1;
  }
  if (impl->boundPort <= 0)
    return llvm::createStringError("cannot listen on " + opts.host + ":" +
                                   std::to_string(opts.port) + ": " + std::strerror(errno));
  return std::unique_ptr<RestService>(new RestService(std::move(impl)));
}

std::string RestService::address() const {
  const std::string &host = impl->options.host;
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(impl->boundPort);
}

void RestService::setReady(bool ready) { impl->ready = ready; }

llvm::Error RestService::run() {
  {
    std::lock_guard<std::mutex> lock(impl->stopMutex);
    if (impl->stopping)
      return llvm::Error::success();
  }
  impl->runEntered = true;
  bool served = impl->server.listen_after_bind();
  impl->runExited = true;
  std::lock_guard<std::mutex> lock(impl->stopMutex);
  if (!served && !impl->stopping)
    return llvm::createStringError("courier-serve on " + address() + " stopped serving");
  return llvm::Error::success();
}

void RestService::stop() {
  {
    std::lock_guard<std::mutex> lock(impl->stopMutex);
    impl->stopping = true;
  }
  impl->ready = false;
  // httplib's stop() does nothing until the accept loop runs; wait out that short window
  // when run() has been entered but is not listening yet.
  while (impl->runEntered && !impl->runExited && !impl->server.is_running())
    std::this_thread::yield();
  impl->server.stop();
  if (!impl->runEntered)
    return;
  // httplib's stop() closes the listener, but a worker holding an idle keep-alive connection
  // waits for the next request until the keep-alive timeout, and run() waits for every
  // worker. Let requests in flight finish (bounded), then wake the idle connections by
  // shutting their sockets down; httplib then closes them.
  impl->draining = true;
  {
    std::unique_lock<std::mutex> lock(impl->stopMutex);
    impl->stopSignal.wait_for(lock, std::chrono::seconds(10), [&] { return impl->inFlight <= 0; });
  }
  shutdownAcceptedConnections(impl->boundPort);
}

} // namespace courier::serve
