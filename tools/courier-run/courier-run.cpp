// courier-run: compile an MLIR file with the engine, call one entry with JSON arguments and
// print its results as JSON, one object per result.
#include "jit/Engine.h"
#include "runtime/Runtime.h"
#include "tools/common/CommandLine.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sys/prctl.h>
#include <thread>
#include <unistd.h>

using namespace courier;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("courier-run options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<file.mlir, or - for standard input>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> entryName("entry", cl::desc("Entry to call (default: main)"), cl::init("main"),
                               cl::cat(category));
cl::list<std::string> args("arg",
                           cl::desc("An input as JSON: a number, nested arrays, or "
                                    "{\"dtype\",\"shape\",\"data\"}; once per input, in order"),
                           cl::cat(category));
cl::list<std::string> argFiles("arg-file",
                               cl::desc("A file (or - for standard input) holding inputs as "
                                        "--arg takes them, one JSON value after another; "
                                        "they stand where the flag stands among the --arg"),
                               cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> executor("executor",
                              cl::desc("Send every target to this executor (\"local\", "
                                       "host:port, https://host:port or unix:PATH) instead of "
                                       "the IR's addresses"),
                              cl::cat(category));
cl::opt<unsigned> optLevel("O", cl::Prefix, cl::desc("Optimisation level, -O0 to -O3"), cl::init(2),
                           cl::cat(category));
cl::opt<unsigned> kernelThreads("kernel-threads",
                                cl::desc("Threads a kernel's parallel loops use in this process "
                                         "(default 0: the CPUs it may run on)"),
                                cl::init(0), cl::cat(category));
cl::opt<unsigned> jobs("jobs",
                       cl::desc("Threads generating code for target modules at once (default "
                                "0: one per core)"),
                       cl::init(0), cl::cat(category));
cl::opt<bool> printIR("print-ir-after-all", cl::desc("Print the IR after every pass to stderr"),
                      cl::cat(category));
cl::opt<bool> showTime("time", cl::desc("Print the time of each phase to stderr"),
                       cl::cat(category));
cl::opt<std::string> cacheDir("cache-dir",
                              cl::desc("Cache and object directory (default: "
                                       "$XDG_CACHE_HOME/courier)"),
                              cl::cat(category));
cl::opt<bool> noCache("no-disk-cache",
                      cl::desc("Neither read nor write the cache directory: compiled code and "
                               "target objects stay in memory"),
                      cl::cat(category));
cl::opt<uint64_t> cacheMaxMiB("cache-max-mib",
                              cl::desc("Bound on the disk cache's size in MiB; least recently "
                                       "used files go first (0: no bound)"),
                              cl::init(1024), cl::cat(category));
cl::opt<std::string> tokenFile("token-file",
                               cl::desc("File holding the bearer token for HTTP executors"),
                               cl::cat(category));
cl::opt<std::string> tlsCa("tls-ca",
                           cl::desc("PEM file of the CAs an https:// executor's certificate may "
                                    "chain to (default: $COURIER_TLS_CA, else the system's)"),
                           cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> tlsClientCert("tls-client-cert",
                                   cl::desc("PEM client certificate for an executor that asks "
                                            "for one (mutual TLS; default: "
                                            "$COURIER_TLS_CLIENT_CERT)"),
                                   cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> tlsClientKey("tls-client-key",
                                  cl::desc("The client certificate's PEM key (default: "
                                           "$COURIER_TLS_CLIENT_KEY)"),
                                  cl::value_desc("file"), cl::cat(category));
cl::opt<transport::SharedMemory> sharedMemory(
    "shared-memory",
    cl::desc("Launches on an executor of this host go through its shared-memory channel "
             "instead of HTTP (default auto: on a unix socket or a loopback address)"),
    cl::values(clEnumValN(transport::SharedMemory::Auto, "auto",
                          "for unix: and loopback addresses"),
               clEnumValN(transport::SharedMemory::On, "on",
                          "for any address whose executor shares this host"),
               clEnumValN(transport::SharedMemory::Off, "off", "never: launches go over HTTP")),
    cl::init(transport::SharedMemory::Auto), cl::cat(category));
cl::opt<std::string> extraPipeline("extra-pipeline",
                                   cl::desc("Passes to run before the dispatch pipeline, in "
                                            "mlir-opt syntax (e.g. \"canonicalize,cse\")"),
                                   cl::cat(category));
cl::list<std::string> plugins("plugin",
                              cl::desc("Shared library the in-process executor loads for "
                                       "dispatched library calls (repeatable)"),
                              cl::cat(category));
cl::opt<bool> watch("watch",
                    cl::desc("Keep running: on every save of the file, reload it (the old "
                             "version serves until the new one is ready, and only the target "
                             "modules the save changed are compiled) and call the entry "
                             "again; a call still running when the next save comes, or after "
                             "--invoke-timeout-ms (default 10000 here), is ended; -O0 or -O1 "
                             "make a reload quicker and the kernels slower "
                             "(docs/performance.md); Ctrl-C stops the watch"),
                    cl::cat(category));
cl::opt<bool> isolate("isolate",
                      cl::desc("Compile and run the module in a worker process of its own, "
                               "sandboxed: a crash or a timeout is reported instead of ending "
                               "courier-run (the default with --watch; --isolate=false turns "
                               "it off)"),
                      cl::cat(category));
cl::opt<unsigned> invokeTimeoutMs("invoke-timeout-ms",
                                  cl::desc("With isolation, end a call that runs longer (0: "
                                           "no limit; default 0, and 10000 with --watch)"),
                                  cl::init(0), cl::cat(category));
cl::opt<unsigned> compileTimeoutMs("compile-timeout-ms",
                                   cl::desc("With isolation, end a compile that runs longer (0: "
                                            "no limit)"),
                                   cl::init(0), cl::cat(category));
cl::opt<uint64_t> moduleMemoryMiB("module-memory-mib",
                                  cl::desc("With isolation, the address space the module's "
                                           "worker may use for compiling and running (0: no "
                                           "limit)"),
                                  cl::init(0), cl::cat(category));
cl::opt<unsigned> timeoutMs("timeout-ms", cl::desc("Per-request executor timeout"), cl::init(60000),
                            cl::cat(category));
cl::opt<uint64_t> maxConstantMiB("max-constant-mib",
                                 cl::desc("Largest constant a module may hold, counted as "
                                          "built (a splat at its full size); 0: no limit"),
                                 cl::init(EngineOptions().maxConstantBytes >> 20),
                                 cl::cat(category));
cl::opt<uint64_t> maxObjectMiB("max-object-mib",
                               cl::desc("Largest object a module (host or target) may compile "
                                        "to; 0: no limit"),
                               cl::init(EngineOptions().maxObjectBytes >> 20), cl::cat(category));

/// Serialises what courier-run prints: in a watch, the watcher's thread and the runner's
/// both report.
std::recursive_mutex outputMutex;

void say(const llvm::Twine &line) {
  std::lock_guard<std::recursive_mutex> lock(outputMutex);
  llvm::errs() << line << "\n";
}

int fail(const llvm::Twine &message) {
  say("courier-run: error: " + message);
  return 1;
}

/// A failure as courier-run reports it: a failed compile's diagnostics as mlir-opt prints
/// them (each at the start of a line, with its source line and a caret), anything else as
/// one line.
struct Failure {
  std::string diagnostics; ///< Rendered, one or more lines; empty for other failures.
  std::string line;        ///< The message on one line; empty when diagnostics say it all.
};

Failure describe(llvm::Error error) {
  Failure failure;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &compile) {
        failure.diagnostics = renderDiagnostics(compile.diagnostics);
        if (failure.diagnostics.empty())
          failure.line = compile.summary;
      },
      [&](const llvm::ErrorInfoBase &other) { failure.line = other.message(); });
  for (char &c : failure.line)
    if (c == '\n')
      c = ' ';
  return failure;
}

int fail(llvm::Error error) {
  Failure failure = describe(std::move(error));
  std::lock_guard<std::recursive_mutex> lock(outputMutex);
  llvm::errs() << failure.diagnostics;
  if (!failure.line.empty())
    return fail(failure.line);
  return 1;
}

/// The entry courier-run is invoking in this process, for the crash report; null otherwise.
std::atomic<const char *> invokingEntry{nullptr};

/// The signals code dies of, and the handlers they had before courier-run's crash report.
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP};
struct sigaction previousFaultActions[std::size(kFaultSignals)];

void writeStderr(const char *text) {
  for (size_t left = std::strlen(text); left;) {
    ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0)
      return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

/// A fault while courier-run invokes a module in process is the module's, not the
/// compiler's: it is reported as such, naming the signal and the kernel (or the entry, for
/// host code), and the process dies of the signal. A fault anywhere else goes to the handler
/// that was there before (LLVM's stack dump). Async-signal-safe.
void reportFault(int signal, siginfo_t *info, void *context) {
  size_t index = 0;
  while (kFaultSignals[index] != signal)
    ++index;
  const char *entry = invokingEntry.load();
  if (!entry) {
    const struct sigaction &previous = previousFaultActions[index];
    if (previous.sa_flags & SA_SIGINFO) {
      previous.sa_sigaction(signal, info, context);
      return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
      previous.sa_handler(signal);
      return;
    }
  } else {
    char kernel[512];
    const char *name = sigabbrev_np(signal);
    writeStderr("courier-run: ");
    if (runtime::kernelInFlight(kernel, sizeof kernel)) {
      writeStderr("kernel ");
      writeStderr(kernel);
    } else {
      writeStderr("entry '");
      writeStderr(entry);
      writeStderr("'");
    }
    writeStderr(" crashed with SIG");
    writeStderr(name ? name : "?");
    if (signal == SIGSEGV || signal == SIGBUS) {
      char address[2 + 16 + 1] = "0x";
      auto value = reinterpret_cast<uintptr_t>(info->si_addr);
      int digits = 1;
      while (digits < 16 && (value >> (4 * digits)))
        ++digits;
      for (int i = 0; i < digits; ++i)
        address[2 + i] = "0123456789abcdef"[(value >> (4 * (digits - 1 - i))) & 0xf];
      address[2 + digits] = 0;
      writeStderr(" (address ");
      writeStderr(address);
      writeStderr(")");
    }
    writeStderr(" in this process; run with --isolate to contain it\n");
  }
  // Die of the signal: a fault recurs when the handler returns, a sent signal is raised again.
  for (int fault : kFaultSignals)
    ::signal(fault, SIG_DFL);
  if (info->si_code <= 0 || signal == SIGABRT)
    ::raise(signal);
}

/// Puts reportFault in front of the handlers already installed (LLVM's, from InitLLVM).
void installFaultReport() {
  struct sigaction action = {};
  action.sa_sigaction = reportFault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < std::size(kFaultSignals); ++i)
    ::sigaction(kFaultSignals[i], &action, &previousFaultActions[i]);
}

/// One input as given: its JSON text, and how to name it in an error.
struct InputText {
  std::string json;
  std::string label; ///< "--arg 1", "--arg-file 'in.json' value 2 (line 3)"
};
std::vector<InputText> inputTexts;

/// Splits `text` into its top-level JSON values (arrays, objects, strings and scalars one
/// after another, separated by white space), each with the line it starts on. Syntax errors
/// inside a value are left for the JSON parser to name.
std::vector<std::pair<llvm::StringRef, unsigned>> splitJSONValues(llvm::StringRef text) {
  std::vector<std::pair<llvm::StringRef, unsigned>> values;
  size_t i = 0;
  unsigned line = 1;
  auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (true) {
    for (; i < text.size() && isSpace(text[i]); ++i)
      line += text[i] == '\n';
    if (i == text.size())
      return values;
    size_t start = i;
    unsigned startLine = line;
    int depth = 0;
    bool inString = false;
    bool closed = false; // the value's last character has been read
    while (i < text.size() && !closed) {
      char c = text[i];
      if (!inString && depth == 0 && isSpace(c))
        break; // the end of a scalar
      line += c == '\n';
      ++i;
      if (inString) {
        if (c == '\\' && i < text.size()) {
          ++i;
        } else if (c == '"') {
          inString = false;
          closed = depth == 0;
        }
      } else if (c == '"') {
        inString = true;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        closed = --depth <= 0;
      }
    }
    values.emplace_back(text.slice(start, i), startLine);
  }
}

/// Gathers --arg and --arg-file values in the order they stand on the command line.
llvm::Error gatherInputs(bool programFromStdin) {
  std::vector<std::pair<unsigned, InputText>> positioned;
  for (size_t i = 0; i < args.size(); ++i)
    positioned.push_back({args.getPosition(i), {args[i], ""}});
  for (size_t i = 0; i < argFiles.size(); ++i) {
    const std::string &path = argFiles[i];
    if (path == "-" && programFromStdin)
      return llvm::createStringError("the program is read from standard input: --arg-file - "
                                     "cannot read it too");
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
        llvm::MemoryBuffer::getFileOrSTDIN(path);
    if (!file)
      return llvm::createStringError("cannot read --arg-file '" + path +
                                     "': " + file.getError().message());
    unsigned value = 0;
    for (auto [text, line] : splitJSONValues((*file)->getBuffer()))
      positioned.push_back(
          {argFiles.getPosition(i),
           {text.str(),
            llvm::formatv("--arg-file '{0}' value {1} (line {2})", path, value++, line).str()}});
  }
  // By position, and the values of one file in their order.
  std::vector<size_t> order(positioned.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(positioned[a].first, a) < std::make_pair(positioned[b].first, b);
  });
  for (size_t i : order) {
    InputText &input = positioned[i].second;
    if (input.label.empty())
      input.label = "--arg " + std::to_string(inputTexts.size());
    inputTexts.push_back(std::move(input));
  }
  return llvm::Error::success();
}

/// Parses the inputs for `entry`, calls it, prints its results; returns the exit code. A call
/// that fails once `abandoned()` holds (a watch ended it for a newer version) is not reported.
int runOnce(const Module &module, const std::function<bool()> &abandoned = {}) {
  const EntrySignature *entry = module.findEntry(entryName);
  if (!entry) // invoke explains why: no such function, or one it cannot call.
    return fail(module.invoke(entryName, {}).takeError());
  if (inputTexts.size() != entry->inputs.size())
    return fail(llvm::formatv("entry '{0}' takes {1} inputs, {2} given", entryName,
                              entry->inputs.size(), inputTexts.size()));
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < inputTexts.size(); ++i) {
    const InputText &input = inputTexts[i];
    llvm::Expected<llvm::json::Value> json = parseJSON(input.json);
    if (!json)
      return fail(
          llvm::formatv("{0} is not JSON: {1}", input.label, llvm::toString(json.takeError())));
    llvm::Expected<Tensor> tensor = tensorFromJSON(*json, entry->inputs[i]);
    if (!tensor)
      return fail(llvm::formatv("{0}: {1}", input.label, llvm::toString(tensor.takeError())));
    inputs.push_back(std::move(*tensor));
  }
  auto start = std::chrono::steady_clock::now();
  invokingEntry.store(entryName.c_str());
  llvm::Expected<std::vector<Tensor>> outputs = module.invoke(entryName, inputs);
  invokingEntry.store(nullptr);
  double runMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!outputs) {
    if (abandoned && abandoned()) {
      llvm::consumeError(outputs.takeError());
      return 1;
    }
    return fail(outputs.takeError());
  }
  // Each number in the shortest text of its own element type, as courier-serve prints it.
  std::lock_guard<std::recursive_mutex> lock(outputMutex);
  for (const Tensor &output : *outputs) {
    writeTensorJSON(llvm::outs(), output);
    llvm::outs() << "\n";
  }
  llvm::outs().flush();
  if (showTime) {
    const PhaseTimes &t = module.compileTimes();
    llvm::errs() << llvm::formatv("parse {0:f2} ms, passes {1:f2} ms, cross-compile {2:f2} ms "
                                  "({3} compiled, {4} reused), link {5:f2} ms{6}, ship {7:f2} ms, "
                                  "run {8:f2} ms{9}\n",
                                  t.parse, t.passes, t.crossCompile, t.targetsCompiled,
                                  t.targetsReused, t.link, t.hostReused ? " (host reused)" : "",
                                  t.ship, runMs, t.cacheHit ? " (cache hit)" : "");
  }
  return 0;
}

/// The default deadline of a call in a watch: an edit that spins is ended after it.
constexpr unsigned kWatchInvokeTimeoutMs = 10000;

/// How long a stop waits for a compile in flight before courier-run leaves without it.
constexpr std::chrono::seconds kStopGrace{2};

/// SIGINT and SIGTERM during a watch: blocked in every thread (construct it before any
/// starts) and taken by one of its own, so a watch stops at any time, whatever its other
/// threads are doing. wait() returns on the first; if courier-run has not left kStopGrace
/// later (a compile or an in-process call that cannot be stopped), or on a second signal,
/// it leaves at once with status 0.
class StopSignals {
public:
  StopSignals() {
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::thread([this] {
      int received;
      sigwait(&signals, &received);
      {
        std::lock_guard<std::mutex> lock(mutex);
        stopped = true;
      }
      woken.notify_all();
      struct timespec grace = {static_cast<time_t>(kStopGrace.count()), 0};
      sigtimedwait(&signals, nullptr, &grace);
      llvm::outs().flush();
      std::_Exit(0);
    }).detach();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    woken.wait(lock, [&] { return stopped; });
  }

private:
  sigset_t signals;
  std::mutex mutex;
  std::condition_variable woken;
  bool stopped = false;
};

/// The versions of a watch: each compiled save is handed over and its entry run on a thread
/// of the runner's, one version at a time. A version handed over while an earlier one's call
/// still runs ends that call (Module::terminate), so an edit that spins is replaced by the
/// next save. A version is kept, and then serves, once its call returned with its worker
/// alive; one whose worker crashed or was ended at its deadline is dropped.
class WatchRunner {
public:
  explicit WatchRunner(std::string file) : file(std::move(file)) {
    thread = std::thread([this] { run(); });
  }
  ~WatchRunner() { stop(); }

  /// Hands over a save's module, compiled in `ms` (negative for the first version, which no
  /// line announces).
  void submit(std::shared_ptr<Module> module, double ms) {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping)
      return;
    if (module == latest) {
      say(llvm::formatv("courier-run: '{0}' is unchanged, version {1}", file, latestVersion));
      return;
    }
    uint64_t version = ++latestVersion;
    latest = module;
    if (ms >= 0)
      say(llvm::formatv("courier-run: reloaded '{0}' as version {1} in {2:f1} ms", file, version,
                        ms));
    if (running && !runningEnded) {
      runningEnded = true;
      say(llvm::formatv("courier-run: version {0} is still running its call: ended, version {1} "
                        "replaces it",
                        runningVersion, version));
      running->terminate();
    }
    pending = std::move(module);
    pendingVersion = version;
    woken.notify_all();
  }

  /// Reports a save that failed to compile in `ms`: its diagnostics first, where an editor
  /// finds them, then what became of the reload.
  void failed(const Failure &failure, double ms) {
    std::lock_guard<std::mutex> lock(mutex);
    std::lock_guard<std::recursive_mutex> output(outputMutex);
    llvm::errs() << failure.diagnostics;
    say(llvm::formatv("courier-run: reload of '{0}' failed after {1:f1} ms, {2}{3}{4}", file, ms,
                      servingText(), failure.line.empty() ? "" : ": ", failure.line));
  }

  /// Ends the call in flight and the runner's thread.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      if (running && !runningEnded) {
        runningEnded = true;
        running->terminate();
      }
      woken.notify_all();
    }
    if (thread.joinable())
      thread.join();
  }

private:
  void run() {
    while (true) {
      std::shared_ptr<Module> module;
      uint64_t version;
      {
        std::unique_lock<std::mutex> lock(mutex);
        woken.wait(lock, [&] { return stopping || pending; });
        if (stopping)
          return;
        module = running = std::move(pending);
        version = runningVersion = pendingVersion;
        runningEnded = false;
      }
      runOnce(*module, [&] {
        std::lock_guard<std::mutex> lock(mutex);
        return runningEnded;
      });
      WorkerState state = module->workerState();
      std::lock_guard<std::mutex> lock(mutex);
      running = nullptr;
      if (runningEnded)
        continue; // said when it was ended
      if (!state.lastDeath.empty()) {
        say(llvm::formatv("courier-run: version {0} {1} {2}; {3}", version,
                          state.crashes ? "crashed with" : "was", state.lastDeath, servingText()));
        continue;
      }
      serving = std::move(module);
      servingVersion = version;
    }
  }

  /// What serves while a newer version failed. Under the lock.
  std::string servingText() const {
    return serving ? llvm::formatv("version {0} keeps serving", servingVersion).str()
                   : std::string("no version serves yet");
  }

  const std::string file;
  std::mutex mutex;
  std::condition_variable woken;
  std::shared_ptr<Module> serving, latest, pending, running;
  uint64_t servingVersion = 0, latestVersion = 0, pendingVersion = 0, runningVersion = 0;
  bool runningEnded = false; ///< The call of `running` was ended for a newer version.
  bool stopping = false;
  std::thread thread;
};

/// The engine's options from the command line; `isolated` says whether modules run in a
/// worker process (--isolate, or --watch by default).
llvm::Expected<EngineOptions> engineOptions(bool &isolated) {
  auto error = [](const llvm::Twine &message) { return llvm::createStringError(message); };
  if (optLevel > 3)
    return error(llvm::formatv("-O{0}: the optimisation level is 0 to 3", optLevel.getValue()));
  if (jobs > EngineOptions::kMaxJobs)
    return error(
        llvm::formatv("--jobs {0}: at most {1} threads", jobs.getValue(), EngineOptions::kMaxJobs));
  EngineOptions options;
  options.optLevel = optLevel;
  options.jobs = jobs;
  options.kernelThreads = kernelThreads;
  options.cacheDir = cacheDir;
  options.diskCache = !noCache;
  if (cacheMaxMiB > (UINT64_MAX >> 20))
    return error("--cache-max-mib is too large");
  options.cacheMaxBytes = cacheMaxMiB << 20;
  options.executorOverride = executor;
  options.printIRAfterAll = printIR;
  options.executors.plugins.assign(plugins.begin(), plugins.end());
  options.extraPipeline = extraPipeline;
  options.executors.requestTimeout = std::chrono::milliseconds(timeoutMs);
  options.executors.tls = {tlsCa, tlsClientCert, tlsClientKey};
  options.executors.sharedMemory = sharedMemory;
  // Beyond 2^44 MiB the byte count would wrap round to a small limit.
  if (maxConstantMiB > (UINT64_MAX >> 20) || maxObjectMiB > (UINT64_MAX >> 20))
    return error(
        llvm::formatv("--max-constant-mib and --max-object-mib are at most {0}", UINT64_MAX >> 20));
  options.maxConstantBytes = maxConstantMiB << 20;
  options.maxObjectBytes = maxObjectMiB << 20;
  if (!tokenFile.empty()) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> token =
        llvm::MemoryBuffer::getFile(tokenFile);
    if (!token)
      return error("cannot read token file '" + tokenFile + "': " + token.getError().message());
    options.executors.bearerToken = (*token)->getBuffer().trim().str();
  }
  // A watched file is edited while it runs: an edit that crashes must not end the watch.
  isolated = isolate.getNumOccurrences() ? isolate.getValue() : watch.getValue();
  if (isolated) {
    options.isolation = Isolation::Process;
    // A watch keeps a deadline, so that an edit that spins does not hold it for good.
    options.invokeTimeout = std::chrono::milliseconds(invokeTimeoutMs.getNumOccurrences() || !watch
                                                          ? invokeTimeoutMs.getValue()
                                                          : kWatchInvokeTimeoutMs);
    options.compileTimeout = std::chrono::milliseconds(compileTimeoutMs);
    options.workerMemoryMiB = moduleMemoryMiB;
    // One compile at a time: none waits warm for a run without --watch. A watch keeps two: a
    // reload takes one while the other stays ready for the save after it, and the pool
    // starts the next only once the reload is done (a starting worker costs ~100 ms of CPU
    // that would be taken from the reload). An idle warm worker holds ~10 MB of its own.
    options.warmWorkers = watch ? 2 : 0;
    if (moduleMemoryMiB > (UINT64_MAX >> 21))
      return error(llvm::formatv("--module-memory-mib is at most {0}", UINT64_MAX >> 21));
  } else if (invokeTimeoutMs || compileTimeoutMs || moduleMemoryMiB) {
    return error("--invoke-timeout-ms, --compile-timeout-ms and --module-memory-mib need "
                 "isolation (--isolate or --watch)");
  }
  return options;
}

/// Runs the file's version in `reloadable`, then each version saved after it, until SIGINT or
/// SIGTERM. The file is hot-reloaded as courier-serve's --watch reloads a module: a
/// ReloadableModule that its FileWatcher reloads on each save.
int watchAndRun(ReloadableModule &reloadable, StopSignals &stopSignals) {
  // Each save is compiled on the watcher's thread and run on the runner's: a version whose
  // call spins is ended by the next save rather than keeping it waiting.
  WatchRunner runner(inputFile);
  runner.submit(reloadable.current(), /*ms=*/-1);
  llvm::Expected<std::unique_ptr<FileWatcher>> watcher =
      FileWatcher::create(inputFile, "", [&](const std::string &) {
        auto start = std::chrono::steady_clock::now();
        // Only this thread reloads: the current version is the one this save made.
        llvm::Expected<uint64_t> reloaded = reloadable.reloadFile(inputFile);
        double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (!reloaded)
          runner.failed(describe(reloaded.takeError()), ms);
        else
          runner.submit(reloadable.current(), ms);
      });
  if (!watcher)
    return fail(watcher.takeError());
  say("courier-run: watching '" + inputFile + "' (Ctrl-C to stop)");
  stopSignals.wait();
  // The call in flight is ended; a compile in flight is waited for, up to StopSignals'
  // grace period.
  runner.stop();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  tools::setVersionPrinter("courier-run");
  tools::addShortHelp();
  if (tools::printUsageIfNoArguments(
          argc, "USAGE: courier-run [options] <file.mlir, or - for standard input>\n\n"
                "Compiles an MLIR program and runs one of its entries, printing each result as "
                "JSON:\n"
                "  courier-run app.mlir --entry main --arg '[1, 2, 3, 4]'\n"
                "  courier-run app.mlir --arg '[1, 2, 3, 4]' --watch    (run again on every "
                "save)\n\n"
                "courier-run --help lists every option.\n"))
    return 1;
  if (llvm::Error error = tools::checkOptions(argc, argv))
    return fail(std::move(error));
  cl::ParseCommandLineOptions(argc, argv, "Compile an MLIR program and run one of its entries\n");

  bool fromStdin = inputFile == "-";
  if (fromStdin && watch)
    return fail("--watch needs a file to watch, not standard input");
  // Named "<stdin>" when read from standard input, as mlir-opt names it in diagnostics.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!file)
    return fail("cannot read '" + inputFile + "': " + file.getError().message());
  std::string programName = (*file)->getBufferIdentifier().str();
  if (llvm::Error error = gatherInputs(fromStdin))
    return fail(std::move(error));

  bool isolated = false;
  llvm::Expected<EngineOptions> options = engineOptions(isolated);
  if (!options)
    return fail(options.takeError());
  if (isolated)
    // The module's worker runs as this user: not dumpable, courier-run's memory cannot be
    // opened through /proc by it.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  else
    installFaultReport();
  // Before any thread starts, so that every thread leaves the two signals to the watch.
  std::optional<StopSignals> stopSignals;
  if (watch)
    stopSignals.emplace();
  Engine engine(*options);

  if (!watch) {
    llvm::Expected<std::shared_ptr<Module>> module =
        engine.compile((*file)->getBuffer(), programName);
    if (!module)
      return fail(module.takeError());
    return runOnce(**module);
  }
  ReloadableModule reloadable(engine, programName);
  if (llvm::Expected<uint64_t> first = reloadable.reload((*file)->getBuffer(), programName); !first)
    return fail(first.takeError());
  return watchAndRun(reloadable, *stopSignals);
}
