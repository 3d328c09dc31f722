// courier-serve: the engine as a REST service (docs/rest.md) until SIGINT or SIGTERM, which
// start a drain. Prints "listening on HOST:PORT" ("https://HOST:PORT" with TLS, or
// "unix:PATH") once bound, so callers can pass port 0. With --watch, loads every
// *.mlir of a directory as a module named by its stem and reloads it when the file changes.
#include "executor/WorkerOutput.h"
#include "jit/DiskCache.h"
#include "serve/ModuleStore.h"
#include "serve/RestService.h"
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

namespace {

struct Arguments {
  ServeOptions serve;
  StoreOptions store;
  std::string watchDir;
  unsigned watchOptLevel = 2;
};

/// What the command line gives that is not an option itself, turned into options once read.
struct Given {
  std::string listen = "127.0.0.1:8080", tokenFile, executorTokenFile;
  uint64_t maxBody = 0, maxModules = 64, timeoutMs = 60000, threads = 512;
  uint64_t cacheMaxMiB = 0, invokeTimeoutMs = 0, maxConstantMiB = 0, maxObjectMiB = 0;
  uint64_t jobs = 0, watchOptLevel = 2, workersPerModule = 1, kernelThreads = 0;
  bool maxConnectionsGiven = false;
};

using Reader = transport::ArgumentReader;

/// A take() that sets `flag` (a switch) to `to`.
std::function<Error(const Reader &)> set(bool &flag, bool to) {
  return [&flag, to](const Reader &) {
    flag = to;
    return Error::success();
  };
}

/// The flags that name files and places: where to listen, tokens, executors, caches.
std::vector<transport::ServerFlag> placeFlags(Arguments &args, Given &given) {
  using transport::textInto;
  return {
      {"--listen", "HOST:PORT",
       "Address to bind: HOST:PORT (default 127.0.0.1:8080; port 0 picks a free one) or "
       "unix:PATH (a socket file created mode 0600)",
       textInto(given.listen)},
      {"--token-file", "FILE", "File holding the bearer token every request must carry",
       textInto(given.tokenFile)},
      {"--executor", "ADDR|local",
       "Send every target module to this executor instead of the IR's addresses (a module's "
       "options.executor overrides it)",
       textInto(args.store.engine.executorOverride)},
      {"--executor-token-file", "FILE", "File holding the bearer token for HTTP executors",
       textInto(given.executorTokenFile)},
      {"--tls-ca", "FILE",
       "PEM file of the CAs an https:// executor's certificate may chain to (default: "
       "$COURIER_TLS_CA, else the system's)",
       textInto(args.store.engine.executors.tls.caFile)},
      {"--tls-client-cert", "FILE",
       "PEM client certificate for executors that ask for one (default: "
       "$COURIER_TLS_CLIENT_CERT)",
       textInto(args.store.engine.executors.tls.certFile)},
      {"--tls-client-key", "FILE",
       "The client certificate's PEM key (default: $COURIER_TLS_CLIENT_KEY)",
       textInto(args.store.engine.executors.tls.keyFile)},
      {"--watch", "DIR", "Load DIR/*.mlir as modules named by their stems; reload on change",
       textInto(args.watchDir)},
      {"--cache-dir", "DIR", "Engine cache and object directory (default $XDG_CACHE_HOME/courier)",
       textInto(args.store.engine.cacheDir)},
  };
}

/// The flags that bound what the server and its modules may use.
std::vector<transport::ServerFlag> limitFlags(Arguments &args, Given &given) {
  using transport::numberInto;
  return {
      {"--watch-opt-level", "N",
       "Opt level of the modules --watch loads, 0-3 (default 2); 0 or 1 for development: an "
       "edited kernel compiles in a fraction of the time, and runs slower "
       "(docs/performance.md)",
       numberInto(given.watchOptLevel, 0, 3)},
      {"--jobs", "N",
       "Threads generating code for a module's target modules at once (default 0: one per "
       "core)",
       numberInto(given.jobs, 0, EngineOptions::kMaxJobs)},
      {"--cache-max-mib", "N",
       "Bound on the cache directory's size; least recently used files go first (default 1024; "
       "0: no bound)",
       numberInto(given.cacheMaxMiB, 0, UINT64_MAX >> 20)},
      {"--max-body-bytes", "N", "Largest request body accepted (default 268435456)",
       numberInto(given.maxBody, 1)},
      {"--max-modules", "N", "Most modules held at once (default 64)",
       numberInto(given.maxModules, 1)},
      {"--compile-timeout-ms", "N",
       "Longest a request waits for a compile and the module's setup() (default 60000)",
       numberInto(given.timeoutMs)},
      // Beyond 2^44 MiB a byte count would wrap round to a small limit.
      {"--max-constant-mib", "N",
       "Largest constant a module may hold, a splat counted at its full size (default 64; 0: "
       "no limit)",
       numberInto(given.maxConstantMiB, 0, UINT64_MAX >> 20)},
      {"--max-object-mib", "N",
       "Largest object a module (host or target) may compile to (default 256; 0: no limit)",
       numberInto(given.maxObjectMiB, 0, UINT64_MAX >> 20)},
      {"--threads", "N",
       "Requests served at once (default 512; an idle connection holds no thread, and four "
       "threads per core serve while requests keep moving)",
       numberInto(given.threads)},
      {"--invoke-timeout-ms", "N",
       "With process isolation, end an invoke that runs longer (default 60000; 0: no limit; a "
       "request's X-Courier-Deadline-Ms replaces it)",
       numberInto(given.invokeTimeoutMs)},
      {"--module-memory-mib", "N",
       "Address space each module worker may use (default 4096; 0: none)",
       numberInto(args.store.engine.workerMemoryMiB, 0, UINT64_MAX >> 21)},
      {"--workers-per-module", "N",
       "Worker processes each module version runs in, each set up, a call going to an idle "
       "one (default 1; at most 64)",
       [&given](const Reader &flags) -> Error {
         if (Error error = flags.number(given.workersPerModule))
           return error;
         if (given.workersPerModule < 1 ||
             given.workersPerModule > EngineOptions::kMaxWorkersPerModule)
           return createStringError("--workers-per-module is 1 to " +
                                    Twine(EngineOptions::kMaxWorkersPerModule));
         return Error::success();
       }},
      {"--kernel-threads", "N",
       "Threads a kernel's parallel loops use, per module worker (in this process with "
       "--isolation none; 1 to 1024; default: the CPUs this process may run on, "
       "sched_getaffinity)",
       numberInto(given.kernelThreads, 1, 1024)},
      {"--drain-timeout-ms", "N",
       "On SIGTERM, how long requests in flight may take to finish while /v1/ready answers 503 "
       "and new modules are refused (default 30000)",
       [&args](const Reader &flags) { return transport::setDrainTimeout(flags, args.serve); }},
  };
}

/// Every flag courier-serve takes, as --help lists them and as each is read.
std::vector<transport::ServerFlag> flags(Arguments &args, Given &given) {
  std::vector<transport::ServerFlag> own = {
      {"--quiet", "", "Do not log one line per request to stderr",
       set(args.serve.logRequests, false)},
      {"--isolation", "process|none",
       "process (default): each module version compiles, links and runs in a sandboxed worker "
       "process of its own; none: in this process",
       [&args](const Reader &flags) -> Error {
         if (flags.value() != "process" && flags.value() != "none")
           return createStringError("--isolation is 'process' or 'none', got '" + flags.value() +
                                    "'");
         args.store.engine.isolation =
             flags.value() == "process" ? Isolation::Process : Isolation::InProcess;
         return Error::success();
       }},
      {"--no-sandbox", "", "Start module workers without no-new-privs and seccomp",
       set(args.store.engine.workerSandbox, false)},
      {"--allow-shared-memory", "",
       "Take KServe v2 tensors in POSIX shared memory that clients on this host register "
       "(/v2/systemsharedmemory); off by default, since the server then reads and writes "
       "memory a client names",
       set(args.serve.allowSharedMemory, true)},
  };
  for (auto more : {placeFlags(args, given), limitFlags(args, given), transport::logFlags(),
                    transport::tlsFlags(args.serve),
                    transport::connectionFlags(args.serve, given.maxConnectionsGiven)})
    own.insert(own.end(), more.begin(), more.end());
  return own;
}

Expected<Arguments> parseArguments(int argc, char **argv) {
  Arguments args;
  Given given;
  given.maxBody = args.serve.maxBodyBytes;
  given.cacheMaxMiB = args.store.engine.cacheMaxBytes >> 20;
  given.invokeTimeoutMs = args.store.engine.invokeTimeout.count();
  given.maxConstantMiB = args.store.engine.maxConstantBytes >> 20;
  given.maxObjectMiB = args.store.engine.maxObjectBytes >> 20;
  given.watchOptLevel = args.watchOptLevel;
  if (Error error = transport::readServerFlags(
          argc, argv, "courier-serve",
          "The engine as a REST service (docs/rest.md): submit MLIR modules, invoke their "
          "entries through /v1 or KServe v2, replace them while they serve",
          flags(args, given)))
    return std::move(error);

  if (Error error = transport::parseListenAddress(given.listen, args.serve))
    return std::move(error);
  for (auto [flag, path, into] : {std::tuple{"--token-file", &given.tokenFile, &args.serve.token},
                                  std::tuple{"--executor-token-file", &given.executorTokenFile,
                                             &args.store.engine.executors.bearerToken}}) {
    if (path->empty())
      continue;
    Expected<std::string> token = transport::readTokenFile(flag, *path);
    if (!token)
      return token.takeError();
    *into = std::move(*token);
  }
  if (Error error = transport::checkThreadCount(given.threads))
    return std::move(error);
  if (Error error = transport::fitConnectionLimit(args.serve, given.maxConnectionsGiven))
    return std::move(error);
  if (!args.watchDir.empty() && !sys::fs::is_directory(args.watchDir))
    return createStringError("--watch '" + args.watchDir + "' is not a directory");
  args.store.engine.invokeTimeout = std::chrono::milliseconds(given.invokeTimeoutMs);
  args.store.engine.workersPerModule = static_cast<unsigned>(given.workersPerModule);
  args.store.engine.kernelThreads = static_cast<unsigned>(given.kernelThreads);
  args.store.engine.jobs = static_cast<unsigned>(given.jobs);
  args.watchOptLevel = static_cast<unsigned>(given.watchOptLevel);
  args.serve.threads = static_cast<unsigned>(given.threads);
  args.serve.maxBodyBytes = given.maxBody;
  args.store.maxModules = static_cast<size_t>(given.maxModules);
  args.store.engine.compileTimeout = std::chrono::milliseconds(given.timeoutMs);
  args.store.engine.cacheMaxBytes = given.cacheMaxMiB << 20;
  args.store.engine.maxConstantBytes = given.maxConstantMiB << 20;
  args.store.engine.maxObjectBytes = given.maxObjectMiB << 20;
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

/// What the process sets up before anything else: worker output as log lines, no dumping, and
/// a cache directory compiles can use.
Error prepareProcess(const Arguments &args) {
  // What module workers (and a local executor's session workers) print becomes lines of the
  // server's log, in its format.
  executor::logWorkerOutput();
  // Module workers run as this user: not dumpable, this process's memory cannot be opened
  // through /proc by them (nor core-dumped, with modules' data in it).
  if (args.store.engine.isolation == Isolation::Process)
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // A cache directory every compile would refuse (another user's, or writable by others) is
  // refused now, once, rather than in every module's 422.
  if (std::string dir =
          args.store.engine.cacheDir.empty() ? defaultCacheDir() : args.store.engine.cacheDir;
      !dir.empty())
    return DiskCache::open(dir, args.store.engine.cacheMaxBytes).takeError();
  return Error::success();
}

/// Serves until a stop signal: the first drains, a second cuts the drain short. Once stopped,
/// isolated calls still running have ended with their workers; in-process ones cannot be
/// ended, and run() waits for them, so past a bound the process leaves without them.
Error serveUntilStopped(RestService &service, transport::StopSignals &stopSignals,
                        std::atomic<bool> &stopping) {
  std::mutex runMutex;
  std::condition_variable runEnded;
  bool runReturned = false;
  stopSignals.whenReceived(
      [&] {
        stopping = true;
        service.drainAndStop();
        std::unique_lock<std::mutex> lock(runMutex);
        if (!runEnded.wait_for(lock, std::chrono::seconds(10), [&] { return runReturned; })) {
          logEvent(LogLevel::Warn, "calls still running 10 s after the server stopped "
                                   "(in-process code cannot be stopped); exiting without them");
          std::fflush(stderr);
          std::_Exit(0);
        }
      },
      [&] { service.cutDrainShort(); });
  Error served = service.run();
  {
    std::lock_guard<std::mutex> lock(runMutex);
    runReturned = true;
  }
  runEnded.notify_all();
  stopSignals.stopWaiting();
  return served;
}
} // namespace

int main(int argc, char **argv) {
  ExitOnError exitOnError("courier-serve: error: ");
  Arguments args = exitOnError(parseArguments(argc, argv));
  exitOnError(prepareProcess(args));

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

  // With nothing to load first, ready as soon as it listens.
  if (args.watchDir.empty())
    service->setReady(true);
  transport::announceListening(service->address());

  std::atomic<bool> stopping{false};
  std::thread initialLoad;
  if (!args.watchDir.empty())
    initialLoad = std::thread([&] {
      for (const std::string &path : mlirFiles(args.watchDir)) {
        if (stopping)
          return;
        loader.load(path);
      }
      if (!stopping)
        service->setReady(true);
    });

  Error served = serveUntilStopped(*service, stopSignals, stopping);
  stopping = true;
  if (initialLoad.joinable())
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
