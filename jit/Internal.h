// What the engine and its modules share inside jit/: the state of a loaded module and
// the constructors of classified errors.
#ifndef COURIER_JIT_INTERNAL_H
#define COURIER_JIT_INTERNAL_H

#include "jit/Engine.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/LogicalResult.h"

namespace llvm {
class MemoryBuffer;
} // namespace llvm

namespace mlir {
class Operation;
} // namespace mlir

namespace courier {

/// Packed wrappers are `<kPackedPrefix><entry>(void **args)`; see addPackedWrapper.
inline constexpr llvm::StringLiteral kPackedPrefix = "_courier_packed_";

class IsolatedWorker;

struct Module::Impl {
  Impl();
  ~Impl();
  std::string name;
  std::vector<EntrySignature> entries;
  /// Public functions invoke cannot call, with the reason.
  llvm::StringMap<std::string> unsupported;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  struct Functions {
    void (*packed)(void **) = nullptr;
    void *ciface = nullptr;
  };
  llvm::StringMap<Functions> functions;
  void (*teardown)() = nullptr;
  std::unique_ptr<runtime::ModuleScope> scope;
  PhaseTimes times;
  /// The objects the engine's memory caches find by fingerprint while this module is
  /// loaded (its host object and target objects).
  std::vector<std::shared_ptr<const void>> retained;
  /// Set for an isolated module: its code lives in a worker, and the fields above that
  /// hold code (jit, functions, teardown, scope) stay empty.
  std::unique_ptr<IsolatedWorker> isolated;
};

/// A result as the entry returned it: `data` is the first element, strides in elements.
struct ResultRef {
  DType dtype;
  /// Inline for the ranks programs use: invoke allocates nothing it can avoid.
  llvm::SmallVector<int64_t, 4> shape, strides;
  const uint8_t *data;
  /// The allocation that holds this result and no other, packed row-major: a consumer may
  /// take it over (setting this to null) instead of copying the
  /// result, and then releases it with transport::giveBlock. Null otherwise.
  void *allocation = nullptr;
  /// Its size once packed row-major.
  size_t packedBytes() const;
  /// True when its elements lie packed row-major from `data` on.
  bool isRowMajor() const;
  /// Copies it row-major to `out` (packedBytes() bytes).
  void pack(uint8_t *out) const;
};

/// Access to a module's state for jit/: the engine and the module worker.
struct ModuleInternals {
  static Module::Impl &impl(const Module &module) { return *module.impl; }
  static std::shared_ptr<Module> make(std::unique_ptr<Module::Impl> impl) {
    return std::shared_ptr<Module>(new Module(std::move(impl)));
  }
};

/// Calls `entry` of an in-process module after checking `inputs` against its signature,
/// hands its results to `consume` (valid only during the call), then frees those whose
/// allocation `consume` did not take.
llvm::Error invokeInProcess(const Module::Impl &impl, llvm::StringRef entry,
                            llvm::ArrayRef<TensorRef> inputs,
                            llvm::function_ref<void(llvm::MutableArrayRef<ResultRef>)> consume);

llvm::Error engineError(ErrorCode kind, std::string message,
                        std::optional<ErrorCode> cause = std::nullopt);

/// An executor failure the runtime recorded, classified by the transport's wire code.
llvm::Error executorError(llvm::Twine context, llvm::Error cause);

/// The lines of one compiled text, indexed when a diagnostic first points into it.
class SourceLines {
public:
  /// `text` must outlive this; `name` is the file name its locations carry.
  SourceLines(llvm::StringRef name, llvm::StringRef text);
  /// Sets `d.sourceLine` when `d` points into this text at a line short enough to show.
  void attach(Diagnostic &d);

private:
  std::string name;
  llvm::StringRef text;
  std::vector<size_t> starts; ///< The offset of each line.
};

/// Fails, with an error at the op, if an attribute of `root` or of an op nested in it holds
/// element data (any ElementsAttr) of more than `maxBytes` (0: no limit) counted as it will be
/// built, every element of a splat included, or of a size that does not fit in 64 bits. Runs
/// before any pass: a splat costs nothing to parse but its full size in every pass after.
llvm::LogicalResult checkConstantSizes(mlir::Operation *root, uint64_t maxBytes);

/// Fails, with an error at `module`, if its host object of `bytes` exceeds `maxBytes` (0: no
/// limit). Target objects are checked where cross-compile-targets emits them.
llvm::LogicalResult checkHostObjectSize(mlir::Operation *module, uint64_t bytes, uint64_t maxBytes);

/// Called once a compile has written all it writes (the disk cache) and before the module's
/// own code first runs (its setup(), when `runsSetup`): where a module worker locks its file
/// system down and tells its server that setup() is starting.
void setBeforeModuleCode(void (*hook)(bool runsSetup));

WorkerState isolatedState(IsolatedWorker &worker);
/// True once an isolated module was terminated: it must not be handed out again.
bool isTerminated(const Module &module);
void terminateIsolated(IsolatedWorker &worker);
llvm::Expected<std::vector<Tensor>> invokeIsolated(IsolatedWorker &worker, llvm::StringRef entry,
                                                   llvm::ArrayRef<TensorRef> inputs,
                                                   const InvokeOptions &options);

/// The text of the file at `path`, or a CompileError naming it and saying why it cannot be
/// read (Engine::compileFile, ReloadableModule::reloadFile).
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readSourceFile(llvm::StringRef path);

namespace executor {
class WorkerPool;
}

/// Starts the workers of an engine with Isolation::Process (a few kept warm) and compiles
/// modules in them (jit/IsolatedModule.cpp).
class WorkerLauncher {
public:
  explicit WorkerLauncher(const EngineOptions &options);
  ~WorkerLauncher();
  /// `sourceName` names the text in diagnostics (CompileOptions::sourceName).
  llvm::Expected<std::shared_ptr<Module>> compile(const EngineOptions &options,
                                                  llvm::StringRef text, llvm::StringRef name,
                                                  llvm::StringRef sourceName,
                                                  std::optional<std::chrono::milliseconds> timeout);

private:
  std::shared_ptr<executor::WorkerPool> pool;
};

} // namespace courier

#endif // COURIER_JIT_INTERNAL_H
