// courier-serve: the engine as a REST service (docs/rest.md) until SIGINT or SIGTERM, which
// start a drain. Prints "listening on HOST:PORT" ("https://HOST:PORT" with TLS, or
// "unix:PATH") once bound, so callers can pass port 0. With --watch, loads every
// *.mlir of a directory as a module named by its stem and reloads it when the file changes.
#include "executor/WorkerOutput.h"
#include "jit/DiskCache.h"
#include "tools/courier-serve/ModuleStore.h"
#include "tools/courier-serve/RestService.h"
#include "transport/Log.h"
#include "transport/ServerMain.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sys/prctl.h>
#include <thread>

using namespace llvm;
using namespace courier;
using namespace courier::serve;
using courier::transport::logEvent;
using courier::transport::LogLevel;
using courier::transport::LogQuoting;
using courier::transport::textLogValue;

/// Every flag courier-serve takes, as --help lists them: a flag not listed is refused.
static std::vector<transport::OptionHelp> optionHelp() {
  std::vector<transport::OptionHelp> own = {
      {"--listen", "HOST:PORT",
       "Address to bind: HOST:PORT (default 127.0.0.1:8080; port 0 picks a free one) or "
       "unix:PATH (a socket file created mode 0600)"},
      {"--token-file", "FILE", "File holding the bearer token every request must carry"},
      {"--executor", "ADDR|local",
       "Send every target module to this executor instead of the IR's addresses (a module's "
       "options.executor overrides it)"},
      {"--executor-token-file", "FILE", "File holding the bearer token for HTTP executors"},
      {"--tls-ca", "FILE",
       "PEM file of the CAs an https:// executor's certificate may chain to (default: "
       "$COURIER_TLS_CA, else the system's)"},
      {"--tls-client-cert", "FILE",
       "PEM client certificate for executors that ask for one (default: "
       "$COURIER_TLS_CLIENT_CERT)"},
      {"--tls-client-key", "FILE",
       "The client certificate's PEM key (default: $COURIER_TLS_CLIENT_KEY)"},
      {"--watch", "DIR", "Load DIR/*.mlir as modules named by their stems; reload on change"},
      {"--watch-opt-level", "N",
       "Opt level of the modules --watch loads, 0-3 (default 2); 0 or 1 for development: an "
       "edited kernel compiles in a fraction of the time, and runs slower "
       "(docs/performance.md)"},
      {"--jobs", "N",
       "Threads generating code for a module's target modules at once (default 0: one per "
       "core)"},
      {"--cache-dir", "DIR", "Engine cache and object directory (default $XDG_CACHE_HOME/courier)"},
      {"--cache-max-mib", "N",
       "Bound on the cache directory's size; least recently used files go first (default 1024; "
       "0: no bound)"},
      {"--max-body-bytes", "N", "Largest request body accepted (default 268435456)"},
      {"--max-modules", "N", "Most modules held at once (default 64)"},
      {"--compile-timeout-ms", "N",
       "Longest a request waits for a compile and the module's setup() (default 60000)"},
      {"--max-constant-mib", "N",
       "Largest constant a module may hold, a splat counted at its full size (default 64; 0: "
       "no limit)"},
      {"--max-object-mib", "N",
       "Largest object a module (host or target) may compile to (default 256; 0: no limit)"},
      {"--threads", "N",
       "Requests served at once (default 512; an idle connection holds no thread, and four "
       "threads per core serve while requests keep moving)"},
      {"--quiet", "", "Do not log one line per request to stderr"},
      {"--isolation", "process|none",
       "process (default): each module version compiles, links and runs in a sandboxed worker "
       "process of its own; none: in this process"},
      {"--invoke-timeout-ms", "N",
       "With process isolation, end an invoke that runs longer (default 60000; 0: no limit; a "
       "request's X-Courier-Deadline-Ms replaces it)"},
      {"--module-memory-mib", "N",
       "Address space each module worker may use (default 4096; 0: none)"},
      {"--workers-per-module", "N",
       "Worker processes each module version runs in, each set up, a call going to an idle "
       "one (default 1; at most 64)"},
      {"--kernel-threads", "N",
       "Threads a kernel's parallel loops use, per module worker (in this process with "
       "--isolation none; 1 to 1024; default: the CPUs this process may run on, "
       "sched_getaffinity)"},
      {"--no-sandbox", "", "Start module workers without no-new-privs and seccomp"},
      {"--drain-timeout-ms", "N",
       "On SIGTERM, how long requests in flight may take to finish while /v1/ready answers 503 "
       "and new modules are refused (default 30000)"},
      {"--allow-shared-memory", "",
       "Take KServe v2 tensors in POSIX shared memory that clients on this host register "
       "(/v2/systemsharedmemory); off by default, since the server then reads and writes "
       "memory a client names"},
  };
  for (auto shared :
       {transport::tlsOptionHelp(), transport::connectionOptionHelp(), transport::logOptionHelp()})
    own.insert(own.end(), shared.begin(), shared.end());
  return own;
}

namespace {

struct Arguments {
  ServeOptions serve;
  StoreOptions store;
  std::string watchDir;
  unsigned watchOptLevel = 2;
};

Expected<Arguments> parseArguments(int argc, char **argv) {
  Arguments args;
  std::string listen = "127.0.0.1:8080", tokenFile, executorTokenFile;
  uint64_t maxBody = args.serve.maxBodyBytes, maxModules = 64, timeoutMs = 60000, threads = 512;
  uint64_t cacheMaxMiB = args.store.cacheMaxBytes >> 20;
  uint64_t invokeTimeoutMs = args.store.invokeTimeout.count();
  uint64_t maxConstantMiB = args.store.maxConstantBytes >> 20,
           maxObjectMiB = args.store.maxObjectBytes >> 20;
  uint64_t jobs = 0, watchOptLevel = args.watchOptLevel, workersPerModule = 1;
  uint64_t kernelThreads = 0;
  bool maxConnectionsGiven = false;
  static const std::vector<transport::OptionHelp> known = optionHelp();
  static const std::string help = transport::serverHelp(
      "courier-serve",
      "The engine as a REST service (docs/rest.md): submit MLIR modules, invoke their entries "
      "through /v1 or KServe v2, replace them while they serve",
      known);
  transport::ArgumentReader flags(argc, argv, help.c_str());
  while (flags.next()) {
    if (!transport::listsOption(known, flags.name()))
      return flags.unknown();
    if (flags.arg() == "--quiet") {
      args.serve.logRequests = false;
      continue;
    }
    if (flags.arg() == "--no-sandbox") {
      args.store.sandbox = false;
      continue;
    }
    if (flags.arg() == "--allow-shared-memory") {
      args.serve.allowSharedMemory = true;
      continue;
    }
    Expected<bool> logFlag = transport::readLogFormatFlag(flags);
    if (!logFlag)
      return logFlag.takeError();
    if (*logFlag)
      continue;
    Expected<bool> tls = transport::readTlsFlag(flags, args.serve);
    if (!tls)
      return tls.takeError();
    if (*tls)
      continue;
    Expected<bool> connections =
        transport::readConnectionFlag(flags, args.serve, maxConnectionsGiven);
    if (!connections)
      return connections.takeError();
    if (*connections)
      continue;
    StringRef name = flags.name();
    bool executorTls =
        llvm::is_contained({"--tls-ca", "--tls-client-cert", "--tls-client-key"}, name);
    if (!executorTls && !llvm::is_contained({"--listen",
                                             "--token-file",
                                             "--executor",
                                             "--executor-token-file",
                                             "--watch",
                                             "--cache-dir",
                                             "--cache-max-mib",
                                             "--max-body-bytes",
                                             "--max-modules",
                                             "--compile-timeout-ms",
                                             "--threads",
                                             "--max-constant-mib",
                                             "--max-object-mib",
                                             "--invoke-timeout-ms",
                                             "--module-memory-mib",
                                             "--isolation",
                                             "--drain-timeout-ms",
                                             "--jobs",
                                             "--watch-opt-level",
                                             "--workers-per-module",
                                             "--kernel-threads"},
                                            name))
      return flags.unknown();
    if (Error error = flags.readValue())
      return std::move(error);
    const std::string &value = flags.value();
    Error error = Error::success();
    if (name == "--listen")
      listen = value;
    else if (name == "--token-file")
      tokenFile = value;
    else if (name == "--executor")
      args.store.defaultExecutor = value;
    else if (name == "--executor-token-file")
      executorTokenFile = value;
    else if (name == "--tls-ca")
      args.store.executorTls.caFile = value;
    else if (name == "--tls-client-cert")
      args.store.executorTls.certFile = value;
    else if (name == "--tls-client-key")
      args.store.executorTls.keyFile = value;
    else if (name == "--watch")
      args.watchDir = value;
    else if (name == "--cache-dir")
      args.store.cacheDir = value;
    else if (name == "--cache-max-mib")
      error = flags.number(cacheMaxMiB);
    else if (name == "--max-body-bytes")
      error = flags.number(maxBody);
    else if (name == "--max-modules")
      error = flags.number(maxModules);
    else if (name == "--compile-timeout-ms")
      error = flags.number(timeoutMs);
    else if (name == "--threads")
      error = flags.number(threads);
    else if (name == "--max-constant-mib")
      error = flags.number(maxConstantMiB);
    else if (name == "--max-object-mib")
      error = flags.number(maxObjectMiB);
    else if (name == "--invoke-timeout-ms")
      error = flags.number(invokeTimeoutMs);
    else if (name == "--module-memory-mib")
      error = flags.number(args.store.moduleMemoryMiB);
    else if (name == "--jobs")
      error = flags.number(jobs);
    else if (name == "--workers-per-module")
      error = flags.number(workersPerModule);
    else if (name == "--kernel-threads") {
      error = flags.number(kernelThreads);
      if (!error && (kernelThreads < 1 || kernelThreads > 1024))
        return createStringError("--kernel-threads must be between 1 and 1024");
    } else if (name == "--watch-opt-level")
      error = flags.number(watchOptLevel);
    else if (name == "--drain-timeout-ms")
      error = transport::setDrainTimeout(flags, args.serve);
    else if (name == "--isolation" && (value == "process" || value == "none"))
      args.store.isolation = value == "process" ? Isolation::Process : Isolation::InProcess;
    else
      return createStringError("--isolation is 'process' or 'none', got '" + value + "'");
    if (error)
      return std::move(error);
  }

  if (Error error = transport::parseListenAddress(listen, args.serve))
    return std::move(error);
  if (!tokenFile.empty()) {
    Expected<std::string> token = transport::readTokenFile("--token-file", tokenFile);
    if (!token)
      return token.takeError();
    args.serve.token = std::move(*token);
  }
  if (!executorTokenFile.empty()) {
    Expected<std::string> token =
        transport::readTokenFile("--executor-token-file", executorTokenFile);
    if (!token)
      return token.takeError();
    args.store.executorToken = std::move(*token);
  }
  if (Error error = transport::checkThreadCount(threads))
    return std::move(error);
  if (Error error = transport::fitConnectionLimit(args.serve, maxConnectionsGiven))
    return std::move(error);
  if (maxModules == 0)
    return createStringError("--max-modules must be at least 1");
  args.store.invokeTimeout = std::chrono::milliseconds(invokeTimeoutMs);
  if (args.store.moduleMemoryMiB > (UINT64_MAX >> 21))
    return createStringError("--module-memory-mib is at most " + std::to_string(UINT64_MAX >> 21));
  if (maxBody == 0)
    return createStringError("--max-body-bytes must be at least 1");
  // Beyond 2^44 MiB the byte count would wrap round to a small limit.
  if (maxConstantMiB > (UINT64_MAX >> 20) || maxObjectMiB > (UINT64_MAX >> 20))
    return createStringError("--max-constant-mib and --max-object-mib are at most " +
                             Twine(UINT64_MAX >> 20));
  if (!args.watchDir.empty() && !sys::fs::is_directory(args.watchDir))
    return createStringError("--watch '" + args.watchDir + "' is not a directory");
  if (workersPerModule < 1 || workersPerModule > EngineOptions::kMaxWorkersPerModule)
    return createStringError("--workers-per-module is 1 to " +
                             Twine(EngineOptions::kMaxWorkersPerModule));
  args.store.workersPerModule = static_cast<unsigned>(workersPerModule);
  args.store.kernelThreads = static_cast<unsigned>(kernelThreads);
  if (jobs > EngineOptions::kMaxJobs)
    return createStringError("--jobs is at most " + Twine(EngineOptions::kMaxJobs));
  args.store.jobs = static_cast<unsigned>(jobs);
  if (watchOptLevel > 3)
    return createStringError("--watch-opt-level is 0 to 3, got " + Twine(watchOptLevel));
  args.watchOptLevel = static_cast<unsigned>(watchOptLevel);
  args.serve.threads = static_cast<unsigned>(threads);
  args.serve.maxBodyBytes = maxBody;
  args.store.maxModules = static_cast<size_t>(maxModules);
  args.store.compileTimeout = std::chrono::milliseconds(timeoutMs);
  if (cacheMaxMiB > (UINT64_MAX >> 20))
    return createStringError("--cache-max-mib is too large");
  args.store.cacheMaxBytes = cacheMaxMiB << 20;
  args.store.maxConstantBytes = maxConstantMiB << 20;
  args.store.maxObjectBytes = maxObjectMiB << 20;
  return args;
}

/// Loads or reloads the module of one watched file and logs one line with the outcome.
class WatchLoader {
public:
  WatchLoader(ModuleStore &store, unsigned optLevel) : store(store), optLevel(optLevel) {}

  void load(const std::string &path) {
    // One at a time: the initial scan and the watcher may report the same file at once.
    std::lock_guard<std::mutex> lock(mutex);
    std::string name = sys::path::stem(path).str();
    if (!isModuleName(name)) {
      // Whoever can write to the directory chose this name: quoted, as a client's path is.
      logEvent(LogLevel::Warn,
               "watch: skipping " + textLogValue(path, LogQuoting::Always) +
                   ": its name is not a module name",
               {{"file", StringRef(path)}});
      return;
    }
    ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(path);
    if (!file) {
      logEvent(LogLevel::Warn, "watch: cannot read '" + path + "': " + file.getError().message(),
               {{"module", StringRef(name)}, {"file", StringRef(path)}});
      return;
    }
    // At the watch's opt level; a module the API made keeps its executor.
    ModuleOptions options;
    if (Expected<ModuleInfo> current = store.info(name))
      options = current->options;
    else
      consumeError(current.takeError());
    options.optLevel = optLevel;
    auto started = std::chrono::steady_clock::now();
    Expected<LoadResult> loaded = store.load(name, (*file)->getBuffer(), options,
                                             ModuleStore::Mode::Upsert, path, /*deadline=*/false);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (loaded) {
      logEvent(LogLevel::Info,
               formatv("watch: {0} '{1}' from {2}: version {3} in {4:f1} ms",
                       loaded->created ? "loaded" : "reloaded", name, path, loaded->info.version,
                       ms)
                   .str(),
               {{"module", StringRef(name)},
                {"file", StringRef(path)},
                {"version", loaded->info.version},
                {"duration_ms", ms}});
      return;
    }
    std::string reason;
    handleAllErrors(
        loaded.takeError(), [&](const ServeError &e) { reason = describeFailure(e); },
        [&](const ErrorInfoBase &e) { reason = e.message(); });
    Expected<ModuleInfo> serving = store.info(name);
    std::string outcome = "nothing serves it";
    if (serving)
      outcome = "version " + std::to_string(serving->version) + " keeps serving";
    else
      consumeError(serving.takeError());
    logEvent(LogLevel::Warn,
             formatv("watch: loading '{0}' from {1} failed after {2:f1} ms: {3}; {4}", name, path,
                     ms, reason, outcome)
                 .str(),
             {{"module", StringRef(name)}, {"file", StringRef(path)}, {"duration_ms", ms}});
  }

private:
  ModuleStore &store;
  unsigned optLevel;
  std::mutex mutex;
};

std::vector<std::string> mlirFiles(const std::string &dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    if (sys::path::extension(it->path()) == ".mlir" && sys::fs::is_regular_file(it->path()))
      files.push_back(it->path());
  llvm::sort(files);
  return files;
}

} // namespace

int main(int argc, char **argv) {
  ExitOnError exitOnError("courier-serve: error: ");
  Arguments args = exitOnError(parseArguments(argc, argv));
  // What module workers (and a local executor's session workers) print becomes lines of the
  // server's log, in its format.
  executor::logWorkerOutput();
  // Module workers run as this user: not dumpable, this process's memory cannot be opened
  // through /proc by them (nor core-dumped, with modules' data in it).
  if (args.store.isolation == Isolation::Process)
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // A cache directory every compile would refuse (another user's, or writable by others) is
  // refused now, once, rather than in every module's 422.
  if (std::string dir = args.store.cacheDir.empty() ? defaultCacheDir() : args.store.cacheDir;
      !dir.empty())
    exitOnError(DiskCache::open(dir, args.store.cacheMaxBytes));

  // Before any thread starts, so only the waiter sees the stop signals.
  transport::StopSignals stopSignals;

  auto store = std::make_unique<ModuleStore>(args.store);
  std::unique_ptr<RestService> service = exitOnError(RestService::create(args.serve, *store));

  // Watch before the first scan, so an edit made while loading is not missed.
  WatchLoader loader(*store, args.watchOptLevel);
  std::unique_ptr<FileWatcher> watcher;
  if (!args.watchDir.empty())
    watcher = exitOnError(FileWatcher::create(
        args.watchDir, ".mlir", [&loader](const std::string &path) { loader.load(path); }));

  transport::announceListening(service->address());

  std::atomic<bool> stopping{false};
  std::thread initialLoad([&] {
    if (!args.watchDir.empty())
      for (const std::string &path : mlirFiles(args.watchDir)) {
        if (stopping)
          return;
        loader.load(path);
      }
    if (!stopping)
      service->setReady(true);
  });

  // A second signal, during the drain, stops at once. Once stopped, isolated calls still
  // running have ended with their workers; in-process ones cannot be ended, and run() waits
  // for them, so past a bound the process leaves without them.
  std::mutex runMutex;
  std::condition_variable runEnded;
  bool runReturned = false;
  stopSignals.whenReceived(
      [&] {
        stopping = true;
        service->drainAndStop();
        std::unique_lock<std::mutex> lock(runMutex);
        if (!runEnded.wait_for(lock, std::chrono::seconds(10), [&] { return runReturned; })) {
          logEvent(LogLevel::Warn, "calls still running 10 s after the server stopped "
                                   "(in-process code cannot be stopped); exiting without them");
          std::fflush(stderr);
          std::_Exit(0);
        }
      },
      [&] { service->cutDrainShort(); });
  Error served = service->run();
  {
    std::lock_guard<std::mutex> lock(runMutex);
    runReturned = true;
  }
  runEnded.notify_all();
  stopSignals.stopWaiting();
  stopping = true;
  initialLoad.join();
  watcher.reset();
  // Compiles abandoned by a timed-out request may still run; give them a moment, then leave
  // without waiting for code that cannot be interrupted.
  if (!store->waitForCompiles(std::chrono::seconds(10))) {
    logEvent(LogLevel::Warn, "compiles still running at exit; not waiting");
    std::fflush(stderr);
    std::_Exit(served ? 1 : 0);
  }
  service.reset();
  store.reset();
  exitOnError(std::move(served));
  return 0;
}
