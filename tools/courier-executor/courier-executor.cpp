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

/// Every flag courier-executor takes, as --help lists them: a flag not listed is refused.
static std::vector<courier::transport::OptionHelp> optionHelp() {
  std::vector<courier::transport::OptionHelp> own = {
      {"--listen", "HOST:PORT",
       "Address to bind: HOST:PORT (default 127.0.0.1:7000; port 0 picks a free one) or "
       "unix:PATH (a socket file created mode 0600)"},
      {"--plugin", "LIB.so", "Shared library whose symbols `call` can reach (repeatable)"},
      {"--token-file", "FILE", "File holding the bearer token every request must carry"},
      {"--idle-timeout", "SECONDS", "Close sessions unused for this long (default 600)"},
      {"--object-grace", "SECONDS",
       "Drop objects no session holds after this long (default 60; fractions ok)"},
      {"--max-object-store-mib", "N",
       "Most the object store holds (default 1024): an upload past it evicts objects no "
       "session holds, oldest first, or is answered 507 store_full when sessions hold too much"},
      {"--threads", "N",
       "Requests served at once (default 512; an idle connection holds no thread, and four "
       "threads per core serve while requests keep moving)"},
      {"--max-body-mib", "N", "Largest request body accepted (default 4096)"},
      {"--isolation", "process|none",
       "process (default): each session's code runs in its own sandboxed worker process; "
       "none: in this process, uncontained"},
      {"--launch-timeout-ms", "N",
       "End a launch, call or async launch running longer (default 60000); requests may ask "
       "for less with X-Courier-Deadline-Ms"},
      {"--worker-memory-mib", "N", "Address space a worker's kernels may use (default 4096)"},
      {"--worker-cpu-seconds", "N",
       "CPU time a worker may use over its life, all its threads counted (default: no limit)"},
      {"--kernel-threads", "N",
       "Threads a kernel's parallel loops use, per session's worker (default: the CPUs this "
       "process may run on, sched_getaffinity)"},
      {"--warm-workers", "N", "Workers started ahead of need (default 2)"},
      {"--max-sessions", "N", "Most sessions open at once, each a worker process (default 128)"},
      {"--no-sandbox", "", "Run workers without seccomp (only where seccomp is unavailable)"},
      {"--drain-timeout-ms", "N",
       "On SIGTERM, how long requests in flight may take to finish while /v1/ready answers 503 "
       "and new sessions are refused (default 30000)"},
      {"--shm-arena-mib", "N",
       "Shared memory a same-host client's session may use for its launches' inputs and "
       "results, half each (default 256; 0 offers no channel)"},
      {"--allow-unsigned-objects", "", "Accept objects without signature tables"},
      {"--quiet", "", "Do not log one line per request to stderr"},
  };
  for (auto shared : {courier::transport::logOptionHelp(), courier::transport::tlsOptionHelp(),
                      courier::transport::connectionOptionHelp()})
    own.insert(own.end(), shared.begin(), shared.end());
  return own;
}

static Expected<ExecutorServerOptions> parseArguments(int argc, char **argv) {
  ExecutorServerOptions options;
  std::string listen = "127.0.0.1:7000", tokenFile;
  uint64_t maxBodyMiB = 4096, idleSeconds = 600, threads = 512;
  double graceSeconds = 60;
  bool maxConnectionsGiven = false;
  uint64_t launchTimeoutMs = 60000, warmWorkers = 2;
  static const std::vector<courier::transport::OptionHelp> known = optionHelp();
  static const std::string help = courier::transport::serverHelp(
      "courier-executor",
      "Run the kernels clients ship (docs/protocol.md): sessions, content-addressed objects and "
      "launches over HTTP, each session's code in a sandboxed worker process",
      known);
  courier::transport::ArgumentReader args(argc, argv, help.c_str());
  while (args.next()) {
    if (!courier::transport::listsOption(known, args.name()))
      return args.unknown();
    if (args.arg() == "--quiet") {
      options.logRequests = false;
      continue;
    }
    if (args.arg() == "--no-sandbox") {
      options.sandbox = false;
      continue;
    }
    if (args.arg() == "--allow-unsigned-objects") {
      options.allowUnsignedObjects = true;
      continue;
    }
    Expected<bool> logFlag = courier::transport::readLogFormatFlag(args);
    if (!logFlag)
      return logFlag.takeError();
    if (*logFlag)
      continue;
    Expected<bool> tls = courier::transport::readTlsFlag(args, options);
    if (!tls)
      return tls.takeError();
    if (*tls)
      continue;
    Expected<bool> connections =
        courier::transport::readConnectionFlag(args, options, maxConnectionsGiven);
    if (!connections)
      return connections.takeError();
    if (*connections)
      continue;
    StringRef name = args.name();
    if (!llvm::is_contained({"--listen", "--plugin", "--token-file", "--idle-timeout",
                             "--object-grace", "--threads", "--max-body-mib", "--isolation",
                             "--launch-timeout-ms", "--worker-memory-mib", "--worker-cpu-seconds",
                             "--kernel-threads", "--warm-workers", "--max-sessions",
                             "--drain-timeout-ms", "--shm-arena-mib", "--max-object-store-mib"},
                            name))
      return args.unknown();
    if (Error e = args.readValue())
      return std::move(e);
    const std::string &value = args.value();
    if (name == "--listen") {
      listen = value;
    } else if (name == "--plugin") {
      options.plugins.push_back(value);
    } else if (name == "--token-file") {
      tokenFile = value;
    } else if (name == "--idle-timeout") {
      if (Error e = args.number(idleSeconds))
        return std::move(e);
    } else if (name == "--object-grace") {
      if (StringRef(value).getAsDouble(graceSeconds) || !(graceSeconds >= 0) || graceSeconds > 1e6)
        return createStringError("--object-grace expects seconds, got '" + value + "'");
    } else if (name == "--threads") {
      if (Error e = args.number(threads))
        return std::move(e);
    } else if (name == "--max-body-mib") {
      if (Error e = args.number(maxBodyMiB))
        return std::move(e);
    } else if (name == "--isolation") {
      if (value == "process")
        options.isolation = courier::transport::Isolation::Process;
      else if (value == "none")
        options.isolation = courier::transport::Isolation::InProcess;
      else
        return createStringError("--isolation expects 'process' or 'none', got '" + value + "'");
    } else if (name == "--launch-timeout-ms") {
      if (Error e = args.number(launchTimeoutMs))
        return std::move(e);
      if (launchTimeoutMs == 0)
        return createStringError("--launch-timeout-ms must be positive");
    } else if (name == "--worker-memory-mib") {
      if (Error e = args.number(options.workerMemoryMiB))
        return std::move(e);
    } else if (name == "--worker-cpu-seconds") {
      if (Error e = args.number(options.workerCpuSeconds))
        return std::move(e);
    } else if (name == "--kernel-threads") {
      uint64_t threads = 0;
      if (Error e = args.number(threads))
        return std::move(e);
      if (threads < 1 || threads > 1024)
        return createStringError("--kernel-threads must be between 1 and 1024");
      options.kernelThreads = static_cast<unsigned>(threads);
    } else if (name == "--max-sessions") {
      uint64_t most = 0;
      if (Error e = args.number(most))
        return std::move(e);
      if (most == 0)
        return createStringError("--max-sessions must be positive");
      options.maxSessions = static_cast<size_t>(most);
    } else if (name == "--drain-timeout-ms") {
      if (Error e = courier::transport::setDrainTimeout(args, options))
        return std::move(e);
    } else if (name == "--shm-arena-mib") {
      if (Error e = args.number(options.shmArenaMiB))
        return std::move(e);
      if (options.shmArenaMiB > (uint64_t(1) << 20))
        return createStringError("--shm-arena-mib allows at most 1048576 (1 TiB)");
    } else if (name == "--max-object-store-mib") {
      if (Error e = args.number(options.maxObjectStoreMiB))
        return std::move(e);
      if (options.maxObjectStoreMiB == 0 || options.maxObjectStoreMiB > (uint64_t(1) << 30))
        return createStringError("--max-object-store-mib must be from 1 to 1073741824");
    } else if (name == "--warm-workers") {
      if (Error e = args.number(warmWorkers))
        return std::move(e);
      if (warmWorkers > 256)
        return createStringError("--warm-workers allows at most 256");
    }
  }

  if (Error e = courier::transport::parseListenAddress(listen, options))
    return std::move(e);
  if (!tokenFile.empty()) {
    Expected<std::string> token = courier::transport::readTokenFile("--token-file", tokenFile);
    if (!token)
      return token.takeError();
    options.token = std::move(*token);
  }
  if (Error e = courier::transport::checkThreadCount(threads))
    return std::move(e);
  if (Error e = courier::transport::fitConnectionLimit(options, maxConnectionsGiven))
    return std::move(e);
  options.idleTimeout = std::chrono::seconds(idleSeconds);
  options.objectGrace = std::chrono::milliseconds(static_cast<int64_t>(graceSeconds * 1000));
  options.threads = static_cast<unsigned>(threads);
  options.launchTimeout = std::chrono::milliseconds(launchTimeoutMs);
  options.warmWorkers = static_cast<unsigned>(warmWorkers);
  options.maxBodyBytes = maxBodyMiB << 20;
  return options;
}

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
