// courier-serve: the engine as a REST service (docs/rest.md) until SIGINT or SIGTERM. Prints
// "listening on HOST:PORT" once bound, so callers can pass port 0. With --watch, loads every
// *.mlir of a directory as a module named by its stem and reloads it when the file changes.
#include "tools/courier-serve/ModuleStore.h"
#include "tools/courier-serve/RestService.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <thread>

using namespace llvm;
using namespace courier;
using namespace courier::serve;

static const char *const kUsage =
    "usage: courier-serve [--listen HOST:PORT] [--token-file FILE] [--executor ADDR|local]\n"
    "                     [--executor-token-file FILE] [--watch DIR] [--cache-dir DIR]\n"
    "                     [--max-body-bytes N] [--max-modules N] [--compile-timeout-ms N]\n"
    "                     [--threads N] [--quiet]\n"
    "  --listen              address to bind (default 127.0.0.1:8080; port 0 picks a free one)\n"
    "  --token-file          file holding the bearer token every request must carry\n"
    "  --executor            send every target module to this executor instead of the IR's\n"
    "                        addresses (a module's options.executor overrides it)\n"
    "  --executor-token-file file holding the bearer token for HTTP executors\n"
    "  --watch               load DIR/*.mlir as modules named by their stems; reload on change\n"
    "  --cache-dir           engine cache and object directory (default $XDG_CACHE_HOME/courier)\n"
    "  --max-body-bytes      largest request body accepted (default 268435456)\n"
    "  --max-modules         most modules held at once (default 64)\n"
    "  --compile-timeout-ms  longest a request waits for a compile (default 60000)\n"
    "  --threads             worker threads; each open connection holds one (default 32)\n"
    "  --quiet               do not log one line per request to stderr\n";

namespace {

struct Arguments {
  ServeOptions serve;
  StoreOptions store;
  std::string watchDir;
};

// LLVM's cl registers an option named "threads" in the shared library, so the few flags here
// are parsed by hand.
/// The trimmed, non-empty contents of a token file.
Expected<std::string> readToken(StringRef flag, const std::string &path) {
  auto file = MemoryBuffer::getFile(path);
  if (!file)
    return createStringError("reading " + flag + " '" + path + "': " + file.getError().message());
  std::string token = (*file)->getBuffer().trim().str();
  if (token.empty())
    return createStringError(flag + " '" + path + "' is empty");
  return token;
}

Expected<Arguments> parseArguments(int argc, char **argv) {
  Arguments args;
  std::string listen = "127.0.0.1:8080", tokenFile, executorTokenFile;
  uint64_t maxBody = args.serve.maxBodyBytes, maxModules = 64, timeoutMs = 60000, threads = 32;
  for (int i = 1; i < argc; ++i) {
    StringRef arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--quiet") {
      args.serve.logRequests = false;
      continue;
    }
    // Accept both "--flag value" and "--flag=value".
    StringRef name = arg.split('=').first;
    std::string value;
    if (arg.contains('=')) {
      value = arg.split('=').second.str();
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return createStringError("missing value after " + arg + "\n" + kUsage);
    }
    auto number = [&](uint64_t &out) -> Error {
      if (StringRef(value).getAsInteger(10, out))
        return createStringError(name + " expects a number, got '" + value + "'");
      return Error::success();
    };
    Error error = Error::success();
    if (name == "--listen")
      listen = value;
    else if (name == "--token-file")
      tokenFile = value;
    else if (name == "--executor")
      args.store.defaultExecutor = value;
    else if (name == "--executor-token-file")
      executorTokenFile = value;
    else if (name == "--watch")
      args.watchDir = value;
    else if (name == "--cache-dir")
      args.store.cacheDir = value;
    else if (name == "--max-body-bytes")
      error = number(maxBody);
    else if (name == "--max-modules")
      error = number(maxModules);
    else if (name == "--compile-timeout-ms")
      error = number(timeoutMs);
    else if (name == "--threads")
      error = number(threads);
    else
      return createStringError("unknown option '" + arg + "'\n" + kUsage);
    if (error)
      return std::move(error);
  }

  StringRef address = listen;
  size_t colon = address.rfind(':');
  unsigned port = 0;
  if (colon == StringRef::npos || address.drop_front(colon + 1).getAsInteger(10, port) ||
      port > 65535)
    return createStringError("--listen expects HOST:PORT, got '" + address + "'");
  StringRef host = address.take_front(colon);
  if (host.starts_with("[") && host.ends_with("]"))
    host = host.drop_front().drop_back();
  args.serve.host = host.str();
  args.serve.port = static_cast<int>(port);
  if (!tokenFile.empty()) {
    Expected<std::string> token = readToken("--token-file", tokenFile);
    if (!token)
      return token.takeError();
    args.serve.token = std::move(*token);
  }
  if (!executorTokenFile.empty()) {
    Expected<std::string> token = readToken("--executor-token-file", executorTokenFile);
    if (!token)
      return token.takeError();
    args.store.executorToken = std::move(*token);
  }
  if (threads == 0 || threads > 4096)
    return createStringError("--threads must be between 1 and 4096");
  if (maxModules == 0)
    return createStringError("--max-modules must be at least 1");
  if (maxBody == 0)
    return createStringError("--max-body-bytes must be at least 1");
  if (!args.watchDir.empty() && !sys::fs::is_directory(args.watchDir))
    return createStringError("--watch '" + args.watchDir + "' is not a directory");
  args.serve.threads = static_cast<unsigned>(threads);
  args.serve.maxBodyBytes = maxBody;
  args.store.maxModules = static_cast<size_t>(maxModules);
  args.store.compileTimeout = std::chrono::milliseconds(timeoutMs);
  return args;
}

/// Loads or reloads the module of one watched file and logs one line with the outcome.
class WatchLoader {
public:
  explicit WatchLoader(ModuleStore &store) : store(store) {}

  void load(const std::string &path) {
    // One at a time: the initial scan and the watcher may report the same file at once.
    std::lock_guard<std::mutex> lock(mutex);
    std::string name = sys::path::stem(path).str();
    if (!isModuleName(name)) {
      std::fprintf(stderr, "watch: skipping '%s': '%s' is not a module name\n", path.c_str(),
                   name.c_str());
      return;
    }
    ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(path);
    if (!file) {
      std::fprintf(stderr, "watch: cannot read '%s': %s\n", path.c_str(),
                   file.getError().message().c_str());
      return;
    }
    auto started = std::chrono::steady_clock::now();
    Expected<LoadResult> loaded = store.load(name, (*file)->getBuffer(), std::nullopt,
                                             ModuleStore::Mode::Upsert, path, /*deadline=*/false);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (loaded) {
      std::fprintf(stderr, "watch: %s '%s' from %s: version %llu in %.1f ms\n",
                   loaded->created ? "loaded" : "reloaded", name.c_str(), path.c_str(),
                   static_cast<unsigned long long>(loaded->info.version), ms);
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
    std::fprintf(stderr, "watch: loading '%s' from %s failed after %.1f ms: %s; %s\n", name.c_str(),
                 path.c_str(), ms, reason.c_str(), outcome.c_str());
  }

private:
  ModuleStore &store;
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
  ExitOnError exitOnError("courier-serve: ");
  Arguments args = exitOnError(parseArguments(argc, argv));

  // Block the stop signals before any thread starts, so only the waiter below sees them.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto store = std::make_unique<ModuleStore>(args.store);
  std::unique_ptr<RestService> service = exitOnError(RestService::create(args.serve, *store));

  // Watch before the first scan, so an edit made while loading is not missed.
  WatchLoader loader(*store);
  std::unique_ptr<FileWatcher> watcher;
  if (!args.watchDir.empty())
    watcher = exitOnError(FileWatcher::create(
        args.watchDir, ".mlir", [&loader](const std::string &path) { loader.load(path); }));

  std::printf("listening on %s\n", service->address().c_str());
  std::fflush(stdout);

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

  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stopSignals, &signal);
    stopping = true;
    service->stop();
  });
  Error served = service->run();
  // run() may also end on its own; wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  stopping = true;
  initialLoad.join();
  watcher.reset();
  // Compiles abandoned by a timed-out request may still run; give them a moment, then leave
  // without waiting for code that cannot be interrupted.
  if (!store->waitForCompiles(std::chrono::seconds(10))) {
    std::fprintf(stderr, "courier-serve: compiles still running at exit; not waiting\n");
    std::fflush(stderr);
    std::_Exit(served ? 1 : 0);
  }
  service.reset();
  store.reset();
  exitOnError(std::move(served));
  return 0;
}
