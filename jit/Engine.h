// The engine: MLIR text in, a compiled and linked module out, and typed invocation of its
// entries. Dispatch to executors happens underneath, through the runtime.
#ifndef COURIER_JIT_ENGINE_H
#define COURIER_JIT_ENGINE_H

// "Tensor.h", not "jit/Tensor.h": the two headers sit side by side both here and where they
// are installed (include/courier/), and each of the transport headers below is installed
// under include/courier/ at its path here, so every include resolves from the including
// file's directory when the tree is installed, and from the repository root in it.
#include "Tensor.h"
#include "transport/BackendOptions.h"
#include "transport/ErrorCode.h"
#include "transport/Isolation.h"
#include "transport/SharedMemoryMode.h"
#include "transport/TlsOptions.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier {

/// Two input dimensions an entry's code needs equal (a matmul's K in A and B, the sizes of
/// an elementwise op's operands): invoke refuses inputs that break it (invalid_input) before
/// any code runs.
struct DimEquality {
  unsigned input, dim; ///< dimension `dim` of input `input`
  unsigned other, otherDim;
  std::string op;    ///< the op that needs it, e.g. "linalg.matmul"
  std::string where; ///< where that op was written (file:line:col), or empty
};

/// A public function of a compiled module.
struct EntrySignature {
  std::string name;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  /// What an argument or result attribute `courier.name = "..."` calls each input and output,
  /// one per input (output), empty where the function names none. Servers may show them
  /// (courier-serve's KServe v2 routes name tensors by them); invoke goes by position.
  std::vector<std::string> inputNames, outputNames;
  /// What its code needs of its inputs' dynamic dimensions (jit/ShapeChecks.h).
  std::vector<DimEquality> dimEqualities;
};

/// One diagnostic from parsing or a pass.
struct Diagnostic {
  std::string file;
  unsigned line = 0;
  unsigned column = 0;
  std::string severity; ///< "error", "warning", "note" or "remark".
  std::string message;
  /// The line of the compiled text the location points into, without its line break; absent
  /// when the location is elsewhere (another file, none) or the line is longer than
  /// kMaxSourceLineBytes.
  std::optional<std::string> sourceLine;

  /// Longer source lines are not kept: a caret under column 50 000 helps nobody.
  static constexpr size_t kMaxSourceLineBytes = 4096;

  /// "file:line:col: severity: message".
  std::string str() const;
  /// As mlir-opt prints it: "file:line:col: severity: message" at the start of a line, then
  /// the source line and a caret under the column; "<unknown>:0: severity: message" without
  /// a location. Ends with a newline.
  std::string render() const;
};

/// Every diagnostic rendered in order, as mlir-opt prints them.
std::string renderDiagnostics(llvm::ArrayRef<Diagnostic> diagnostics);

/// A compilation that failed: carries every diagnostic with its location. Its message is the
/// diagnostics rendered as mlir-opt prints them (the summary when there are none).
class CompileError : public llvm::ErrorInfo<CompileError> {
public:
  static char ID;
  CompileError(std::string summary, std::vector<Diagnostic> diagnostics)
      : summary(std::move(summary)), diagnostics(std::move(diagnostics)) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

  std::string summary;
  std::vector<Diagnostic> diagnostics;
};

using transport::ErrorCode;

/// A failure to load or invoke a compiled module: a transport::CodedError (one code table
/// for every layer, transport/ErrorCode.h) whose `kind` is one of
/// - ErrorCode::InvalidInput: the caller's inputs do not fit the entry's signature;
/// - ErrorCode::UnknownEntry: no such entry, or one invoke cannot call;
/// - ErrorCode::ExecutorFailed: an executor reported a failure (or refused a request);
/// - ErrorCode::ExecutorUnavailable: an executor could not be reached (or TLS with it
///   failed: the message carries `tls_failed`), died with a launch in hand that could not
///   be run again (`executor_lost`), or could not start a worker,
/// and, for isolated modules (Isolation::Process),
/// - ErrorCode::KernelCrashed: the module's worker died while running the call;
/// - ErrorCode::CompileCrashed: the worker died while compiling or linking the module;
/// - ErrorCode::SetupCrashed: the worker died while running the module's setup();
/// - ErrorCode::DeadlineExceeded: the compile or call ran past its timeout;
/// - ErrorCode::WorkerUnavailable: no worker process could be started;
/// - ErrorCode::UnknownModule: the module was terminated,
/// so that callers (a REST front end, say) can answer each kind differently. Its text is the
/// message alone: an executor's own code is already in it ("... [kernel_crashed]").
class EngineError : public llvm::ErrorInfo<EngineError, transport::CodedError> {
public:
  static char ID;
  using ErrorInfo::ErrorInfo;
  /// What `kind` holds: an ErrorCode.
  using Kind = ErrorCode;
  void log(llvm::raw_ostream &os) const override;
};

/// The name of a kind of failure, as the wire and the REST API spell it: "invalid_input",
/// "kernel_crashed", ... (transport/ErrorCode.h lists them all).
using transport::toString;

/// Time spent in each phase of the last compile and invoke, in milliseconds, and what the
/// compile took from the caches.
struct PhaseTimes {
  double parse = 0, passes = 0, crossCompile = 0, link = 0, ship = 0, run = 0;
  bool cacheHit = false; ///< Served whole from the memory or disk cache: no pass ran.
  /// Target modules this compile generated code for, and those whose objects it found in
  /// the memory or disk cache (by the module's fingerprint) instead.
  unsigned targetsCompiled = 0, targetsReused = 0;
  bool hostReused = false; ///< The host code's object came from a cache (by its fingerprint).
};

/// Where a module's code is parsed, compiled and run. InProcess: in the calling process, the
/// default for embedding; a module that crashes ends the process, and a compile or call
/// cannot be stopped. Process: in a worker process per module (courier-module-worker),
/// sandboxed and limited: a crash fails only that module's request, deadlines end the
/// worker, and Module::invoke is unchanged for the caller. rawEntry() is unavailable.
/// Workers run as the calling user: a program that must keep its memory from them makes
/// itself not dumpable (prctl(PR_SET_DUMPABLE, 0)), as courier-serve does.
using Isolation = transport::Isolation;

struct EngineOptions {
  unsigned optLevel = 2; ///< 0-3, for host code and target objects.
  /// Threads a kernel's parallel loops use when it runs in this process (the process has
  /// one setting, the last engine's that sets it wins); 0: left as it is, by default the
  /// CPUs the process may run on (sched_getaffinity). With Isolation::Process, each module
  /// worker's team (0: the CPUs the worker may run on). Executors have their own.
  unsigned kernelThreads = 0;
  /// Threads generating code for target modules at once, the compiling thread among them;
  /// 0: one per core; at most kMaxJobs. Compiles of the engines of a process that ask for as
  /// many share one set of threads. Objects are the same bytes whatever it is.
  unsigned jobs = 0;
  static constexpr unsigned kMaxJobs = 256;
  /// Holds target objects and the disk cache of compiled host code. Default:
  /// $XDG_CACHE_HOME/courier or ~/.cache/courier; with neither variable set, no disk cache.
  /// Created 0700; a directory another user owns, or group or others can write, is refused
  /// (compile fails saying why).
  std::string cacheDir;
  /// False: the cache directory is neither read nor written; target objects live in memory.
  bool diskCache = true;
  /// Bound on the disk cache's total size; least recently used files go first. 0: none.
  uint64_t cacheMaxBytes = uint64_t(1) << 30;
  /// The most bytes one constant may hold, counted as it will be built (every element of a
  /// `dense<1.0> : tensor<100000000xf32>` splat: 400 MB); 0 for no limit. A module over it is
  /// a CompileError at the constant before any pass runs. Compiling a constant costs several
  /// times its size in memory and about 35 ms per MiB; the default keeps one under ~2 s and
  /// ~300 MB, above what programs embed in their text (large data is an input, not a literal).
  uint64_t maxConstantBytes = uint64_t(64) << 20;
  /// The most bytes a compiled object may take, the host's and each target module's (which is
  /// written to the cache dir and shipped whole to its executor); 0 for no limit. A module
  /// over it is a CompileError at the module that produced the object. The default leaves room
  /// for four constants at maxConstantBytes.
  uint64_t maxObjectBytes = uint64_t(256) << 20;
  /// When non-empty, every target goes to this executor ("local" or "host:port") instead
  /// of the address in the IR.
  std::string executorOverride;
  /// How programs reach their executors: connect and request timeouts, the bearer token
  /// for HTTP executors, the CA and client certificate for "https://" ones (empty settings
  /// come from the environment, transport/TlsOptions.h), whether launches on an executor of
  /// this host take its shared-memory channel instead of HTTP (docs/protocol.md, "Same-host
  /// channel": by default on a unix socket or a loopback address; On asks at any address and
  /// takes the channel where the executor shares this host), and the shared libraries the
  /// in-process executor loads for dispatched library calls (`catalyst.runtime_call` on
  /// "local").
  transport::BackendOptions executors;
  /// A textual pass pipeline (mlir-opt syntax, e.g. "canonicalize,cse") run on the module
  /// before the dispatch pipeline.
  std::string extraPipeline;
  /// Receives each diagnostic as it is emitted (as well as the error that ends a failed
  /// compile).
  std::function<void(const Diagnostic &)> diagnosticSink;
  /// Prints the IR after every pass to stderr.
  bool printIRAfterAll = false;

  Isolation isolation = Isolation::InProcess;
  /// With Isolation::Process, the following apply.
  /// The worker program. Empty: $COURIER_MODULE_WORKER, else courier-module-worker beside
  /// this process's executable, else the installed one.
  std::string workerProgram;
  /// Address space a module's worker may use beyond what it maps at start; 0: no limit.
  uint64_t workerMemoryMiB = 0;
  /// No-new-privs and a seccomp filter (executor/Sandbox.h, enterModuleSandbox).
  bool workerSandbox = true;
  /// Workers started ahead of need, so a compile or reload does not wait for one to start.
  unsigned warmWorkers = 1;
  /// Workers each module version runs in, each with the module compiled and set up in it
  /// (setup() runs in every one), a call going to whichever is idle: several run a module's
  /// calls at once, as a server with many clients of one module wants. 1 to
  /// kMaxWorkersPerModule; a compile starts them all.
  unsigned workersPerModule = 1;
  static constexpr unsigned kMaxWorkersPerModule = 64;
  /// A compile (with setup()) still running after this ends with its worker
  /// (deadline_exceeded); 0: no limit. CompileOptions::timeout overrides it.
  std::chrono::milliseconds compileTimeout{0};
  /// An invoke still running after this ends with its worker (deadline_exceeded); the next
  /// invoke starts a fresh one. 0: no limit. InvokeOptions::timeout overrides it.
  std::chrono::milliseconds invokeTimeout{0};
};

/// Per-call settings of Engine::compile.
struct CompileOptions {
  /// Replaces EngineOptions::compileTimeout for this compile; zero means no limit.
  std::optional<std::chrono::milliseconds> timeout;
  /// What diagnostics call the text (the path of the file it was read from); empty: the
  /// module's name. Engine::compileFile and ReloadableModule::reloadFile set it.
  std::string sourceName;
};

/// Per-call settings of Module::invoke.
struct InvokeOptions {
  /// Replaces EngineOptions::invokeTimeout for this call; zero means no limit. Enforced
  /// with Isolation::Process only: in-process code cannot be stopped.
  std::optional<std::chrono::milliseconds> timeout;
  /// Buffers of the caller's that results are written into, in place: none, or one per
  /// result of the entry, where one without data leaves its result to come back as usual.
  /// Each must have its result's dtype and shape (InvalidInput naming the output otherwise,
  /// before the call where the signature tells, and with nothing written). A result written
  /// to an output comes back as a Tensor of its dtype and shape that holds no bytes.
  std::vector<OutputRef> outputs;
  /// Where, when set, the call writes how long it waited for one of its module version's
  /// workers to be free before it ran (Isolation::Process, whose workers run a call at a
  /// time); zero in process, where calls do not wait for one another.
  std::chrono::nanoseconds *queued = nullptr;
};

/// The worker of an isolated module (with EngineOptions::workersPerModule above 1, its
/// workers: `pid` is the first's, the counts are all of theirs, `lastDeath` the latest).
struct WorkerState {
  bool isolated = false; ///< False for in-process modules; the rest is then empty.
  int pid = 0;           ///< 0 while no worker runs (it died; the next invoke starts one).
  uint64_t restarts = 0; ///< Workers started after the first.
  uint64_t crashes = 0;  ///< Workers that died while running a call.
  /// How the last worker that ended early died: "SIGSEGV (address 0x0) while invoking 'main'".
  std::string lastDeath;
};

class Engine;

/// What calls a module's entries by name: a Module, and a ReloadableModule's current version.
class Invocable {
public:
  virtual ~Invocable();

  /// Calls `entry` after checking each input's dtype, rank and shape against its signature.
  /// Failures come back as EngineError, executor failures with the executor's message.
  /// Tensor arguments are read-only to the compiled code; an entry written at the memref
  /// level receives the caller's bytes directly and must not write its arguments.
  virtual llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry,
                                                     llvm::ArrayRef<Tensor> inputs,
                                                     const InvokeOptions &options = {}) const = 0;
  /// The same with inputs the caller owns, read in place (see TensorRef): a buffer of the
  /// caller's becomes an input without a copy.
  virtual llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry,
                                                     llvm::ArrayRef<TensorRef> inputs,
                                                     const InvokeOptions &options = {}) const = 0;
  /// invoke(entry, {}) and invoke(entry, {a, b}) with Tensors.
  llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry,
                                             std::initializer_list<Tensor> inputs,
                                             const InvokeOptions &options = {}) const {
    return invoke(entry, llvm::ArrayRef<Tensor>(inputs), options);
  }
};

/// A compiled, linked module. `setup()` ran when it was loaded; `teardown()` runs, and its
/// sessions close, when the last reference goes. Shared: Engine::compile hands out a
/// shared_ptr, and the module (its code, its sessions) lives while any holder does, the
/// engine's cache holding it only weakly; it may outlive its Engine. Thread-safe: any number
/// of threads may invoke at once. Results are Tensors the caller owns; nothing invoke returns
/// points into the module.
class Module final : public Invocable {
public:
  ~Module() override;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  const std::string &name() const;
  const std::vector<EntrySignature> &entries() const;
  const EntrySignature *findEntry(llvm::StringRef entry) const;

  /// With Isolation::Process the call runs in one of the module's workers, each running one call at
  /// a time. A worker that dies fails the call with ErrorCode::KernelCrashed naming the signal; a
  /// timeout ends the worker with ErrorCode::DeadlineExceeded. The next call starts a fresh
  /// worker (compiled again, from the disk cache when it can, and set up again).
  llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry, llvm::ArrayRef<Tensor> inputs,
                                             const InvokeOptions &options = {}) const override;
  llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry,
                                             llvm::ArrayRef<TensorRef> inputs,
                                             const InvokeOptions &options = {}) const override;
  using Invocable::invoke;

  /// The `_mlir_ciface_<entry>` function, for callers that pass memref descriptors
  /// themselves (zero copy). Null if there is no such entry, or the module is isolated.
  void *rawEntry(llvm::StringRef entry) const;

  /// The worker of an isolated module.
  WorkerState workerState() const;

  /// Ends an isolated module's worker now: calls still running fail with
  /// ErrorCode::UnknownModule, and later ones too. For an owner that removes the module
  /// while callers may still hold it. Does nothing in-process.
  void terminate() const;

  /// Compile-phase times of this module.
  const PhaseTimes &compileTimes() const;

  struct Impl;

private:
  friend class Engine;
  friend struct ModuleInternals;
  explicit Module(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// Compiles MLIR text into modules. Thread-safe: any number of threads may compile at once.
/// The engine owns its options and caches; the modules it returns are shared with the
/// caller (see Module).
class Engine {
public:
  explicit Engine(EngineOptions options = {});
  ~Engine();

  /// Parses, lowers, cross-compiles and links `text`; `name` names the buffer in
  /// diagnostics. The same text and options return the cached module while it is alive
  /// (memory), or reuse the compiled objects in the cache dir (disk). Other text reuses the
  /// object of each target module, and of the host code, whose fingerprint (what the
  /// compiler sees of it: see TargetSlot in passes/Passes.h) a live module of this engine or
  /// the cache dir holds: an edit of one kernel compiles that kernel again, not the program.
  llvm::Expected<std::shared_ptr<Module>> compile(llvm::StringRef text, llvm::StringRef name,
                                                  const CompileOptions &compileOptions = {});

  /// Reads the file at `path` and compiles it as compile() does, its diagnostics naming
  /// `path`; the module is named `name`, or the file's stem ("axpb" for models/axpb.mlir)
  /// when `name` is empty. A file that cannot be read is a CompileError saying why.
  llvm::Expected<std::shared_ptr<Module>>
  compileFile(llvm::StringRef path, llvm::StringRef name = "", CompileOptions compileOptions = {});

  const EngineOptions &options() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// A named module that can be replaced while it serves calls (hot reload). A new version
/// is compiled and linked beside the current one and swapped in atomically only if that
/// succeeds; calls already running finish on the version they started on, and a version
/// is unloaded (teardown, sessions closed) when its last call ends. Thread-safe.
class ReloadableModule final : public Invocable {
public:
  ReloadableModule(Engine &engine, std::string name);
  ~ReloadableModule() override;

  /// Compiles `text` and makes it the current version. Returns the new version number
  /// (1 for the first load). On failure the current version keeps serving. Diagnostics name
  /// the text `sourceName` (a file's path), or the module's name when it is empty.
  llvm::Expected<uint64_t> reload(llvm::StringRef text, llvm::StringRef sourceName = "");
  /// Reads the file at `path` and reloads from it, its diagnostics naming `path`. A file that
  /// cannot be read is a CompileError saying why, and the current version keeps serving.
  llvm::Expected<uint64_t> reloadFile(llvm::StringRef path);

  /// The current version and its number; null and 0 before the first successful load.
  std::shared_ptr<Module> current() const;
  uint64_t version() const;
  const std::string &name() const;

  using Invocable::invoke;
  /// Invokes `entry` of the current version, which stays loaded until the call returns, as
  /// Module::invoke does.
  llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry, llvm::ArrayRef<Tensor> inputs,
                                             const InvokeOptions &options = {}) const override;
  llvm::Expected<std::vector<Tensor>> invoke(llvm::StringRef entry,
                                             llvm::ArrayRef<TensorRef> inputs,
                                             const InvokeOptions &options = {}) const override;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Watches files for changes with inotify and reports each changed file once per save, from a
/// background thread. Editors that save by renaming a new file over the old one are handled:
/// the watch is on the directory. A save is seen when the file is closed after writing or
/// renamed into place; it is reported once no other event for the file has followed for
/// kSettle (a save's own events come within microseconds of each other). A file only created,
/// whose writer has yet to close it, is reported if nothing follows for `debounce`.
class FileWatcher {
public:
  using Callback = std::function<void(const std::string &path)>;
  static constexpr std::chrono::milliseconds kSettle{5};

  /// Watches `path`: a file, or a directory whose files matching `extension` are watched
  /// (".mlir"; empty for all).
  static llvm::Expected<std::unique_ptr<FileWatcher>>
  create(const std::string &path, llvm::StringRef extension, Callback onChange,
         std::chrono::milliseconds debounce = std::chrono::milliseconds(50));
  ~FileWatcher();

  struct Impl;

private:
  explicit FileWatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier

#endif // COURIER_JIT_ENGINE_H
