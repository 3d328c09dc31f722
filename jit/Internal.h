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
struct LocalCode;

/// Where a module's code is, chosen when the engine builds the module: in this process
/// (LocalCode: its JIT, entry functions and runtime scope) or in a worker process of its own
/// (jit/IsolatedModule.cpp). Module's methods ask it; they never ask which it is.
class ModuleCode {
public:
  virtual ~ModuleCode();
  /// Runs `entry` on `inputs`, results written into `options.outputs` where it gives them
  /// (checked against the signature already).
  virtual llvm::Expected<std::vector<Tensor>> invoke(const Module::Impl &module,
                                                     llvm::StringRef entry,
                                                     llvm::ArrayRef<TensorRef> inputs,
                                                     const InvokeOptions &options) const = 0;
  virtual WorkerState workerState() const { return {}; }
  /// Ends the worker, if the code is in one; nothing in this process.
  virtual void terminate() const {}
  /// True once terminate() ended the worker: the module must not be handed out again.
  virtual bool terminated() const { return false; }
  /// The code in this process, or null.
  virtual const LocalCode *local() const { return nullptr; }
};

/// A module's code in this process. Its end runs the module's teardown(), closes the
/// sessions its launches opened, then unmaps the code.
struct LocalCode final : ModuleCode {
  ~LocalCode() override;
  llvm::Expected<std::vector<Tensor>> invoke(const Module::Impl &module, llvm::StringRef entry,
                                             llvm::ArrayRef<TensorRef> inputs,
                                             const InvokeOptions &options) const override;
  const LocalCode *local() const override { return this; }

  std::unique_ptr<llvm::orc::LLJIT> jit;
  struct Functions {
    void (*packed)(void **) = nullptr;
    void *ciface = nullptr;
  };
  llvm::StringMap<Functions> functions;
  void (*teardown)() = nullptr;
  std::unique_ptr<runtime::ModuleScope> scope;
};

/// A module's code in a worker (jit/IsolatedModule.cpp).
std::unique_ptr<ModuleCode> isolatedCode(std::unique_ptr<IsolatedWorker> worker);

/// Writes `results` into the caller's `outputs` where it gives them (each checked to fit),
/// leaving those results without bytes.
llvm::Error writeIntoOutputs(llvm::StringRef entry, std::vector<Tensor> &results,
                             llvm::ArrayRef<OutputRef> outputs);

struct Module::Impl {
  Impl();
  ~Impl();
  std::string name;
  std::vector<EntrySignature> entries;
  /// Public functions invoke cannot call, with the reason.
  llvm::StringMap<std::string> unsupported;
  PhaseTimes times;
  /// The objects the engine's memory caches find by fingerprint while this module is
  /// loaded (its host object and target objects).
  std::vector<std::shared_ptr<const void>> retained;
  std::unique_ptr<ModuleCode> code;
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

/// Calls `entry` of an in-process module (its code `impl.code->local()`) after checking
/// `inputs` against its signature, hands its results to `consume` (valid only during the
/// call), then frees those whose allocation `consume` did not take.
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
