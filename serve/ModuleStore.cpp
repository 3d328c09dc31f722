// The module registry behind courier-serve: one ReloadableModule per name, one Engine per
// distinct option set, compiles on detached workers so a request can stop waiting for one.
#include "serve/ModuleStore.h"

#include "abi/ContentHash.h"
#include "transport/Log.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <functional>
#include <pthread.h>

namespace courier::serve {

using Clock = std::chrono::steady_clock;

bool isModuleName(llvm::StringRef name) {
  if (name.empty() || name.size() > 64 || name.front() == '.' || name.front() == '-')
    return false;
  return llvm::all_of(name,
                      [](char c) { return llvm::isAlnum(c) || c == '_' || c == '.' || c == '-'; });
}

std::string describeFailure(const ServeError &error) {
  std::string text = error.message;
  size_t errors = 0;
  for (const Diagnostic &d : error.diagnostics)
    if (d.severity == "error")
      ++errors;
  if (errors > 1)
    text += " (and " + std::to_string(errors - 1) + " more errors)";
  for (char &c : text)
    if (c == '\n')
      c = ' ';
  return text;
}

namespace {

/// Runs `work` on a detached thread with a large stack: MLIR's parser and passes recurse
/// with the IR's nesting. Only the pages touched are ever committed.
void runDetached(std::function<void()> work) {
  constexpr size_t kStackBytes = size_t(256) << 20;
  auto *task = new std::function<void()>(std::move(work));
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, kStackBytes);
  pthread_t thread;
  int failed = pthread_create(
      &thread, &attributes,
      [](void *raw) -> void * {
        std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()> *>(raw));
        (*owned)();
        return nullptr;
      },
      task);
  pthread_attr_destroy(&attributes);
  if (failed) {
    // Without a thread of its own the compile still runs, on the caller's stack.
    std::unique_ptr<std::function<void()>> owned(task);
    (*owned)();
  }
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// What a module's diagnostics call its text: the watched file it came from, or (for "api")
/// the module's name.
std::string sourceNameOf(llvm::StringRef origin) { return origin == "api" ? "" : origin.str(); }

/// What diagnostics call a module's text: `sourceName` when the request gave one, else as
/// sourceNameOf says.
std::string sourceNameOf(llvm::StringRef origin, llvm::StringRef sourceName) {
  return sourceName.empty() ? sourceNameOf(origin) : sourceName.str();
}

/// What a client is told of an engine failure of `kind`. A worker that cannot be started or
/// reached is the server's trouble, and its reason names the server's files (the worker
/// program, its sandbox): that goes to the server's log, the client learns only the kind.
std::string messageForClients(ErrorCode kind, std::string message) {
  if (kind != ErrorCode::WorkerUnavailable)
    return message;
  transport::logEvent(transport::LogLevel::Error, message);
  return "no module worker could be started or reached; the server's log says why";
}

/// A failed compile as a ServeError: the summary and first error diagnostic for people, every
/// diagnostic with its location for programs.
llvm::Error compileFailure(llvm::Error error) {
  std::string message;
  ErrorCode code = ErrorCode::CompileFailed;
  std::optional<ErrorCode> cause;
  std::vector<Diagnostic> diagnostics;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) {
        message = e.summary;
        diagnostics = e.diagnostics;
        for (const Diagnostic &d : e.diagnostics)
          if (d.severity == "error") {
            message += ": " + d.str();
            break;
          }
      },
      // Loading runs the module's setup, which opens its executor sessions: an executor
      // that cannot be reached, or refuses, is not the source's fault.
      [&](const EngineError &e) {
        message = messageForClients(e.kind, e.message);
        cause = e.cause;
        switch (e.kind) {
        case ErrorCode::ExecutorUnavailable:
        case ErrorCode::CompileCrashed:
        case ErrorCode::SetupCrashed:
        case ErrorCode::WorkerUnavailable:
        case ErrorCode::UnknownModule:
          code = e.kind;
          break;
        case ErrorCode::DeadlineExceeded: // The worker was ended at the compile timeout.
          code = ErrorCode::CompileTimeout;
          break;
        default:
          code = ErrorCode::ExecutorFailed;
          break;
        }
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  return makeServeError(code, message, std::move(diagnostics), cause);
}

} // namespace

struct ModuleStore::Record {
  std::string name;
  /// One replacement at a time, so versions are handed out in the order they go live.
  std::mutex reloading;

  mutable std::mutex mutex; ///< Guards everything below.
  ModuleOptions options;
  std::unique_ptr<ReloadableModule> reloadable; ///< Compiles with the engine for `options`.
  /// Versions the module had before `reloadable` was created (its options changed).
  uint64_t versionBase = 0;
  std::shared_ptr<Module> current;
  /// Every version installed, while anything holds it: removing the module ends them all,
  /// with any call still running on an old one.
  std::vector<std::weak_ptr<Module>> versions;
  uint64_t version = 0;
  std::string origin, sha256;
  double compileMs = 0;
  std::chrono::system_clock::time_point loadedAt;
  uint64_t reloads = 0, failedReloads = 0;
  std::optional<ModuleInfo::LastError> lastError;
  std::atomic<uint64_t> calls{0}, failedCalls{0};
  /// By entry name; only entries the module has (or had) get one. Guarded by `mutex`.
  std::map<std::string, EntryCallStats> entryStats;

  /// Applies `update` to the statistics of `entry`.
  template <typename Update> void countCall(llvm::StringRef entry, Update update) {
    std::lock_guard<std::mutex> lock(mutex);
    EntryCallStats &stats = entryStats[entry.str()];
    update(stats);
    stats.last = std::chrono::system_clock::now();
  }

  void fail(ErrorCode code, llvm::StringRef message) {
    std::lock_guard<std::mutex> lock(mutex);
    lastError = ModuleInfo::LastError{code, message.str(), std::chrono::system_clock::now()};
  }

  ModuleInfo snapshot() const {
    std::lock_guard<std::mutex> lock(mutex);
    ModuleInfo info;
    info.name = name;
    info.version = version;
    if (current) {
      info.entries = current->entries();
      info.phases = current->compileTimes();
      info.worker = current->workerState();
    }
    info.options = options;
    info.origin = origin;
    info.sha256 = sha256;
    info.compileMs = compileMs;
    info.loadedAt = loadedAt;
    info.calls = calls.load();
    info.failedCalls = failedCalls.load();
    info.reloads = reloads;
    info.failedReloads = failedReloads;
    info.lastError = lastError;
    return info;
  }
};

/// A compile running on a worker; whoever finishes last (waiter or worker) drops it.
struct ModuleStore::CompileJob {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  bool abandoned = false; ///< The caller stopped waiting; the result is discarded.
  std::shared_ptr<Module> module;
  llvm::Error failure = llvm::Error::success();
  double wallMs = 0;

  ~CompileJob() { llvm::consumeError(std::move(failure)); }
};

ModuleStore::ModuleStore(StoreOptions options) : config(std::move(options)) {}

ModuleStore::~ModuleStore() {
  std::unique_lock<std::mutex> lock(workersMutex);
  workersDone.wait(lock, [&] { return workers == 0; });
}

bool ModuleStore::waitForCompiles(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(workersMutex);
  return workersDone.wait_for(lock, timeout, [&] { return workers == 0; });
}

EngineOptions storeEngineDefaults() {
  EngineOptions options;
  options.isolation = Isolation::Process;
  options.compileTimeout = std::chrono::milliseconds(60000);
  options.invokeTimeout = std::chrono::milliseconds(60000);
  options.workerMemoryMiB = 4096;
  return options;
}

Engine &ModuleStore::engineFor(const ModuleOptions &options) {
  std::lock_guard<std::mutex> lock(enginesMutex);
  std::unique_ptr<Engine> &engine = engines[{options.optLevel, options.executor}];
  if (!engine) {
    EngineOptions engineOptions = config.engine;
    engineOptions.optLevel = options.optLevel;
    engineOptions.executorOverride = options.executor;
    engine = std::make_unique<Engine>(std::move(engineOptions));
  }
  return *engine;
}

llvm::Expected<std::shared_ptr<Module>>
ModuleStore::compileInWorker(Engine &engine, llvm::StringRef name, llvm::StringRef text,
                             const std::string &source, bool deadline, double &wallMs) {
  // The worker compiles; a compile past its deadline ends with the worker, so nothing
  // goes on in the background and the request can wait right here.
  auto start = Clock::now();
  CompileOptions compileOptions;
  compileOptions.timeout = deadline ? config.engine.compileTimeout : std::chrono::milliseconds(0);
  compileOptions.sourceName = source;
  llvm::Expected<std::shared_ptr<Module>> compiled = engine.compile(text, name, compileOptions);
  wallMs = msSince(start);
  stats.compiles++;
  stats.compileNanos += static_cast<uint64_t>(wallMs * 1e6);
  if (compiled)
    return compiled;
  llvm::Error failure = compileFailure(compiled.takeError());
  llvm::Error counted =
      llvm::handleErrors(std::move(failure), [&](std::unique_ptr<ServeError> e) -> llvm::Error {
        // The engine's message says which ran past the limit: the compile, or setup().
        if (e->kind == ErrorCode::CompileTimeout) {
          stats.compileTimeouts++;
        } else {
          stats.compileFailures++;
        }
        return llvm::Error(std::move(e));
      });
  return std::move(counted);
}

llvm::Expected<std::shared_ptr<Module>>
ModuleStore::compileWithDeadline(Engine &engine, llvm::StringRef name, llvm::StringRef text,
                                 llvm::StringRef origin, llvm::StringRef sourceName, bool deadline,
                                 double &wallMs) {
  std::string source = sourceNameOf(origin, sourceName);
  if (config.engine.isolation == Isolation::Process)
    return compileInWorker(engine, name, text, source, deadline, wallMs);
  auto job = std::make_shared<CompileJob>();
  {
    std::lock_guard<std::mutex> lock(workersMutex);
    ++workers;
  }
  // The engine compiles synchronously and cannot be interrupted, so the compile runs on a
  // thread of its own that may outlive this request.
  runDetached([this, job, &engine, name = name.str(), text = text.str(), source] {
    auto start = Clock::now();
    CompileOptions compileOptions;
    compileOptions.sourceName = source;
    llvm::Expected<std::shared_ptr<Module>> compiled = engine.compile(text, name, compileOptions);
    double ms = msSince(start);
    stats.compiles++;
    stats.compileNanos += static_cast<uint64_t>(ms * 1e6);
    std::shared_ptr<Module> discarded;
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->done = true;
      job->wallMs = ms;
      if (compiled)
        job->module = std::move(*compiled);
      else
        job->failure = compiled.takeError();
      if (job->abandoned) {
        stats.discardedCompiles++;
        discarded = std::move(job->module); // Unloaded below, outside the lock.
      }
    }
    job->finished.notify_all();
    discarded.reset();
    std::lock_guard<std::mutex> lock(workersMutex);
    --workers;
    // Notified under the lock: the store may be destroyed as soon as it is released.
    workersDone.notify_all();
  });

  std::unique_lock<std::mutex> lock(job->mutex);
  if (deadline) {
    if (!job->finished.wait_for(lock, config.engine.compileTimeout, [&] { return job->done; })) {
      job->abandoned = true;
      stats.compileTimeouts++;
      return makeServeError(ErrorCode::CompileTimeout,
                            "compiling '" + name + "' took longer than " +
                                llvm::Twine(config.engine.compileTimeout.count()) +
                                " ms; it goes on in the background and its result will be "
                                "discarded");
    }
  } else {
    job->finished.wait(lock, [&] { return job->done; });
  }
  wallMs = job->wallMs;
  if (job->failure) {
    stats.compileFailures++;
    return compileFailure(std::move(job->failure));
  }
  return std::move(job->module);
}

std::shared_ptr<ModuleStore::Record> ModuleStore::find(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(modulesMutex);
  auto it = modules.find(name.str());
  return it == modules.end() ? nullptr : it->second;
}

llvm::Expected<LoadResult> ModuleStore::load(llvm::StringRef name, llvm::StringRef text,
                                             std::optional<ModuleOptions> options, Mode mode,
                                             llvm::StringRef origin, bool deadline,
                                             llvm::StringRef sourceName) {
  if (!isModuleName(name))
    return makeServeError(ErrorCode::BadRequest,
                          "module name '" + name +
                              "' must be 1-64 of [A-Za-z0-9_.-], not starting "
                              "with '.' or '-'");
  if (options && options->executor.empty())
    options->executor = config.engine.executorOverride;
  if (mode == Mode::Upsert) {
    // A create of the name in progress (a watched file that changed, another request) ends
    // first, within a compile's time: its module is then replaced, rather than this request
    // failing on the name.
    std::unique_lock<std::mutex> lock(modulesMutex);
    createEnded.wait_for(lock, config.engine.compileTimeout,
                         [&] { return !creating.count(name.str()); });
  }
  if (std::shared_ptr<Record> record = find(name)) {
    if (mode == Mode::Create)
      return makeServeError(ErrorCode::ModuleExists, "module '" + name +
                                                         "' already exists; PUT /v1/modules/" +
                                                         name + " replaces it");
    return replace(std::move(record), text, std::move(options), origin, sourceName, deadline);
  }
  if (mode == Mode::Replace)
    return makeServeError(ErrorCode::UnknownModule, "no module '" + name + "'");
  ModuleOptions chosen = options.value_or(ModuleOptions{2, config.engine.executorOverride});
  return create(name, text, chosen, origin, sourceName, deadline);
}

llvm::Expected<LoadResult> ModuleStore::create(llvm::StringRef name, llvm::StringRef text,
                                               const ModuleOptions &options, llvm::StringRef origin,
                                               llvm::StringRef sourceName, bool deadline) {
  {
    std::lock_guard<std::mutex> lock(modulesMutex);
    if (modules.count(name.str()) || creating.count(name.str()))
      return makeServeError(ErrorCode::ModuleExists,
                            "module '" + name +
                                "' already exists or is being created; PUT "
                                "/v1/modules/" +
                                name + " replaces it");
    if (modules.size() + creating.size() >= config.maxModules)
      return makeServeError(ErrorCode::TooManyModules, "the server holds its maximum of " +
                                                           llvm::Twine(config.maxModules) +
                                                           " modules; DELETE one first");
    creating.insert(name.str());
  }
  auto release = [&] {
    {
      std::lock_guard<std::mutex> lock(modulesMutex);
      creating.erase(name.str());
    }
    createEnded.notify_all();
  };

  Engine &engine = engineFor(options);
  double wallMs = 0;
  llvm::Expected<std::shared_ptr<Module>> compiled =
      compileWithDeadline(engine, name, text, origin, sourceName, deadline, wallMs);
  if (!compiled) {
    release();
    return compiled.takeError();
  }
  auto record = std::make_shared<Record>();
  record->name = name.str();
  record->options = options;
  record->reloadable = std::make_unique<ReloadableModule>(engine, name.str());
  // The engine's memory cache holds the module compiled above while `compiled` lives, so
  // this only looks it up.
  llvm::Expected<uint64_t> version =
      record->reloadable->reload(text, sourceNameOf(origin, sourceName));
  if (!version) {
    release();
    return compileFailure(version.takeError());
  }
  record->current = record->reloadable->current();
  record->versions.push_back(record->current);
  record->version = *version;
  record->origin = origin.str();
  record->sha256 = sha256Hex(text);
  record->compileMs = wallMs;
  record->loadedAt = std::chrono::system_clock::now();
  {
    std::lock_guard<std::mutex> lock(modulesMutex);
    creating.erase(name.str());
    modules[name.str()] = record;
  }
  createEnded.notify_all();
  return LoadResult{record->snapshot(), true};
}

llvm::Expected<LoadResult> ModuleStore::replace(std::shared_ptr<Record> record,
                                                llvm::StringRef text,
                                                std::optional<ModuleOptions> options,
                                                llvm::StringRef origin, llvm::StringRef sourceName,
                                                bool deadline) {
  std::lock_guard<std::mutex> reloading(record->reloading);
  ModuleOptions previous;
  {
    std::lock_guard<std::mutex> lock(record->mutex);
    previous = record->options;
  }
  ModuleOptions chosen = options.value_or(previous);
  Engine &engine = engineFor(chosen);

  double wallMs = 0;
  llvm::Expected<std::shared_ptr<Module>> compiled =
      compileWithDeadline(engine, record->name, text, origin, sourceName, deadline, wallMs);
  if (!compiled) {
    ErrorCode code = ErrorCode::CompileFailed;
    std::string message;
    llvm::Error error =
        llvm::handleErrors(compiled.takeError(), [&](std::unique_ptr<ServeError> e) -> llvm::Error {
          code = e->kind;
          message = describeFailure(*e);
          return llvm::Error(std::move(e));
        });
    stats.reloadsFailed++;
    {
      std::lock_guard<std::mutex> lock(record->mutex);
      record->failedReloads++;
    }
    record->fail(code, message);
    return error;
  }

  // New options need a ReloadableModule bound to their engine; versions keep counting.
  std::unique_ptr<ReloadableModule> fresh;
  ReloadableModule *target = record->reloadable.get();
  if (chosen != previous) {
    fresh = std::make_unique<ReloadableModule>(engine, record->name);
    target = fresh.get();
  }
  llvm::Expected<uint64_t> version = target->reload(text, sourceNameOf(origin, sourceName));
  if (!version) {
    stats.reloadsFailed++;
    llvm::Error error = compileFailure(version.takeError());
    return error;
  }
  std::shared_ptr<Module> retired;
  {
    std::lock_guard<std::mutex> lock(record->mutex);
    if (fresh) {
      record->versionBase = record->version;
      record->reloadable = std::move(fresh);
    }
    retired = std::move(record->current);
    record->current = target->current();
    llvm::erase_if(record->versions, [](const std::weak_ptr<Module> &v) { return v.expired(); });
    record->versions.push_back(record->current);
    record->version = record->versionBase + *version;
    record->options = chosen;
    record->origin = origin.str();
    record->sha256 = sha256Hex(text);
    record->compileMs = wallMs;
    record->loadedAt = std::chrono::system_clock::now();
    record->reloads++;
  }
  stats.reloadsOk++;
  // The old version unloads here, or when the last call still running on it returns.
  retired.reset();
  if (!find(record->name))
    return makeServeError(ErrorCode::UnknownModule,
                          "module '" + record->name + "' was deleted while it was being replaced");
  return LoadResult{record->snapshot(), false};
}

namespace {

/// Ends the workers of every version of `record` still held, and with them any call still
/// spinning in one.
void terminateVersions(ModuleStore::Record &record);

} // namespace

llvm::Error ModuleStore::remove(llvm::StringRef name) {
  std::shared_ptr<Record> removed;
  {
    std::lock_guard<std::mutex> lock(modulesMutex);
    auto it = modules.find(name.str());
    if (it == modules.end())
      return makeServeError(ErrorCode::UnknownModule, "no module '" + name + "'");
    removed = std::move(it->second);
    modules.erase(it);
  }
  terminateVersions(*removed);
  return llvm::Error::success();
}

void ModuleStore::terminateAll() {
  std::vector<std::shared_ptr<Record>> records;
  {
    std::lock_guard<std::mutex> lock(modulesMutex);
    for (const auto &[name, record] : modules)
      records.push_back(record);
  }
  for (const std::shared_ptr<Record> &record : records)
    terminateVersions(*record);
}

namespace {

void terminateVersions(ModuleStore::Record &record) {
  std::vector<std::shared_ptr<Module>> live;
  {
    std::lock_guard<std::mutex> lock(record.mutex);
    for (const std::weak_ptr<Module> &version : record.versions)
      if (std::shared_ptr<Module> held = version.lock())
        live.push_back(std::move(held));
  }
  for (const std::shared_ptr<Module> &version : live)
    version->terminate();
}

} // namespace

llvm::Expected<Pinned> ModuleStore::pin(llvm::StringRef name) const {
  std::shared_ptr<Record> record = find(name);
  if (!record)
    return makeServeError(ErrorCode::UnknownModule, "no module '" + name + "'");
  std::lock_guard<std::mutex> lock(record->mutex);
  return Pinned{record->name, record->current, record->version};
}

llvm::Expected<const EntrySignature *> ModuleStore::entry(const Pinned &pinned,
                                                          llvm::StringRef entry) const {
  if (const EntrySignature *signature = pinned.module->findEntry(entry))
    return signature;
  std::string known;
  for (const EntrySignature &e : pinned.module->entries())
    known += (known.empty() ? "" : ", ") + e.name;
  return makeServeError(ErrorCode::UnknownEntry,
                        "module '" + pinned.name + "' has no entry '" + entry +
                            "' (entries: " + (known.empty() ? "none" : known) + ")");
}

void ModuleStore::recordCallFailure(const Pinned &pinned, ErrorCode code, llvm::StringRef message,
                                    llvm::StringRef entry) {
  countFailure(pinned, code, message, entry,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - pinned.at).count());
}

void ModuleStore::countFailure(const Pinned &pinned, ErrorCode code, llvm::StringRef message,
                               llvm::StringRef entry, double seconds) {
  stats.invokes++;
  stats.invokeFailures++;
  if (std::shared_ptr<Record> record = find(pinned.name)) {
    record->calls++;
    if (callObserver)
      callObserver(pinned.name, seconds);
    record->failedCalls++;
    record->fail(code, message);
    if (!entry.empty() && pinned.module->findEntry(entry))
      record->countCall(entry, [](EntryCallStats &s) { s.failures++; });
  }
}

void ModuleStore::recordCallPhases(const Pinned &pinned, llvm::StringRef entry,
                                   std::chrono::nanoseconds input,
                                   std::chrono::nanoseconds output) {
  if (std::shared_ptr<Record> record = find(pinned.name))
    record->countCall(entry, [&](EntryCallStats &s) {
      s.inputNanos += static_cast<uint64_t>(input.count());
      s.outputNanos += static_cast<uint64_t>(output.count());
    });
}

llvm::Expected<std::map<std::string, EntryCallStats>>
ModuleStore::callStats(llvm::StringRef name) const {
  std::shared_ptr<Record> record = find(name);
  if (!record)
    return makeServeError(ErrorCode::UnknownModule, "no module '" + name + "'");
  std::lock_guard<std::mutex> lock(record->mutex);
  return record->entryStats;
}

llvm::Expected<std::vector<Tensor>> ModuleStore::invoke(const Pinned &pinned, llvm::StringRef entry,
                                                        llvm::ArrayRef<Tensor> inputs,
                                                        const InvokeOptions &callOptions) {
  auto started = std::chrono::steady_clock::now();
  std::chrono::nanoseconds queued{0};
  InvokeOptions timed = callOptions;
  timed.queued = &queued;
  llvm::Expected<std::vector<Tensor>> outputs = pinned.module->invoke(entry, inputs, timed);
  auto nanos = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now() - started)
                                         .count());
  auto queueNanos = std::min(nanos, static_cast<uint64_t>(std::max<int64_t>(0, queued.count())));
  std::shared_ptr<Record> record = find(pinned.name);
  if (record && pinned.module->findEntry(entry))
    record->countCall(entry, [&](EntryCallStats &s) {
      if (outputs) {
        s.successes++;
        s.queueNanos += queueNanos;
        s.inferNanos += nanos - queueNanos;
      } else {
        s.failureNanos += nanos; // Counted as a failure by recordCallFailure below.
      }
    });
  if (record && outputs) {
    record->calls++;
    if (callObserver)
      callObserver(pinned.name, static_cast<double>(nanos) * 1e-9);
  }
  if (outputs) {
    stats.invokes++;
    return outputs;
  }
  // The engine's kinds are REST codes already; anything else it returns is an executor's.
  std::string message;
  ErrorCode code = ErrorCode::ExecutorFailed;
  std::optional<ErrorCode> cause;
  llvm::handleAllErrors(
      outputs.takeError(),
      [&](const EngineError &e) {
        message = messageForClients(e.kind, e.message);
        code = e.kind;
        cause = e.cause;
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  countFailure(pinned, code, message, entry, static_cast<double>(nanos) * 1e-9);
  return makeServeError(code, message, {}, cause);
}

std::vector<ModuleInfo> ModuleStore::list() const {
  std::vector<std::shared_ptr<Record>> records;
  {
    std::lock_guard<std::mutex> lock(modulesMutex);
    for (const auto &[name, record] : modules)
      records.push_back(record);
  }
  std::vector<ModuleInfo> infos;
  for (const std::shared_ptr<Record> &record : records)
    infos.push_back(record->snapshot());
  return infos;
}

llvm::Expected<ModuleInfo> ModuleStore::info(llvm::StringRef name) const {
  std::shared_ptr<Record> record = find(name);
  if (!record)
    return makeServeError(ErrorCode::UnknownModule, "no module '" + name + "'");
  return record->snapshot();
}

size_t ModuleStore::size() const {
  std::lock_guard<std::mutex> lock(modulesMutex);
  return modules.size();
}

} // namespace courier::serve
