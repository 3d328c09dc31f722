// Command line and signal handling shared by courier-executor and courier-serve.
#include "transport/ServerMain.h"

#include "transport/HostPort.h"
#include "transport/Log.h"
#include "transport/ParkingServer.h"

#include "Version.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <sys/resource.h>

namespace courier::transport {

ArgumentReader::ArgumentReader(int argc, char **argv, const char *usage)
    : argc(argc), argv(argv), usage(usage) {}

bool ArgumentReader::next() {
  if (++index >= argc)
    return false;
  current = argv[index];
  currentValue.clear();
  if (current == "--help" || current == "-h") {
    std::fputs(usage, stdout);
    std::exit(0);
  }
  if (current == "--version") {
    std::printf("%s\n", versionText(llvm::sys::path::filename(argv[0]).str()).c_str());
    std::exit(0);
  }
  return true;
}

llvm::Error ArgumentReader::readValue() {
  if (current.contains('=')) {
    currentValue = current.split('=').second.str();
  } else if (index + 1 < argc) {
    currentValue = argv[++index];
  } else {
    return llvm::createStringError("option '" + current + "' needs a value");
  }
  return llvm::Error::success();
}

llvm::Error ArgumentReader::number(uint64_t &out) const {
  if (llvm::StringRef(currentValue).getAsInteger(10, out))
    return llvm::createStringError(name() + " expects a number, got '" + currentValue + "'");
  return llvm::Error::success();
}

std::string serverHelp(llvm::StringRef tool, llvm::StringRef overview,
                       llvm::ArrayRef<ServerFlag> flags) {
  struct Line {
    llvm::StringRef flag, value, help;
  };
  std::vector<Line> generic = {
      {"-h", "", "Alias for --help"},
      {"--help", "", "Display available options"},
      {"--version", "", "Display the version of this program"},
  };
  std::vector<Line> own;
  for (const ServerFlag &f : flags)
    own.push_back({f.flag, f.value, f.help});
  llvm::sort(own,
             [](const Line &a, const Line &b) { return a.flag.ltrim('-') < b.flag.ltrim('-'); });
  auto left = [](const Line &o) {
    return o.value.empty() ? o.flag.str() : (o.flag + "=<" + o.value + ">").str();
  };
  size_t width = 0;
  for (const Line &o : generic)
    width = std::max(width, left(o).size());
  for (const Line &o : own)
    width = std::max(width, left(o).size());
  std::string out =
      ("OVERVIEW: " + overview + "\n\nUSAGE: " + tool + " [options]\n\nOPTIONS:\n\n").str();
  auto section = [&](const llvm::Twine &title, llvm::ArrayRef<Line> list) {
    out += (title + ":\n\n").str();
    for (const Line &o : list) {
      std::string flag = left(o);
      out += "  " + flag + std::string(width - flag.size(), ' ') + " - " + o.help.str() + "\n";
    }
  };
  section("Generic Options", generic);
  out += "\n";
  section(tool + " options", own);
  return out;
}

std::function<llvm::Error(const ArgumentReader &)> textInto(std::string &out) {
  return [&out](const ArgumentReader &args) {
    out = args.value();
    return llvm::Error::success();
  };
}

std::function<llvm::Error(const ArgumentReader &)> numberInto(uint64_t &out, uint64_t least,
                                                              uint64_t most) {
  return [&out, least, most](const ArgumentReader &args) -> llvm::Error {
    uint64_t value = 0;
    if (llvm::Error error = args.number(value))
      return error;
    if (value < least || value > most)
      return llvm::createStringError(
          most == UINT64_MAX
              ? llvm::formatv("{0} must be at least {1}", args.name(), least).str()
              : llvm::formatv("{0} must be between {1} and {2}", args.name(), least, most).str());
    out = value;
    return llvm::Error::success();
  };
}

llvm::Error readServerFlags(int argc, char **argv, llvm::StringRef tool, llvm::StringRef overview,
                            llvm::ArrayRef<ServerFlag> flags) {
  std::string help = serverHelp(tool, overview, flags);
  ArgumentReader args(argc, argv, help.c_str());
  while (args.next()) {
    const ServerFlag *flag =
        llvm::find_if(flags, [&](const ServerFlag &f) { return f.flag == args.name(); });
    if (flag == flags.end())
      return args.unknown();
    if (flag->value.empty() && args.arg() != flag->flag)
      return llvm::createStringError("option '" + flag->flag + "' takes no value");
    if (!flag->value.empty())
      if (llvm::Error error = args.readValue())
        return error;
    if (llvm::Error error = flag->take(args))
      return error;
  }
  return llvm::Error::success();
}

std::vector<ServerFlag> tlsFlags(HttpListenOptions &options) {
  auto file = [](std::string &into) {
    return [&into](const ArgumentReader &args) -> llvm::Error {
      if (args.value().empty())
        return llvm::createStringError(args.name() + " needs a file");
      into = args.value();
      return llvm::Error::success();
    };
  };
  return {
      {"--tls-cert", "FILE",
       "Serve TLS only (https://) with this PEM certificate chain (and --tls-key); needed, or "
       "--insecure-plaintext, beyond loopback",
       file(options.tlsCertFile)},
      {"--tls-key", "FILE", "The PEM key of --tls-cert's certificate", file(options.tlsKeyFile)},
      {"--tls-client-ca", "FILE",
       "Mutual TLS: refuse, at the handshake, clients without a certificate signed by a CA in "
       "this PEM file",
       file(options.tlsClientCaFile)},
      {"--insecure-plaintext", "",
       "Serve plaintext beyond loopback (a TLS-terminating proxy in front)",
       [&options](const ArgumentReader &) {
         options.insecurePlaintext = true;
         return llvm::Error::success();
       }},
  };
}

std::vector<ServerFlag> connectionFlags(HttpListenOptions &options, bool &maxGiven) {
  return {
      {"--max-connections", "N",
       "Connections open at once, idle ones included (default 10000, at most what "
       "RLIMIT_NOFILE allows); at the limit a new connection closes the oldest idle one, and "
       "only when every one is busy is it answered 503 overloaded and closed",
       [&options, &maxGiven](const ArgumentReader &args) -> llvm::Error {
         uint64_t value = 0;
         if (llvm::Error error = args.number(value))
           return error;
         if (value == 0 || value > 1000000)
           return llvm::createStringError("--max-connections must be between 1 and 1000000");
         options.maxConnections = static_cast<unsigned>(value);
         maxGiven = true;
         return llvm::Error::success();
       }},
      {"--max-connections-per-client", "N",
       "Connections open at once from one client address (a unix-socket client: one uid); past "
       "it, 503 overloaded (default 256; 0 for none, as behind a proxy, where every client is "
       "the proxy)",
       [&options](const ArgumentReader &args) -> llvm::Error {
         uint64_t value = 0;
         if (llvm::Error error = args.number(value))
           return error;
         if (value > 1000000)
           return llvm::createStringError(
               "--max-connections-per-client is at most 1000000 (0: none)");
         options.maxConnectionsPerClient = static_cast<unsigned>(value);
         return llvm::Error::success();
       }},
  };
}

std::vector<ServerFlag> logFlags() {
  return {
      {"--log-format", "text|json",
       "Log lines as text (default) or as JSON objects, one a line, each with its time, level "
       "and message; request lines add the request id, method, route, path, status, duration "
       "and the session or module",
       [](const ArgumentReader &args) -> llvm::Error {
         llvm::Expected<LogFormat> format = parseLogFormat(args.value());
         if (!format)
           return format.takeError();
         setLogFormat(*format);
         return llvm::Error::success();
       }},
  };
}

llvm::Error ArgumentReader::unknown() const {
  return llvm::createStringError("unknown option '" + name() + "' (see --help)");
}

llvm::Error parseListenAddress(llvm::StringRef address, HttpListenOptions &options) {
  if (address.contains("://"))
    return llvm::createStringError("--listen expects HOST:PORT or unix:PATH, got '" + address +
                                   "': no scheme; TLS is --tls-cert and --tls-key");
  llvm::Expected<HostPort> parsed = parseHostPort(address, PortZero::Allowed);
  if (!parsed)
    return llvm::createStringError("--listen expects HOST:PORT or unix:PATH, got '" + address +
                                   "': " + llvm::toString(parsed.takeError()));
  if (parsed->unixSocket) {
    options.socketPath = std::move(parsed->host);
    return llvm::Error::success();
  }
  options.host = std::move(parsed->host);
  options.port = static_cast<int>(parsed->port);
  return llvm::Error::success();
}

llvm::Expected<std::string> readTokenFile(llvm::StringRef flag, const std::string &path) {
  auto file = llvm::MemoryBuffer::getFile(path);
  if (!file)
    return llvm::createStringError("reading " + flag + " '" + path +
                                   "': " + file.getError().message());
  std::string token = (*file)->getBuffer().trim().str();
  if (token.empty())
    return llvm::createStringError(flag + " '" + path + "' is empty");
  return token;
}

llvm::Error setDrainTimeout(const ArgumentReader &args, HttpListenOptions &options) {
  uint64_t ms = 0;
  if (llvm::Error error = args.number(ms))
    return error;
  if (ms > 3600000)
    return llvm::createStringError("--drain-timeout-ms is at most 3600000 (an hour)");
  options.drainTimeout = std::chrono::milliseconds(ms);
  return llvm::Error::success();
}

llvm::Error checkThreadCount(uint64_t threads) {
  if (threads == 0 || threads > 4096)
    return llvm::createStringError("--threads must be between 1 and 4096");
  return llvm::Error::success();
}

llvm::Error fitConnectionLimit(HttpListenOptions &options, bool maxGiven) {
  struct rlimit files {};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0)
    return llvm::Error::success(); // Nothing known to check against.
  if (files.rlim_cur < files.rlim_max) {
    struct rlimit raised = files;
    raised.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
      files = raised;
  }
  if (files.rlim_cur == RLIM_INFINITY ||
      ParkingServer::filesNeeded(options.maxConnections) <= files.rlim_cur)
    return llvm::Error::success();
  size_t reserved = ParkingServer::filesNeeded(0);
  size_t fits = files.rlim_cur > reserved ? files.rlim_cur - reserved : 0;
  if (maxGiven || fits == 0)
    return llvm::createStringError(
        llvm::formatv("--max-connections {0} needs {1} open files, and RLIMIT_NOFILE allows "
                      "{2}: give --max-connections {3} or less, or raise the limit (ulimit -n, "
                      "or LimitNOFILE= in a systemd unit)",
                      options.maxConnections, ParkingServer::filesNeeded(options.maxConnections),
                      uint64_t(files.rlim_cur), fits)
            .str());
  options.maxConnections = static_cast<unsigned>(fits);
  return llvm::Error::success();
}

void announceListening(const std::string &address) {
  std::printf("listening on %s\n", address.c_str());
  std::fflush(stdout);
}

StopSignals::StopSignals() {
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

void StopSignals::whenReceived(std::function<void()> onStop, std::function<void()> onSecond) {
  waiter = std::thread([this, onStop = std::move(onStop), onSecond = std::move(onSecond)] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (finished)
      return;
    std::thread first(onStop);
    // stopWaiting() sends one more signal once serving has ended, to end this wait too.
    sigwait(&signals, &signal);
    if (!finished)
      onSecond();
    first.join();
  });
}

void StopSignals::stopWaiting() {
  if (!waiter.joinable())
    return;
  // Serving may also end on its own; wake the waiter so it can be joined.
  finished = true;
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

} // namespace courier::transport
