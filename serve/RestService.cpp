// courier-serve's HTTP layer: the only file of the tool that touches cpp-httplib. Handlers
// translate a request into ModuleStore calls and the answer back; every route goes through
// HttpService's wrapper, which turns an llvm::Error (or a stray exception) into
// {"error":{"code","message"}} with the status of its code, so handlers never throw.
#include "serve/RestService.h"
#include "serve/JsonReplies.h"
#include "serve/KServeV2.h"
#include "serve/ModuleMetrics.h"
#include "serve/RequestBodies.h"

#include "executor/KernelThreads.h"
#include "executor/WorkerPool.h"
#include "transport/HttpService.h"
#include "transport/Metrics.h"
#include "transport/Wire.h"

#include "Version.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <numeric>
#include <utility>

namespace courier::serve {

namespace json = llvm::json;
namespace wire = courier::transport::wire;
using Clock = std::chrono::steady_clock;
using transport::contentLength;
using transport::HttpService;
using transport::HttpServiceOptions;

namespace {

/// An invoke's own timeout, in milliseconds (the executor protocol's header, same meaning).
constexpr const char *kDeadlineHeader = "X-Courier-Deadline-Ms";
/// A day: beyond it a deadline is a mistake rather than a wish.
constexpr uint64_t kMaxDeadlineMs = 24ull * 3600 * 1000;

/// The name diagnostics give the MLIR text of a plain-text PUT of module `module`: the
/// `filename` of a Content-Disposition header (`inline; filename="app.mlir"`), which must be
/// a file's name alone (1-255 of [A-Za-z0-9_.-], not starting with '.'), else
/// "<module>.mlir".
llvm::Expected<std::string> sourceFileName(llvm::StringRef disposition, llvm::StringRef module) {
  if (disposition.empty())
    return (module + ".mlir").str();
  llvm::SmallVector<llvm::StringRef, 4> parts;
  disposition.split(parts, ';');
  for (llvm::StringRef part : llvm::drop_begin(parts)) {
    auto [key, value] = part.trim().split('=');
    if (!key.trim().equals_insensitive("filename"))
      continue;
    value = value.trim();
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.drop_front().drop_back();
    bool plain = !value.empty() && value.size() <= 255 && value.front() != '.' &&
                 llvm::all_of(value, [](char c) {
                   return llvm::isAlnum(c) || c == '_' || c == '.' || c == '-';
                 });
    if (!plain)
      return makeServeError(ErrorCode::BadRequest,
                            "Content-Disposition's filename must be a file's name alone, 1-255 "
                            "of [A-Za-z0-9_.-] not starting with '.'");
    return value.str();
  }
  return (module + ".mlir").str();
}

json::Value diagnosticJson(const Diagnostic &d) {
  return json::Object{{"file", utf8(d.file)},
                      {"line", d.line},
                      {"column", d.column},
                      {"severity", d.severity},
                      {"message", utf8(d.message)}};
}

void sendError(httplib::Response &res, ErrorCode code, llvm::StringRef message,
               const std::vector<Diagnostic> &diagnostics = {},
               std::optional<ErrorCode> cause = std::nullopt) {
  json::Object error{{"code", transport::errorCodeName(code)}, {"message", utf8(message)}};
  if (cause)
    error["cause"] = transport::errorCodeName(*cause);
  if (!diagnostics.empty()) {
    json::Array list;
    for (const Diagnostic &d : diagnostics)
      list.push_back(diagnosticJson(d));
    error["diagnostics"] = std::move(list);
  }
  sendJson(res, transport::httpStatus(code), json::Object{{"error", std::move(error)}});
}

void reportFailure(httplib::Response &res, llvm::Error error) {
  llvm::handleAllErrors(
      std::move(error),
      [&](const ServeError &e) { sendError(res, e.kind, e.message, e.diagnostics, e.cause); },
      [&](const llvm::ErrorInfoBase &e) { sendError(res, ErrorCode::Internal, e.message()); });
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

/// "serving", or "crashed" while an isolated module's worker is down: it died (in a call, or
/// killed from outside while idle) or was ended at a deadline. The next invoke starts one.
llvm::StringRef moduleState(const WorkerState &worker) {
  return worker.isolated && worker.pid == 0 ? "crashed" : "serving";
}

json::Value workerJson(const WorkerState &worker) {
  if (!worker.isolated)
    return nullptr;
  json::Value pid = nullptr, lastDeath = nullptr;
  if (worker.pid)
    pid = worker.pid;
  if (!worker.lastDeath.empty())
    lastDeath = utf8(worker.lastDeath);
  return json::Object{{"pid", std::move(pid)},
                      {"restarts", static_cast<int64_t>(worker.restarts)},
                      {"crashes", static_cast<int64_t>(worker.crashes)},
                      {"lastDeath", std::move(lastDeath)}};
}

json::Value infoJson(const ModuleInfo &info) {
  json::Value lastError = nullptr;
  if (info.lastError)
    lastError = json::Object{{"code", transport::errorCodeName(info.lastError->code)},
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
                              {"cacheHit", p.cacheHit},
                              {"targetsCompiled", static_cast<int64_t>(p.targetsCompiled)},
                              {"targetsReused", static_cast<int64_t>(p.targetsReused)},
                              {"hostReused", p.hostReused}}},
      {"calls", static_cast<int64_t>(info.calls)},
      {"failedCalls", static_cast<int64_t>(info.failedCalls)},
      {"reloads", static_cast<int64_t>(info.reloads)},
      {"failedReloads", static_cast<int64_t>(info.failedReloads)},
      {"lastError", std::move(lastError)},
      {"state", moduleState(info.worker)},
      {"worker", workerJson(info.worker)},
  };
}

} // namespace

struct RestService::Impl {
  ServeOptions options;
  ModuleStore &store;
  HttpService service;
  /// Time spent in the engine's invoke, and waiting for a create's or replace's compile, by
  /// module (ModuleMetrics.h bounds the series).
  ModuleHistogram invokeSeconds, compileSeconds;
  std::atomic<bool> ready{false};
  /// The KServe v2 routes, over the same store, listener and counters.
  KServeV2 v2;

  Impl(ServeOptions optionsIn, ModuleStore &store)
      : options(std::move(optionsIn)), store(store), service(serviceOptions()),
        invokeSeconds("courier_serve_invoke_duration_seconds",
                      "Time an invoke spent in the engine, or until it was refused, by module.",
                      [&store](llvm::StringRef name) { return store.holds(name); }),
        compileSeconds("courier_serve_compile_request_duration_seconds",
                       "Time a create or replace request waited for its compile, by module.",
                       [&store](llvm::StringRef name) { return store.holds(name); }),
        v2(kserveContext()) {
    // Counted where the store counts a module's calls, on either API, so the histogram's
    // _count is `calls` of the module's description.
    store.observeCalls(
        [this](llvm::StringRef module, double seconds) { invokeSeconds.observe(module, seconds); });
  }
  ~Impl() { store.observeCalls(nullptr); }

  KServeContext kserveContext() {
    KServeContext context{store, service, 0, false, {}, {}, {}};
    context.maxBodyBytes = options.maxBodyBytes;
    context.allowSharedMemory = options.allowSharedMemory;
    context.readiness = [this] { return readinessError(); };
    context.call = [this](const Pinned &pinned, const EntrySignature &entry,
                          llvm::ArrayRef<Tensor> inputs, bool &called) {
      return call(pinned, entry, InvokeOptions(), inputs, called);
    };
    context.forget = [this](llvm::StringRef name) {
      invokeSeconds.forget(name);
      compileSeconds.forget(name);
    };
    return context;
  }
  /// Why the server is not ready (draining, loading or stopping), or success.
  llvm::Error readinessError() {
    if (service.draining())
      return makeServeError(ErrorCode::Draining, "courier-serve is draining before it exits");
    if (!ready)
      return makeServeError(ErrorCode::NotReady, "loading watched modules or shutting down");
    return llvm::Error::success();
  }

  HttpServiceOptions serviceOptions();
  std::vector<HttpService::Route> routes();
  /// What the store counted, read at scrape time.
  std::vector<prometheus::MetricFamily> storeMetrics();

  /// `draining` once a drain began: a draining server compiles nothing new. The body is
  /// left unread, so the connection closes after the reply.
  llvm::Error refuseWhileDraining(httplib::Response &res) {
    if (!service.draining())
      return llvm::Error::success();
    res.set_header("Connection", "close");
    return makeServeError(ErrorCode::Draining, "courier-serve is draining before it exits; "
                                               "submit the module to another server");
  }
  /// A whole body, up to the server's limit.
  llvm::Expected<std::string> readBody(const httplib::Request &req, httplib::Response &res,
                                       const httplib::ContentReader &reader);

  // The routes' handlers, in the order of the route table.
  llvm::Error health(const httplib::Request &req, httplib::Response &res);
  llvm::Error readiness(const httplib::Request &req, httplib::Response &res);
  llvm::Error metricsText(const httplib::Request &req, httplib::Response &res);
  llvm::Error listModules(const httplib::Request &req, httplib::Response &res);
  llvm::Error createModule(const httplib::Request &req, httplib::Response &res,
                           const httplib::ContentReader &reader);
  llvm::Error getModule(const httplib::Request &req, httplib::Response &res);
  llvm::Error putModule(const httplib::Request &req, httplib::Response &res,
                        const httplib::ContentReader &reader);
  llvm::Error deleteModule(const httplib::Request &req, httplib::Response &res);
  llvm::Error invoke(const httplib::Request &req, httplib::Response &res,
                     const httplib::ContentReader &reader);
  llvm::Error invokeJson(const Pinned &pinned, const EntrySignature &entry,
                         const InvokeOptions &callOptions, const httplib::Request &req,
                         httplib::Response &res, const httplib::ContentReader &reader,
                         bool &called);
  llvm::Error invokeFrame(const Pinned &pinned, const EntrySignature &entry,
                          const InvokeOptions &callOptions, const httplib::Request &req,
                          httplib::Response &res, const httplib::ContentReader &reader,
                          bool &called);
  /// A frame's header line: parses its inputs into `inputs`, sized but not yet filled, and
  /// returns where their bytes go.
  llvm::Expected<std::vector<wire::Destination>>
  acceptFrameHeader(const httplib::Request &req, llvm::StringRef line, std::vector<Tensor> &inputs);
  void sendFrameReply(httplib::Response &res, const Pinned &pinned, std::vector<Tensor> outputs);
  llvm::Expected<std::vector<Tensor>> call(const Pinned &pinned, const EntrySignature &entry,
                                           const InvokeOptions &callOptions,
                                           llvm::ArrayRef<Tensor> inputs, bool &called);
};

HttpServiceOptions RestService::Impl::serviceOptions() {
  HttpServiceOptions service;
  service.listen = options;
  service.name = "courier-serve";
  service.payloadTooLargeMessage = "request body exceeds the server's limit of " +
                                   std::to_string(options.maxBodyBytes) + " bytes";
  service.sendError = [](httplib::Response &res, ErrorCode code, llvm::StringRef message) {
    // A refusal before routing (a token, a limit, a malformed request) of a v2 path is
    // answered in the shape v2 clients read.
    if (isKServePath(HttpService::requestPath()))
      return sendKServeError(res, code, message);
    sendError(res, code, message);
  };
  service.reportFailure = reportFailure;
  service.metricPrefix = "courier_serve";
  service.countByRoute = true;
  service.subjectKey = "module";
  service.subjectPlaceholder = "{name}";
  return service;
}

llvm::Error RestService::Impl::createModule(const httplib::Request &req, httplib::Response &res,
                                            const httplib::ContentReader &reader) {
  if (llvm::Error error = refuseWhileDraining(res))
    return error;
  llvm::Expected<std::string> body = readBody(req, res, reader);
  if (!body)
    return body.takeError();
  llvm::Expected<ModuleRequest> request = readCreateBody(*body);
  if (!request)
    return request.takeError();
  auto started = Clock::now();
  // The log names the module a create is about once it is one: a name the store refuses
  // (any bytes, up to the body's bound) is the client's text, not a module's.
  if (isModuleName(request->name))
    HttpService::noteLogSubject(request->name);
  llvm::Expected<LoadResult> loaded =
      store.load(request->name, request->mlir, request->options, ModuleStore::Mode::Create, "api");
  compileSeconds.observe(request->name,
                         std::chrono::duration<double>(Clock::now() - started).count());
  if (!loaded)
    return loaded.takeError();
  res.set_header("Location", "/v1/modules/" + loaded->info.name);
  sendJson(res, 201, infoJson(loaded->info));
  return llvm::Error::success();
}

llvm::Error RestService::Impl::putModule(const httplib::Request &req, httplib::Response &res,
                                         const httplib::ContentReader &reader) {
  if (llvm::Error error = refuseWhileDraining(res))
    return error;
  std::string name = req.matches[1];
  llvm::Expected<std::string> body = readBody(req, res, reader);
  if (!body)
    return body.takeError();
  bool plainText = llvm::StringRef(req.get_header_value("Content-Type")).starts_with("text/plain");
  llvm::Expected<ModuleRequest> request = readReplaceBody(name, std::move(*body), plainText);
  if (!request)
    return request.takeError();
  // A file's text: its diagnostics name a file, the one Content-Disposition's filename says
  // (curl -H 'Content-Disposition: inline; filename="app.mlir"'), else NAME.mlir.
  std::string sourceName;
  if (plainText) {
    llvm::Expected<std::string> file =
        sourceFileName(req.get_header_value("Content-Disposition"), name);
    if (!file)
      return file.takeError();
    sourceName = std::move(*file);
  }
  auto started = Clock::now();
  llvm::Expected<LoadResult> loaded = store.load(
      name, request->mlir, request->options, ModuleStore::Mode::Upsert, "api", true, sourceName);
  compileSeconds.observe(name, std::chrono::duration<double>(Clock::now() - started).count());
  if (!loaded)
    return loaded.takeError();
  if (loaded->created)
    res.set_header("Location", "/v1/modules/" + name);
  sendJson(res, loaded->created ? 201 : 200, infoJson(loaded->info));
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>> RestService::Impl::call(const Pinned &pinned,
                                                            const EntrySignature &entry,
                                                            const InvokeOptions &callOptions,
                                                            llvm::ArrayRef<Tensor> inputs,
                                                            bool &called) {
  called = true;
  return store.invoke(pinned, entry.name, inputs, callOptions);
}

llvm::Error RestService::Impl::invoke(const httplib::Request &req, httplib::Response &res,
                                      const httplib::ContentReader &reader) {
  llvm::Expected<Pinned> pinned = store.pin(req.matches[1].str());
  if (!pinned) {
    transport::discardBody(reader, res);
    return pinned.takeError();
  }
  llvm::Expected<const EntrySignature *> entry = store.entry(*pinned, req.matches[2].str());
  if (!entry) {
    transport::discardBody(reader, res);
    return entry.takeError();
  }
  // A deadline of the request's own may shorten --invoke-timeout-ms, never lengthen it: the
  // operator's limit bounds how long any client can hold a worker.
  InvokeOptions callOptions;
  if (req.has_header(kDeadlineHeader)) {
    uint64_t ms = 0;
    std::string value = req.get_header_value(kDeadlineHeader);
    if (llvm::StringRef(value).getAsInteger(10, ms) || ms == 0 || ms > kMaxDeadlineMs) {
      transport::discardBody(reader, res);
      return makeServeError(ErrorCode::BadRequest,
                            llvm::Twine(kDeadlineHeader) + " must be a whole number of " +
                                "milliseconds from 1 to " + llvm::Twine(kMaxDeadlineMs) +
                                ", got '" + value + "'");
    }
    callOptions.timeout = std::chrono::milliseconds(ms);
    std::chrono::milliseconds limit = store.options().engine.invokeTimeout;
    if (limit.count() > 0 && *callOptions.timeout > limit)
      callOptions.timeout = limit;
  }
  // The version pinned here serves the whole call, even if a reload lands meanwhile.
  res.set_header("X-Courier-Module-Version", std::to_string(pinned->version));
  std::string contentType = req.get_header_value("Content-Type");
  bool called = false;
  llvm::Error error = llvm::StringRef(contentType).starts_with(wire::kFrameContentType)
                          ? invokeFrame(*pinned, **entry, callOptions, req, res, reader, called)
                          : invokeJson(*pinned, **entry, callOptions, req, res, reader, called);
  if (!error || called)
    return error; // The store counted the call and any failure of it.
  return llvm::handleErrors(std::move(error), [&](std::unique_ptr<ServeError> e) -> llvm::Error {
    store.recordCallFailure(*pinned, e->kind, e->message, (*entry)->name);
    return llvm::Error(std::move(e));
  });
}

llvm::Error RestService::Impl::invokeJson(const Pinned &pinned, const EntrySignature &entry,
                                          const InvokeOptions &callOptions,
                                          const httplib::Request &req, httplib::Response &res,
                                          const httplib::ContentReader &reader, bool &called) {
  llvm::Expected<std::string> body = readBody(req, res, reader);
  if (!body)
    return body.takeError();
  llvm::Expected<std::vector<Tensor>> read = readInvokeBody(*body, entry, body->capacity());
  if (!read)
    return read.takeError();
  std::vector<Tensor> inputs = std::move(*read);
  body->clear();
  body->shrink_to_fit();
  llvm::Expected<std::vector<Tensor>> outputs = call(pinned, entry, callOptions, inputs, called);
  if (!outputs)
    return outputs.takeError();
  // Written straight into the body, in the key order sendJson would print.
  std::string text = "{\"module\":" + dump(json::Value(pinned.name)) + ",\"outputs\":[";
  for (size_t i = 0; i < outputs->size(); ++i) {
    if (i)
      text += ',';
    writeTensorJSON(text, (*outputs)[i]);
  }
  text += "],\"version\":" + std::to_string(pinned.version) + "}\n";
  res.status = 200;
  // set_content would copy the body; a large reply is tens of megabytes.
  res.body = std::move(text);
  res.set_header("Content-Type", wire::kJsonContentType);
  return llvm::Error::success();
}

llvm::Expected<std::vector<wire::Destination>>
RestService::Impl::acceptFrameHeader(const httplib::Request &req, llvm::StringRef line,
                                     std::vector<Tensor> &inputs) {
  llvm::Expected<FrameInputs> frame = readFrameHeader(line, options.maxBodyBytes);
  if (!frame)
    return frame.takeError();
  inputs = std::move(frame->inputs);
  uint64_t total = frame->payloadBytes;
  // Checked before allocating, so a small request cannot make the server reserve memory for
  // tensors it never sends.
  uint64_t length = contentLength(req);
  if (req.has_header("Content-Length") && length != line.size() + 1 + total)
    return makeServeError(ErrorCode::BadRequest, "the frame header declares " + llvm::Twine(total) +
                                                     " bytes of tensors, the body carries " +
                                                     llvm::Twine(length - line.size() - 1));
  std::vector<wire::Destination> destinations;
  for (Tensor &input : inputs) {
    uint64_t bytes = static_cast<uint64_t>(input.numElements()) * dtypeSize(input.dtype);
    input.bytes.resize(bytes);
    destinations.push_back({reinterpret_cast<char *>(input.bytes.data()), bytes});
  }
  return destinations;
}

llvm::Error RestService::Impl::invokeFrame(const Pinned &pinned, const EntrySignature &entry,
                                           const InvokeOptions &callOptions,
                                           const httplib::Request &req, httplib::Response &res,
                                           const httplib::ContentReader &reader, bool &called) {
  std::vector<Tensor> inputs;
  wire::FrameReader frame(
      [&](llvm::StringRef line) { return acceptFrameHeader(req, line, inputs); });
  if (llvm::Error error = service.readFrame(req, res, reader, frame))
    return frameError(std::move(error));
  llvm::Expected<std::vector<Tensor>> outputs = call(pinned, entry, callOptions, inputs, called);
  if (!outputs)
    return outputs.takeError();
  inputs.clear();
  sendFrameReply(res, pinned, std::move(*outputs));
  return llvm::Error::success();
}

void RestService::Impl::sendFrameReply(httplib::Response &res, const Pinned &pinned,
                                       std::vector<Tensor> outputs) {
  // The reply comes straight from the output tensors, released once sent.
  json::Array described;
  uint64_t offset = 0;
  for (const Tensor &t : outputs) {
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
  res.status = 200;
  std::vector<size_t> all(outputs.size()); // Every output, in order.
  std::iota(all.begin(), all.end(), size_t(0));
  sendTensorFrame(res, std::move(header), std::move(outputs), all);
}

std::vector<prometheus::MetricFamily> RestService::Impl::storeMetrics() {
  using prometheus::MetricType;
  using transport::singleSample;
  auto counter = [](const char *name, const char *help, double value) {
    return singleSample(name, help, MetricType::Counter, value);
  };
  const StoreCounters &c = store.counters();
  prometheus::MetricFamily reloads = transport::metricFamily(
      "courier_serve_reloads_total", "Module replacements, by outcome.", MetricType::Counter);
  transport::addSample(reloads, static_cast<double>(c.reloadsOk.load()), "outcome", "ok");
  transport::addSample(reloads, static_cast<double>(c.reloadsFailed.load()), "outcome", "failed");
  std::vector<prometheus::MetricFamily> families = {
      counter("courier_serve_invokes_total", "Entry invocations.", c.invokes),
      counter("courier_serve_invoke_failures_total",
              "Invocations that failed (inputs or executor).", c.invokeFailures),
      counter("courier_serve_compiles_total",
              "Compiles finished (the engine's cache hits included).", c.compiles),
      counter("courier_serve_compile_failures_total", "Compiles that failed.", c.compileFailures),
      counter("courier_serve_compile_timeouts_total",
              "Compiles a request stopped waiting for (compile_timeout).", c.compileTimeouts),
      counter("courier_serve_compiles_discarded_total",
              "Compiles that finished after their request gave up; their result was dropped.",
              c.discardedCompiles),
      counter("courier_serve_compile_seconds_total", "Time spent compiling.",
              static_cast<double>(c.compileNanos.load()) / 1e9),
      std::move(reloads),
      singleSample("courier_serve_modules", "Modules loaded.", MetricType::Gauge,
                   static_cast<double>(store.size())),
      invokeSeconds.collect(),
      compileSeconds.collect(),
  };
  // The executor's names: kernels run in this process or in the modules' workers.
  for (prometheus::MetricFamily &family : executor::kernelThreadFamilies(
           executor::WorkerPool::kernelThreadTotals(),
           "Kernel threads running a kernel's parallel loop now, in every module worker."))
    families.push_back(std::move(family));
  return families;
}

std::vector<HttpService::Route> RestService::Impl::routes() {
  using Method = HttpService::Route::Method;
  const std::string module = R"(/v1/modules/([A-Za-z0-9_][A-Za-z0-9_.-]{0,63}))";
  const std::string entry = R"(([A-Za-z_.$][A-Za-z0-9_.$-]{0,255}))";
  auto to = [this](auto fn) { return HttpService::to(this, fn); };
  return {
      {Method::Get, "/v1/health", "GET /v1/health", to(&Impl::health)},
      {Method::Get, "/v1/ready", "GET /v1/ready", to(&Impl::readiness)},
      {Method::Get, "/metrics", "GET /metrics", to(&Impl::metricsText)},
      {Method::Get, "/v1/modules", "GET /v1/modules", to(&Impl::listModules)},
      {Method::Post, "/v1/modules", "POST /v1/modules", to(&Impl::createModule)},
      {Method::Get, module, "GET /v1/modules/{name}", to(&Impl::getModule)},
      {Method::Put, module, "PUT /v1/modules/{name}", to(&Impl::putModule)},
      {Method::Delete, module, "DELETE /v1/modules/{name}", to(&Impl::deleteModule)},
      {Method::Post, module + "/invoke/" + entry, "POST /v1/modules/{name}/invoke/{entry}",
       to(&Impl::invoke)},
  };
}

llvm::Expected<std::string> RestService::Impl::readBody(const httplib::Request &req,
                                                        httplib::Response &res,
                                                        const httplib::ContentReader &reader) {
  std::string body;
  if (llvm::Error error = service.readBody(req, res, reader, body))
    return frameError(std::move(error));
  return body;
}

llvm::Error RestService::Impl::health(const httplib::Request &, httplib::Response &res) {
  sendJson(res, 200,
           json::Object{{"status", "ok"},
                        {"version", COURIER_VERSION},
                        {"modules", static_cast<int64_t>(store.size())}});
  return llvm::Error::success();
}

llvm::Error RestService::Impl::readiness(const httplib::Request &, httplib::Response &res) {
  if (llvm::Error error = readinessError())
    return error;
  sendJson(res, 200,
           json::Object{{"status", "ready"}, {"modules", static_cast<int64_t>(store.size())}});
  return llvm::Error::success();
}

llvm::Error RestService::Impl::metricsText(const httplib::Request &, httplib::Response &res) {
  res.set_content(service.metricsText(storeMetrics()), "text/plain; version=0.0.4");
  return llvm::Error::success();
}

llvm::Error RestService::Impl::listModules(const httplib::Request &, httplib::Response &res) {
  json::Array list;
  for (const ModuleInfo &info : store.list())
    list.push_back(infoJson(info));
  sendJson(res, 200, json::Object{{"modules", std::move(list)}});
  return llvm::Error::success();
}

llvm::Error RestService::Impl::getModule(const httplib::Request &req, httplib::Response &res) {
  llvm::Expected<ModuleInfo> info = store.info(req.matches[1].str());
  if (!info)
    return info.takeError();
  sendJson(res, 200, infoJson(*info));
  return llvm::Error::success();
}

llvm::Error RestService::Impl::deleteModule(const httplib::Request &req, httplib::Response &res) {
  if (llvm::Error error = store.remove(req.matches[1].str()))
    return error;
  invokeSeconds.forget(req.matches[1].str());
  compileSeconds.forget(req.matches[1].str());
  res.status = 204;
  return llvm::Error::success();
}

RestService::RestService(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}

RestService::~RestService() { stop(); }

llvm::Expected<std::unique_ptr<RestService>> RestService::create(ServeOptions options,
                                                                 ModuleStore &store) {
  if (llvm::Error error = transport::requireTokenBeyondLoopback(
          options.host, options.token,
          "submitted modules run native code, so a non-loopback server needs --token-file"))
    return std::move(error);
  auto impl = std::make_unique<Impl>(std::move(options), store);
  impl->service.addRoutes(impl->routes());
  // After /v1's: the last of them answers every /v2 path no other route takes.
  impl->service.addRoutes(impl->v2.routes());
  if (llvm::Error error = impl->service.bind())
    return std::move(error);
  return std::unique_ptr<RestService>(new RestService(std::move(impl)));
}

std::string RestService::address() const { return impl->service.address(); }

void RestService::setReady(bool ready) { impl->ready = ready; }

llvm::Error RestService::run() { return impl->service.run(); }

void RestService::drainAndStop() {
  impl->service.drain();
  // What is still running once the drain is over would hold the process: isolated calls
  // end with their workers, as a DELETE ends them.
  impl->store.terminateAll();
  stop();
}

void RestService::cutDrainShort() { impl->service.cutDrainShort(); }

void RestService::stop() {
  impl->ready = false;
  impl->service.stop();
}

} // namespace courier::serve
