// The pieces of a server's main() that courier-executor and courier-serve share: reading the
// command line, --listen, --token-file and the TLS flags, and stopping on SIGINT or SIGTERM. No
// HTTP type appears here, so a tool can use it without the HTTP library's headers.
#ifndef COURIER_TRANSPORT_SERVERMAIN_H
#define COURIER_TRANSPORT_SERVERMAIN_H

#include "transport/ListenOptions.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace courier::transport {

/// Walks a server's command line by hand (LLVM's cl registers an option named "threads" in
/// the shared library). --help or -h prints `usage` (serverHelp's text) and exits, --version prints
/// Courier's version and exits; any other argument is a switch or a flag whose value follows after
/// '=' or as the next argument. The errors read as LLVM's tools say them: "unknown option '--x'",
/// "option '--listen' needs a value".
class ArgumentReader {
public:
  ArgumentReader(int argc, char **argv, const char *usage);

  /// Moves to the next argument; false past the last one.
  bool next();
  /// The argument as given.
  llvm::StringRef arg() const { return current; }
  /// The flag's name: the argument up to any '='.
  llvm::StringRef name() const { return current.split('=').first; }
  /// Takes the flag's value, from after its '=' or from the next argument.
  llvm::Error readValue();
  const std::string &value() const { return currentValue; }
  /// The value as a whole number.
  llvm::Error number(uint64_t &out) const;
  llvm::Error unknown() const;

private:
  int argc;
  char **argv;
  const char *usage;
  int index = 0;
  llvm::StringRef current;
  std::string currentValue;
};

/// Parses --listen's HOST:PORT (an IPv6 host in brackets) or unix:PATH into `options`.
llvm::Error parseListenAddress(llvm::StringRef address, HttpListenOptions &options);

/// The trimmed, non-empty contents of the token file given to `flag`.
llvm::Expected<std::string> readTokenFile(llvm::StringRef flag, const std::string &path);

/// --drain-timeout-ms's value (read by `args`) into `options`: milliseconds, 0 to stop at
/// once.
llvm::Error setDrainTimeout(const ArgumentReader &args, HttpListenOptions &options);

/// --threads within the range a server accepts.
llvm::Error checkThreadCount(uint64_t threads);

/// One flag a server takes, declared once: how --help lists it and what taking it does. A
/// switch (empty `value`) runs `take` as given; a flag reads its value first (after '=' or as
/// the next argument), which `take` finds in the reader (value(), number()).
struct ServerFlag {
  llvm::StringRef flag;  ///< "--listen"
  llvm::StringRef value; ///< What its value is ("HOST:PORT"); empty for a switch.
  llvm::StringRef help;
  std::function<llvm::Error(const ArgumentReader &)> take;
};

/// A take() that stores the flag's value in `out`.
std::function<llvm::Error(const ArgumentReader &)> textInto(std::string &out);
/// A take() that reads a whole number from `least` to `most` into `out`; outside it, the
/// error says "FLAG must be between LEAST and MOST" ("at least LEAST" with no upper bound).
std::function<llvm::Error(const ArgumentReader &)> numberInto(uint64_t &out, uint64_t least = 0,
                                                              uint64_t most = UINT64_MAX);

/// Reads a server's command line against `flags`: --help prints serverHelp(tool, overview)
/// of them, --version the version; an argument naming none of them is refused, and each
/// other runs its flag's take(), whose error ends the reading.
llvm::Error readServerFlags(int argc, char **argv, llvm::StringRef tool, llvm::StringRef overview,
                            llvm::ArrayRef<ServerFlag> flags);

/// The flags both servers share, taken into `options`: --tls-cert FILE, --tls-key FILE,
/// --tls-client-ca FILE and --insecure-plaintext (HttpService::bind() checks how they combine
/// and loads the files).
std::vector<ServerFlag> tlsFlags(HttpListenOptions &options);

/// --max-connections N and --max-connections-per-client N into `options`, noting in
/// `maxGiven` that --max-connections was given.
std::vector<ServerFlag> connectionFlags(HttpListenOptions &options, bool &maxGiven);

/// Raises the soft RLIMIT_NOFILE to the hard one and checks that --max-connections fits under
/// it with the descriptors a server needs besides: a value given past it is an error saying
/// what the limit allows; the default is lowered to fit.
llvm::Error fitConnectionLimit(HttpListenOptions &options, bool maxGiven);

/// --log-format text|json, which sets the format of every line the process logs from then on
/// (transport/Log.h).
std::vector<ServerFlag> logFlags();

/// A server's --help, in the layout of LLVM's command-line library, which courier-run and
/// courier-opt print: OVERVIEW, USAGE, then OPTIONS: the generic ones (-h, --help, --version)
/// and the server's own, sorted, each "  --flag=<value> - help" with the helps in one column.
/// (The servers read their flags with readServerFlags: LLVM's library registers options of
/// its own, one named "threads", in the shared library.)
std::string serverHelp(llvm::StringRef tool, llvm::StringRef overview,
                       llvm::ArrayRef<ServerFlag> flags);

/// Prints "listening on HOST:PORT" ("listening on https://HOST:PORT" with TLS, or "listening
/// on unix:PATH") on stdout, the line callers wait for before connecting.
void announceListening(const std::string &address);

/// SIGINT and SIGTERM, delivered to one waiter thread: construct before any thread starts (the
/// signals are blocked from then on, and SIGPIPE ignored), start the waiter with
/// whenReceived(), and call stopWaiting() once serving ends, by a signal or on its own.
class StopSignals {
public:
  StopSignals();
  ~StopSignals() { stopWaiting(); }
  StopSignals(const StopSignals &) = delete;
  StopSignals &operator=(const StopSignals &) = delete;

  /// The first signal runs `onStop` (a drain, which may take a while) on a thread of its
  /// own; a second one, while that runs, runs `onSecond` (cutting the drain short).
  void whenReceived(std::function<void()> onStop, std::function<void()> onSecond);
  void stopWaiting();

private:
  sigset_t signals;
  std::thread waiter;
  std::atomic<bool> finished{false};
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SERVERMAIN_H
