// The modules courier-serve holds: named, hot-reloadable engine modules, compiled on worker
// threads under a deadline and within the server's limits. No HTTP type appears here; the
// REST layer (RestService.cpp) only translates requests into these calls.
#ifndef COURIER_SERVE_MODULESTORE_H
#define COURIER_SERVE_MODULESTORE_H

#include "jit/Engine.h"
#include "serve/ServeError.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace courier::serve {

using transport::ErrorCodeInfo;
/// Every error code courier-serve sends, with its HTTP status: the rows of the one code table
/// (transport/ErrorCode.h) marked kSentByServe. docs/rest.md lists the same pairs;
/// tests/serve checks that the two agree.
inline constexpr auto kErrorCodes = transport::codesSentBy<transport::kSentByServe>();

/// True for a module name: 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
bool isModuleName(llvm::StringRef name);

/// What every module's engine starts from in a store: EngineOptions' defaults but for those a
/// server wants, each module's worker process contained, with a deadline and a memory bound
/// (isolation Process, compile and invoke timeouts of 60 s, workers' memory 4 GiB).
EngineOptions storeEngineDefaults();

struct StoreOptions {
  /// Every module's engine's options (the cache, the executors' token and TLS, isolation,
  /// timeouts, workers, limits), over which a module's own choices (ModuleOptions) are set:
  /// `optLevel`, and `executorOverride` unless the module names no executor, when the
  /// server's (--executor, here) stays.
  EngineOptions engine = storeEngineDefaults();
  size_t maxModules = 64; ///< Loaded plus being created.
};

/// What a client may choose per module. Each distinct set is compiled by its own Engine.
struct ModuleOptions {
  unsigned optLevel = 2;
  std::string executor; ///< Empty: the server's --executor (or the IR's addresses).

  bool operator==(const ModuleOptions &other) const {
    return optLevel == other.optLevel && executor == other.executor;
  }
  bool operator!=(const ModuleOptions &other) const { return !(*this == other); }
};

/// A module's current version, kept loaded for as long as the caller holds it.
struct Pinned {
  std::string name;
  std::shared_ptr<Module> module;
  uint64_t version = 0;
  /// When the request pinned it: a call refused before the engine took this long.
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

/// A snapshot of one module, for listing.
struct ModuleInfo {
  std::string name;
  uint64_t version = 0;
  std::vector<EntrySignature> entries;
  ModuleOptions options;
  std::string origin;   ///< "api" or the watched file's path.
  std::string sha256;   ///< Of the source now serving.
  double compileMs = 0; ///< Wall time of the compile that produced the current version.
  PhaseTimes phases;
  std::chrono::system_clock::time_point loadedAt;
  uint64_t calls = 0, failedCalls = 0, reloads = 0, failedReloads = 0;
  /// The current version's worker (isolated modules).
  WorkerState worker;
  struct LastError {
    transport::ErrorCode code;
    std::string message;
    std::chrono::system_clock::time_point at;
  };
  std::optional<LastError> lastError;
};

/// The calls of one entry of a module since the module was created (KServe v2 statistics).
/// Durations in nanoseconds: `inferNanos` in the engine, `inputNanos` reading the request's
/// tensors and `outputNanos` writing the reply's, each over the successful calls.
struct EntryCallStats {
  uint64_t successes = 0, failures = 0;
  /// inferNanos: in the engine, once a worker took the call; queueNanos: waiting for one.
  uint64_t inferNanos = 0, inputNanos = 0, outputNanos = 0, queueNanos = 0;
  uint64_t failureNanos = 0; ///< In the engine, over the failed calls it was given.
  /// When the last call ended; the epoch before the first.
  std::chrono::system_clock::time_point last;
};

/// Outcome of a create or replace.
struct LoadResult {
  ModuleInfo info;
  bool created = false;
};

/// Counters the metrics endpoint reports.
struct StoreCounters {
  std::atomic<uint64_t> compiles{0}, compileFailures{0}, compileTimeouts{0};
  std::atomic<uint64_t> discardedCompiles{0}; ///< Finished after their caller gave up.
  std::atomic<uint64_t> reloadsOk{0}, reloadsFailed{0};
  std::atomic<uint64_t> compileNanos{0};
  std::atomic<uint64_t> invokes{0}, invokeFailures{0};
};

class ModuleStore {
public:
  explicit ModuleStore(StoreOptions options);
  /// Waits for compiles still running in the background.
  ~ModuleStore();
  ModuleStore(const ModuleStore &) = delete;
  ModuleStore &operator=(const ModuleStore &) = delete;

  enum class Mode {
    Create,  ///< module_exists if the name is taken.
    Replace, ///< unknown_module if it is not.
    Upsert,  ///< Either.
  };
  /// Compiles `text` as module `name` and makes it the current version. A replacement keeps
  /// the old version serving until the new one is linked, and keeps it if compiling fails.
  /// `options` of a replacement default to the module's current ones. With `deadline`, a
  /// compile still running at the compile timeout is abandoned (compile_timeout): it finishes
  /// in the background and its result is discarded. Diagnostics name the text `sourceName`
  /// when given, else the watched file `origin` names, else the module.
  llvm::Expected<LoadResult> load(llvm::StringRef name, llvm::StringRef text,
                                  std::optional<ModuleOptions> options, Mode mode,
                                  llvm::StringRef origin, bool deadline = true,
                                  llvm::StringRef sourceName = {});
  /// Removes `name`. In-process, calls already running finish on the version they hold;
  /// isolated, its worker is ended and they fail with unknown_module.
  llvm::Error remove(llvm::StringRef name);
  /// Ends the workers of every version of every isolated module, and with them the calls
  /// still running in them (they fail with unknown_module); the modules stay listed. For a
  /// server that stops with calls in flight past its drain. Does nothing in-process.
  void terminateAll();

  llvm::Expected<Pinned> pin(llvm::StringRef name) const;
  /// Whether the store holds module `name` now.
  bool holds(llvm::StringRef name) const { return find(name) != nullptr; }
  /// The signature of `entry` in the pinned version, or unknown_entry naming the ones it has.
  llvm::Expected<const EntrySignature *> entry(const Pinned &pinned, llvm::StringRef entry) const;
  /// Invokes `entry` of the pinned version. Failures keep the engine's message and are
  /// classified: invalid_input (dtype, rank, shape, count), executor_unavailable (the
  /// executor could not be reached) or executor_failed (the executor or kernel failed).
  llvm::Expected<std::vector<Tensor>> invoke(const Pinned &pinned, llvm::StringRef entry,
                                             llvm::ArrayRef<Tensor> inputs,
                                             const InvokeOptions &callOptions = {});
  /// Records a failure that happened before the engine was called (bad inputs), against
  /// `entry` when the request named one the module has.
  void recordCallFailure(const Pinned &pinned, ErrorCode code, llvm::StringRef message,
                         llvm::StringRef entry = {});
  /// Adds the time a successful call of `entry` took reading its inputs and writing its
  /// outputs to its statistics.
  void recordCallPhases(const Pinned &pinned, llvm::StringRef entry, std::chrono::nanoseconds input,
                        std::chrono::nanoseconds output);
  /// The calls of each entry of module `name` that has been called, by entry name.
  llvm::Expected<std::map<std::string, EntryCallStats>> callStats(llvm::StringRef name) const;
  /// Called with the module's name and the call's seconds wherever a call is counted in its
  /// `calls` (invoke, recordCallFailure), so that a metric of calls counts what `calls`
  /// does. Set once, before any call.
  void observeCalls(std::function<void(llvm::StringRef module, double seconds)> observer) {
    callObserver = std::move(observer);
  }

  std::vector<ModuleInfo> list() const;
  llvm::Expected<ModuleInfo> info(llvm::StringRef name) const;
  size_t size() const;
  const StoreCounters &counters() const { return stats; }
  const StoreOptions &options() const { return config; }

  /// Waits until no compile runs in the background; false if `timeout` passed first.
  bool waitForCompiles(std::chrono::milliseconds timeout);

  struct Record;

private:
  struct CompileJob;
  Engine &engineFor(const ModuleOptions &options);
  /// A compile in a worker, which ends with the worker at its deadline (when `deadline`).
  llvm::Expected<std::shared_ptr<Module>> compileInWorker(Engine &engine, llvm::StringRef name,
                                                          llvm::StringRef text,
                                                          const std::string &source, bool deadline,
                                                          double &wallMs);
  /// Compiles `text` as module `name`, its diagnostics naming `origin` when that is a file.
  llvm::Expected<std::shared_ptr<Module>> compileWithDeadline(Engine &engine, llvm::StringRef name,
                                                              llvm::StringRef text,
                                                              llvm::StringRef origin,
                                                              llvm::StringRef sourceName,
                                                              bool deadline, double &wallMs);
  llvm::Expected<LoadResult> create(llvm::StringRef name, llvm::StringRef text,
                                    const ModuleOptions &options, llvm::StringRef origin,
                                    llvm::StringRef sourceName, bool deadline);
  llvm::Expected<LoadResult> replace(std::shared_ptr<Record> record, llvm::StringRef text,
                                     std::optional<ModuleOptions> options, llvm::StringRef origin,
                                     llvm::StringRef sourceName, bool deadline);
  std::shared_ptr<Record> find(llvm::StringRef name) const;
  /// Counts a failed call that took `seconds`: recordCallFailure's work.
  void countFailure(const Pinned &pinned, ErrorCode code, llvm::StringRef message,
                    llvm::StringRef entry, double seconds);

  StoreOptions config;
  StoreCounters stats;
  std::function<void(llvm::StringRef, double)> callObserver;

  std::mutex enginesMutex;
  std::map<std::pair<unsigned, std::string>, std::unique_ptr<Engine>> engines;

  mutable std::mutex modulesMutex;
  std::map<std::string, std::shared_ptr<Record>> modules;
  std::set<std::string> creating;      ///< Names reserved by a create in progress.
  std::condition_variable createEnded; ///< A name left `creating`.

  std::mutex workersMutex;
  std::condition_variable workersDone;
  size_t workers = 0; ///< Compile threads still running.
};

/// One line for logs: the summary of a compile error and its first error diagnostic.
std::string describeFailure(const ServeError &error);

} // namespace courier::serve

#endif // COURIER_SERVE_MODULESTORE_H
