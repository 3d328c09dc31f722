// courier-run: compile an MLIR file with the engine, call one entry with JSON arguments and
// print its results as JSON, one object per result.
#include "jit/Engine.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <pthread.h>
#include <sys/prctl.h>

using namespace courier;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("courier-run options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<file.mlir>"), cl::Required,
                               cl::cat(category));
cl::opt<std::string> entryName("entry", cl::desc("Entry to call (default: main)"), cl::init("main"),
                               cl::cat(category));
cl::list<std::string> args("arg",
                           cl::desc("An input as JSON: a number, nested arrays, or "
                                    "{\"dtype\",\"shape\",\"data\"}; once per input, in order"),
                           cl::cat(category));
cl::opt<std::string> executor("executor",
                              cl::desc("Send every target to this executor (\"local\" or "
                                       "host:port) instead of the IR's addresses"),
                              cl::cat(category));
cl::opt<unsigned> optLevel("O", cl::Prefix, cl::desc("Optimisation level, -O0 to -O3"), cl::init(2),
                           cl::cat(category));
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
                             "version serves until the new one is ready) and call the entry "
                             "again"),
                    cl::cat(category));
cl::opt<bool> isolate("isolate",
                      cl::desc("Compile and run the module in a worker process of its own, "
                               "sandboxed: a crash or a timeout is reported instead of ending "
                               "courier-run (the default with --watch; --isolate=false turns "
                               "it off)"),
                      cl::cat(category));
cl::opt<unsigned> invokeTimeoutMs("invoke-timeout-ms",
                                  cl::desc("With isolation, end a call that runs longer (0: "
                                           "no limit)"),
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

int fail(const llvm::Twine &message) {
  llvm::errs() << "courier-run: error: " << message << "\n";
  return 1;
}

/// One line, whatever the error: the first error diagnostic stands for a failed compile.
std::string oneLine(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &compile) {
        text = compile.summary;
        size_t errors = 0;
        for (const Diagnostic &d : compile.diagnostics)
          if (d.severity == "error" && errors++ == 0)
            text = d.str();
        if (errors > 1)
          text += llvm::formatv(" (and {0} more errors)", errors - 1).str();
      },
      [&](const llvm::ErrorInfoBase &other) { text = other.message(); });
  for (char &c : text)
    if (c == '\n')
      c = ' ';
  return text;
}

/// Parses the --arg values for `entry`, calls it, prints its results; returns the exit code.
int runOnce(const Module &module) {
  const EntrySignature *entry = module.findEntry(entryName);
  if (!entry) // invoke explains why: no such function, or one it cannot call.
    return fail(oneLine(module.invoke(entryName, {}).takeError()));
  if (args.size() != entry->inputs.size())
    return fail(llvm::formatv("entry '{0}' takes {1} inputs, {2} --arg given", entryName,
                              entry->inputs.size(), args.size()));
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::Expected<llvm::json::Value> json = parseJSON(args[i]);
    if (!json)
      return fail(llvm::formatv("--arg {0} is not JSON: {1}", i, llvm::toString(json.takeError())));
    llvm::Expected<Tensor> tensor = tensorFromJSON(*json, entry->inputs[i]);
    if (!tensor)
      return fail(llvm::formatv("--arg {0}: {1}", i, llvm::toString(tensor.takeError())));
    inputs.push_back(std::move(*tensor));
  }
  auto start = std::chrono::steady_clock::now();
  llvm::Expected<std::vector<Tensor>> outputs = module.invoke(entryName, inputs);
  double runMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!outputs)
    return fail(oneLine(outputs.takeError()));
  for (const Tensor &output : *outputs)
    llvm::outs() << tensorToJSON(output) << "\n";
  llvm::outs().flush();
  if (showTime) {
    const PhaseTimes &t = module.compileTimes();
    llvm::errs() << llvm::formatv("parse {0:f2} ms, passes {1:f2} ms, cross-compile {2:f2} ms, "
                                  "link {3:f2} ms, ship {4:f2} ms, run {5:f2} ms{6}\n",
                                  t.parse, t.passes, t.crossCompile, t.link, t.ship, runMs,
                                  t.cacheHit ? " (cache hit)" : "");
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, "Compile an MLIR program and run one of its entries\n");

  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file = llvm::MemoryBuffer::getFile(inputFile);
  if (!file)
    return fail("cannot read '" + inputFile + "': " + file.getError().message());

  if (optLevel > 3)
    return fail(llvm::formatv("-O{0}: the optimisation level is 0 to 3", optLevel.getValue()));
  EngineOptions options;
  options.optLevel = optLevel;
  options.cacheDir = cacheDir;
  options.diskCache = !noCache;
  if (cacheMaxMiB > (UINT64_MAX >> 20))
    return fail("--cache-max-mib is too large");
  options.cacheMaxBytes = cacheMaxMiB << 20;
  options.executorOverride = executor;
  options.printIRAfterAll = printIR;
  options.plugins.assign(plugins.begin(), plugins.end());
  options.extraPipeline = extraPipeline;
  options.requestTimeout = std::chrono::milliseconds(timeoutMs);
  // Beyond 2^44 MiB the byte count would wrap round to a small limit.
  if (maxConstantMiB > (UINT64_MAX >> 20) || maxObjectMiB > (UINT64_MAX >> 20))
    return fail(
        llvm::formatv("--max-constant-mib and --max-object-mib are at most {0}", UINT64_MAX >> 20));
  options.maxConstantBytes = maxConstantMiB << 20;
  options.maxObjectBytes = maxObjectMiB << 20;
  if (!tokenFile.empty()) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> token =
        llvm::MemoryBuffer::getFile(tokenFile);
    if (!token)
      return fail("cannot read token file '" + tokenFile + "': " + token.getError().message());
    options.authToken = (*token)->getBuffer().trim().str();
  }
  // A watched file is edited while it runs: an edit that crashes must not end the watch.
  bool isolated = isolate.getNumOccurrences() ? isolate.getValue() : watch.getValue();
  if (isolated) {
    // The module's worker runs as this user: not dumpable, courier-run's memory cannot be
    // opened through /proc by it.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    options.isolation = Isolation::Process;
    options.invokeTimeout = std::chrono::milliseconds(invokeTimeoutMs);
    options.compileTimeout = std::chrono::milliseconds(compileTimeoutMs);
    options.workerMemoryMiB = moduleMemoryMiB;
    // One compile at a time, and rarely: no worker need wait warm beside it.
    options.warmWorkers = watch ? 1 : 0;
    if (moduleMemoryMiB > (UINT64_MAX >> 21))
      return fail(llvm::formatv("--module-memory-mib is at most {0}", UINT64_MAX >> 21));
  } else if (invokeTimeoutMs || compileTimeoutMs || moduleMemoryMiB) {
    return fail("--invoke-timeout-ms, --compile-timeout-ms and --module-memory-mib need "
                "isolation (--isolate or --watch)");
  }
  Engine engine(options);

  llvm::Expected<std::shared_ptr<Module>> first = engine.compile((*file)->getBuffer(), inputFile);
  if (!first)
    return fail(oneLine(first.takeError()));
  std::shared_ptr<Module> current = std::move(*first);
  uint64_t version = 1;
  // The version now serving: the last one whose entry ran without killing its worker.
  uint64_t serving = 1;
  if (int status = runOnce(*current))
    if (!watch)
      return status;
  if (!watch)
    return 0;

  // Each save compiles the file and runs the entry on the new version. A version that fails
  // to compile, or whose worker dies running the entry, is reported and dropped: the previous
  // version keeps serving.
  std::mutex outputMutex;
  llvm::Expected<std::unique_ptr<FileWatcher>> watcher =
      FileWatcher::create(inputFile, "", [&](const std::string &) {
        auto start = std::chrono::steady_clock::now();
        llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text =
            llvm::MemoryBuffer::getFile(inputFile);
        llvm::Expected<std::shared_ptr<Module>> next =
            text ? engine.compile((*text)->getBuffer(), inputFile)
                 : llvm::Expected<std::shared_ptr<Module>>(llvm::errorCodeToError(text.getError()));
        double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        std::lock_guard<std::mutex> lock(outputMutex);
        if (!next) {
          llvm::errs() << llvm::formatv("courier-run: reload of '{0}' failed after {1:f1} ms, "
                                        "version {2} keeps serving: {3}\n",
                                        inputFile, ms, serving, oneLine(next.takeError()));
          return;
        }
        if (*next == current) {
          llvm::errs() << llvm::formatv("courier-run: '{0}' is unchanged, version {1}\n", inputFile,
                                        serving);
          return;
        }
        uint64_t candidate = ++version;
        llvm::errs() << llvm::formatv("courier-run: reloaded '{0}' as version {1} in {2:f1} ms\n",
                                      inputFile, candidate, ms);
        runOnce(**next);
        WorkerState state = (*next)->workerState();
        // A version whose worker died running the entry, or was ended at its deadline, is
        // not kept.
        if (!state.lastDeath.empty()) {
          llvm::errs() << llvm::formatv("courier-run: version {0} {1} {2}; version {3} keeps "
                                        "serving\n",
                                        candidate, state.crashes ? "crashed with" : "was",
                                        state.lastDeath, serving);
          return;
        }
        current = std::move(*next);
        serving = candidate;
      });
  if (!watcher)
    return fail(llvm::toString(watcher.takeError()));
  llvm::errs() << "courier-run: watching '" << inputFile << "' (Ctrl-C to stop)\n";
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int received;
  sigwait(&signals, &received);
  return 0;
}
