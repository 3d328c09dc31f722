// The dispatch passes and the pipelines that chain them from tensor-level input to the
// LLVM dialect.
#ifndef COURIER_PASSES_PASSES_H
#define COURIER_PASSES_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Transform/IR/TransformDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "dialect/Dialects.h"

#include <functional>
#include <optional>
#include <string>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace courier {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The target module an object is for: its place among the host's `catalyst.target`
/// modules, its symbol name (empty if it has none) and its fingerprint, the lowercase hex
/// SHA-256 of everything its object depends on (the module in generic form, without
/// locations and the `catalyst.*` attributes; its triple, CPU, features and lowering
/// pipeline; the opt level; LLVM's version).
struct TargetSlot {
  unsigned index;
  llvm::StringRef symbol;
  llvm::StringRef fingerprint;
};

/// Receives each object cross-compile-targets emits, with the SHA-256 of its bytes, and
/// returns the name the target module is annotated with (`catalyst.object_file`), which host
/// code ships it by; an error fails the pass. Lets the pass's user decide where objects live
/// (a checked cache, memory) instead of the pass writing them to a workspace. Called on the
/// pass's thread, in the order of the modules.
using ObjectSink = std::function<llvm::Expected<std::string>(
    const TargetSlot &slot, llvm::StringRef sha256, llvm::StringRef object)>;

/// Asked before a target module is lowered: the name to annotate the module with if its
/// object is at hand, so that the module is not compiled, or nullopt to compile it.
using ObjectLookup = std::function<std::optional<std::string>(const TargetSlot &slot)>;

class CompilePool;

/// What the engine gives cross-compile-targets beyond its options.
struct CrossCompileHooks {
  ObjectSink sink;     ///< Empty: objects go to the workspace.
  ObjectLookup lookup; ///< Empty: every module is compiled.
  /// Where code generation runs; null: on threads the pass starts for the run (`jobs`).
  CompilePool *pool = nullptr;
  /// With both set, the pass does not wait for code generation when every module was
  /// lowered: it annotates each module with `name`'s answer (which must be what the sink
  /// will answer) and hands `defer` the rest of its work, a function that waits for the
  /// objects, reports each failure at its module's location in the order of the modules,
  /// gives the objects to the sink, and fails if any module failed. Host code compiles
  /// meanwhile; the function must be called before the objects are used, while the MLIR
  /// context lives.
  std::function<std::string(const TargetSlot &slot)> name;
  std::function<void(std::function<mlir::LogicalResult()> finish)> defer;
};

/// Options of the whole dispatch pipeline.
struct PipelineOptions {
  std::string workspace; ///< Where target objects go (see cross-compile-targets).
  unsigned optLevel = 2;
  uint64_t maxObjectBytes = 0; ///< See cross-compile-targets' max-object-bytes.
  unsigned jobs = 0;           ///< See cross-compile-targets' jobs.
  CrossCompileHooks hooks{};   ///< With a sink, objects go there and `workspace` is not used.
  /// See cross-compile-targets' local-runs-here: false when every target is sent to an
  /// executor whatever its IR says.
  bool localRunsHere = true;
};

/// cross-compile-targets with `hooks`.
std::unique_ptr<mlir::Pass> createCrossCompileTargets(const CrossCompileTargetsOptions &options,
                                                      CrossCompileHooks hooks);

/// Tensor-level host module with nested target modules -> LLVM dialect:
/// lower-runtime-dispatch, one-shot bufferize, cross-compile-targets,
/// dispatch-executor-targets, buffer deallocation, convert-executor-to-llvm and the
/// standard lowering to LLVM.
void buildCourierPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// courier-pipeline in two halves. The first, up to and including dispatch-executor-targets,
/// leaves host code alone (target modules compiled, shipped by name and erased); the second
/// lowers that to the LLVM dialect. The engine keys the host's object on the IR between them.
void buildDispatchPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);
void buildHostLowering(mlir::OpPassManager &pm);

/// Bufferize (one-shot, identity layouts at function boundaries), free buffers and lower to
/// the LLVM dialect: the pipeline cross-compile-targets runs on each target module, which the
/// host pipeline vectorized before (`vectorize` adds courier-vectorize, for modules that
/// were not). The host pipeline shares its steps but adds the dispatch passes between them.
void buildBufferizeAndLowerToLLVM(mlir::OpPassManager &pm, bool vectorize = false);

/// Marks the loops tiling by `tileSizes` made over `iterators`' parallel dimensions (one loop
/// per non-zero size, outer first, in the order of `interchange` where it is not empty) with
/// kParallelWorkAttr = `work`, the tiled op's iteration count: courier-parallelize-kernels
/// may run their iterations on several threads.
inline constexpr llvm::StringLiteral kParallelWorkAttr = "courier.parallel_work";
void markParallelTileLoops(llvm::ArrayRef<mlir::LoopLikeOpInterface> loops,
                           llvm::ArrayRef<int64_t> tileSizes,
                           llvm::ArrayRef<mlir::utils::IteratorType> iterators, int64_t work,
                           llvm::ArrayRef<int64_t> interchange = {});

/// Registers the passes and the `courier-pipeline` pipeline with the global registry.
void registerCourierPassesAndPipelines();

/// Makes every upstream and Courier pass and pipeline parseable by name, once per process
/// and only if nobody registered them already (a tool's main may have).
void registerPassesForParsing();

/// Runs LLVM's default optimisation pipeline at `optLevel` (0 skips it) on `module`, whose
/// triple and data layout are set for `machine`, and emits a relocatable object.
llvm::Error emitObjectFile(llvm::Module &module, llvm::TargetMachine &machine, unsigned optLevel,
                           llvm::SmallVectorImpl<char> &object);

/// Prints `op` for a fingerprint: everything that decides what it compiles to (generic form,
/// nothing elided, whatever the command line says) and nothing that does not (locations), so
/// that moving a module in its file, or editing another, leaves its fingerprint as it was.
void printForFingerprint(mlir::Operation *op, llvm::raw_ostream &os);

/// The directory cross-compile-targets writes to when given none.
std::string defaultWorkspace();

} // namespace courier

#endif // COURIER_PASSES_PASSES_H
