// courier-executor: serves the /v1 executor protocol (docs/protocol.md) until SIGINT or
// SIGTERM. Prints "listening on HOST:PORT" once bound, so callers can pass port 0.
#include "transport/HttpServer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <thread>
#include <unistd.h>

using namespace llvm;
using courier::transport::ExecutorServer;
using courier::transport::ExecutorServerOptions;

static const char *const kUsage =
    "usage: courier-executor [--listen HOST:PORT] [--plugin LIB.so]... [--token-file FILE]\n"
    "                        [--idle-timeout SECONDS] [--object-grace SECONDS] [--threads N]\n"
    "                        [--max-body-mib N] [--quiet]\n"
    "  --listen        address to bind (default 127.0.0.1:7000; port 0 picks a free one)\n"
    "  --plugin        shared library whose symbols `call` can reach (repeatable)\n"
    "  --token-file    file holding the bearer token every request must carry\n"
    "  --idle-timeout  close sessions unused for this long (default 600)\n"
    "  --object-grace  drop objects no session holds after this long (default 60; fractions ok)\n"
    "  --threads       worker threads; each open connection holds one (default 32)\n"
    "  --max-body-mib  largest request body accepted (default 4096)\n"
    "  --quiet         do not log one line per request to stderr\n";

// LLVM's cl registers an option named "threads" in the shared library, so the few flags
// here are parsed by hand.
static Expected<ExecutorServerOptions> parseArguments(int argc, char **argv) {
  ExecutorServerOptions options;
  std::string listen = "127.0.0.1:7000", tokenFile;
  uint64_t maxBodyMiB = 4096, idleSeconds = 600, threads = 32;
  double graceSeconds = 60;
  for (int i = 1; i < argc; ++i) {
    StringRef arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--quiet") {
      options.logRequests = false;
      continue;
    }
    // Accept both "--flag value" and "--flag=value".
    StringRef name = arg.split('=').first;
    if (!llvm::is_contained({"--listen", "--plugin", "--token-file", "--idle-timeout",
                             "--object-grace", "--threads", "--max-body-mib"},
                            name))
      return createStringError("unknown option '" + arg + "'\n" + kUsage);
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
    if (name == "--listen") {
      listen = value;
    } else if (name == "--plugin") {
      options.plugins.push_back(value);
    } else if (name == "--token-file") {
      tokenFile = value;
    } else if (name == "--idle-timeout") {
      if (Error e = number(idleSeconds))
        return std::move(e);
    } else if (name == "--object-grace") {
      if (StringRef(value).getAsDouble(graceSeconds) || !(graceSeconds >= 0) || graceSeconds > 1e6)
        return createStringError("--object-grace expects seconds, got '" + value + "'");
    } else if (name == "--threads") {
      if (Error e = number(threads))
        return std::move(e);
    } else if (name == "--max-body-mib") {
      if (Error e = number(maxBodyMiB))
        return std::move(e);
    }
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
  options.host = host.str();
  options.port = static_cast<int>(port);
  if (!tokenFile.empty()) {
    auto file = MemoryBuffer::getFile(tokenFile);
    if (!file)
      return createStringError("reading --token-file '" + tokenFile +
                               "': " + file.getError().message());
    options.token = (*file)->getBuffer().trim().str();
    if (options.token.empty())
      return createStringError("--token-file '" + tokenFile + "' is empty");
  }
  if (threads == 0 || threads > 4096)
    return createStringError("--threads must be between 1 and 4096");
  options.idleTimeout = std::chrono::seconds(idleSeconds);
  options.objectGrace = std::chrono::milliseconds(static_cast<int64_t>(graceSeconds * 1000));
  options.threads = static_cast<unsigned>(threads);
  options.maxBodyBytes = maxBodyMiB << 20;
  return options;
}

/// Kernels malloc their results, and glibc serves a large malloc with a fresh mmap whose
/// every 4 KiB page faults on first touch: for a 64 MiB result that is a third of a launch
/// (docs/performance.md). glibc backs such mappings with transparent huge pages when the
/// glibc.malloc.hugetlb tunable is set, and tunables are read only at start-up, so the
/// executor re-executes itself once with it unless the caller chose a value.
static void enableHugePageMalloc(char **argv) {
  const char *tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && StringRef(tunables).contains("glibc.malloc.hugetlb"))
    return;
  std::string value = "glibc.malloc.hugetlb=1";
  if (tunables && *tunables)
    value = std::string(tunables) + ":" + value;
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0)
    return;
  execv("/proc/self/exe", argv);
  // Still here: run without the tunable rather than not at all.
}

int main(int argc, char **argv) {
  enableHugePageMalloc(argv);
  ExitOnError exitOnError("courier-executor: ");
  ExecutorServerOptions options = exitOnError(parseArguments(argc, argv));

  // Block the stop signals before any thread starts, so only the waiter below sees them.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<ExecutorServer> server = exitOnError(ExecutorServer::create(std::move(options)));
  std::printf("listening on %s\n", server->address().c_str());
  std::fflush(stdout);

  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stopSignals, &signal);
    server->stop();
  });
  Error served = server->run();
  // run() may also end on its own; wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  exitOnError(std::move(served));
  return 0;
}
