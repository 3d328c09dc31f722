// courier-executor: serves the /v1 executor protocol (docs/protocol.md) until SIGINT or
// SIGTERM, which start a drain. Prints "listening on HOST:PORT" ("https://HOST:PORT" with
// TLS, or "unix:PATH") once bound, so callers can pass port 0.
#include "executor/ExecutorServer.h"
#include "executor/WorkerOutput.h"
#include "transport/ServerMain.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"

#include <climits>
#include <cstdlib>
#include <unistd.h>

using namespace llvm;
using courier::executor::ExecutorServer;
using courier::executor::ExecutorServerOptions;

namespace {

/// What the command line gives that is not an option itself, turned into options once read.
struct Given {
  std::string listen = "127.0.0.1:7000", tokenFile;
  uint64_t maxBodyMiB = 4096, idleSeconds = 600, threads = 512, launchTimeoutMs = 60000;
  uint64_t warmWorkers = 2, kernelThreads = 0, maxSessions = 128, maxObjectStoreMiB = 1024;
  double graceSeconds = 60;
  bool maxConnectionsGiven = false;
};

/// A take() that sets `flag` (a switch) to `to`.
std::function<Error(const courier::transport::ArgumentReader &)> set(bool &flag, bool to) {
  return [&flag, to](const courier::transport::ArgumentReader &) {
    flag = to;
    return Error::success();
  };
}

/// The flags that bound what sessions' kernels may do and take.
std::vector<courier::transport::ServerFlag> workerFlags(ExecutorServerOptions &options,
                                                        Given &given) {
  using courier::transport::numberInto;
  return {
      {"--launch-timeout-ms", "N",
       "End a launch, call or async launch running longer (default 60000); requests may ask "
       "for less with X-Courier-Deadline-Ms",
       numberInto(given.launchTimeoutMs, 1)},
      {"--worker-memory-mib", "N", "Address space a worker's kernels may use (default 4096)",
       numberInto(options.core.workerMemoryMiB)},
      {"--worker-cpu-seconds", "N",
       "CPU time a worker may use over its life, all its threads counted (default: no limit)",
       numberInto(options.core.workerCpuSeconds)},
      {"--kernel-threads", "N",
       "Threads a kernel's parallel loops use, per session's worker (default: the CPUs this "
       "process may run on, sched_getaffinity)",
       numberInto(given.kernelThreads, 1, 1024)},
      {"--warm-workers", "N", "Workers started ahead of need (default 2)",
       numberInto(given.warmWorkers, 0, 256)},
      {"--max-sessions", "N", "Most sessions open at once, each a worker process (default 128)",
       numberInto(given.maxSessions, 1)},
      {"--no-sandbox", "", "Run workers without seccomp (only where seccomp is unavailable)",
       set(options.core.sandbox, false)},
  };
}

/// Every flag courier-executor takes, as --help lists them and as each is read.
std::vector<courier::transport::ServerFlag> flags(ExecutorServerOptions &options, Given &given) {
  using courier::transport::numberInto;
  using courier::transport::textInto;
  using Reader = courier::transport::ArgumentReader;
  std::vector<courier::transport::ServerFlag> own = {
      {"--listen", "HOST:PORT",
       "Address to bind: HOST:PORT (default 127.0.0.1:7000; port 0 picks a free one) or "
       "unix:PATH (a socket file created mode 0600)",
       textInto(given.listen)},
      {"--plugin", "LIB.so", "Shared library whose symbols `call` can reach (repeatable)",
       [&options](const Reader &args) {
         options.core.plugins.push_back(args.value());
         return Error::success();
       }},
      {"--token-file", "FILE", "File holding the bearer token every request must carry",
       textInto(given.tokenFile)},
      {"--idle-timeout", "SECONDS", "Close sessions unused for this long (default 600; 0: never)",
       numberInto(given.idleSeconds)},
      {"--object-grace", "SECONDS",
       "Drop objects no session holds after this long (default 60; fractions ok)",
       [&given](const Reader &args) -> Error {
         double &seconds = given.graceSeconds;
         if (StringRef(args.value()).getAsDouble(seconds) || !(seconds >= 0) || seconds > 1e6)
           return createStringError("--object-grace expects seconds, got '" + args.value() + "'");
         return Error::success();
       }},
      {"--max-object-store-mib", "N",
       "Most the object store holds (default 1024): an upload past it evicts objects no "
       "session holds, oldest first, or is answered 507 store_full when sessions hold too much",
       numberInto(given.maxObjectStoreMiB, 1, uint64_t(1) << 30)},
      {"--threads", "N",
       "Requests served at once (default 512; an idle connection holds no thread, and four "
       "threads per core serve while requests keep moving)",
       numberInto(given.threads)},
      {"--max-body-mib", "N", "Largest request body accepted (default 4096)",
       numberInto(given.maxBodyMiB)},
      {"--isolation", "process|none",
       "process (default): each session's code runs in its own sandboxed worker process; "
       "none: in this process, uncontained",
       [&options](const Reader &args) -> Error {
         if (args.value() == "process")
           options.core.isolation = courier::transport::Isolation::Process;
         else if (args.value() == "none")
           options.core.isolation = courier::transport::Isolation::InProcess;
         else
           return createStringError("--isolation expects 'process' or 'none', got '" +
                                    args.value() + "'");
         return Error::success();
       }},
  };
  std::vector<courier::transport::ServerFlag> workers = workerFlags(options, given);
  own.insert(own.end(), workers.begin(), workers.end());
  std::vector<courier::transport::ServerFlag> rest = {
      {"--drain-timeout-ms", "N",
       "On SIGTERM, how long requests in flight may take to finish while /v1/ready answers 503 "
       "and new sessions are refused (default 30000)",
       [&options](const Reader &args) {
         return courier::transport::setDrainTimeout(args, options);
       }},
      {"--shm-arena-mib", "N",
       "Shared memory a same-host client's session may use for its launches' inputs and "
       "results, half each (default 256; 0 offers no channel; at most 1048576, 1 TiB)",
       numberInto(options.shmArenaMiB, 0, uint64_t(1) << 20)},
      {"--allow-unsigned-objects", "", "Accept objects without signature tables",
       set(options.core.allowUnsignedObjects, true)},
      {"--quiet", "", "Do not log one line per request to stderr", set(options.logRequests, false)},
  };
  own.insert(own.end(), rest.begin(), rest.end());
  for (auto shared : {courier::transport::logFlags(), courier::transport::tlsFlags(options),
                      courier::transport::connectionFlags(options, given.maxConnectionsGiven)})
    own.insert(own.end(), shared.begin(), shared.end());
  return own;
}

Expected<ExecutorServerOptions> parseArguments(int argc, char **argv) {
  ExecutorServerOptions options;
  Given given;
  if (Error e = courier::transport::readServerFlags(
          argc, argv, "courier-executor",
          "Run the kernels clients ship (docs/protocol.md): sessions, content-addressed objects "
          "and launches over HTTP, each session's code in a sandboxed worker process",
          flags(options, given)))
    return std::move(e);
  if (Error e = courier::transport::parseListenAddress(given.listen, options))
    return std::move(e);
  if (!given.tokenFile.empty()) {
    Expected<std::string> token =
        courier::transport::readTokenFile("--token-file", given.tokenFile);
    if (!token)
      return token.takeError();
    options.token = std::move(*token);
  }
  if (Error e = courier::transport::checkThreadCount(given.threads))
    return std::move(e);
  if (Error e = courier::transport::fitConnectionLimit(options, given.maxConnectionsGiven))
    return std::move(e);
  options.core.idleTimeout = std::chrono::seconds(given.idleSeconds);
  options.core.objectGrace =
      std::chrono::milliseconds(static_cast<int64_t>(given.graceSeconds * 1000));
  options.core.maxStoreBytes = given.maxObjectStoreMiB << 20;
  options.threads = static_cast<unsigned>(given.threads);
  options.core.launchTimeout = std::chrono::milliseconds(given.launchTimeoutMs);
  options.core.warmWorkers = static_cast<unsigned>(given.warmWorkers);
  options.core.kernelThreads = static_cast<unsigned>(given.kernelThreads);
  options.core.maxSessions = static_cast<size_t>(given.maxSessions);
  options.maxBodyBytes = given.maxBodyMiB << 20;
  return options;
}

} // namespace

/// Kernels malloc their results, and glibc serves a large malloc with a fresh mmap whose
/// every 4 KiB page faults on first touch: for a 64 MiB result that is a third of a launch
/// (docs/performance.md). glibc backs such mappings with transparent huge pages when the
/// glibc.malloc.hugetlb tunable is set, and tunables are read only at start-up, so the
/// executor re-executes itself once with it unless the caller chose a value. It re-executes
/// the file /proc/self/exe links to, not the link: the kernel names a process after the file
/// it executes, and `ps`, `pgrep` and `top` would otherwise show the executor as "exe".
static void enableHugePageMalloc(char **argv) {
  const char *tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && StringRef(tunables).contains("glibc.malloc.hugetlb"))
    return;
  std::string value = "glibc.malloc.hugetlb=1";
  if (tunables && *tunables)
    value = std::string(tunables) + ":" + value;
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0)
    return;
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  // A binary replaced on disk since it started reads " (deleted)": only the link still
  // leads to the program that is running.
  if (length > 0 && !StringRef(self, length).ends_with(" (deleted)")) {
    self[length] = '\0';
    execv(self, argv);
  }
  execv("/proc/self/exe", argv);
  // Still here: run without the tunable rather than not at all.
}

int main(int argc, char **argv) {
  enableHugePageMalloc(argv);
  ExitOnError exitOnError("courier-executor: error: ");
  ExecutorServerOptions options = exitOnError(parseArguments(argc, argv));
  // What workers print becomes lines of the executor's log, in its format.
  courier::executor::logWorkerOutput();

  // Before any thread starts, so only the waiter sees the stop signals.
  courier::transport::StopSignals stopSignals;
  std::unique_ptr<ExecutorServer> server = exitOnError(ExecutorServer::create(std::move(options)));
  courier::transport::announceListening(server->address());

  // A balancer sees /v1/ready turn 503 and sends new sessions elsewhere while the requests
  // in flight finish; a second signal stops at once.
  stopSignals.whenReceived([&] { server->drainAndStop(); }, [&] { server->cutDrainShort(); });
  Error served = server->run();
  stopSignals.stopWaiting();
  exitOnError(std::move(served));
  return 0;
}
