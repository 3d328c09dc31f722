// The pipelines that chain the dispatch passes with upstream bufferization and lowering.
#include "passes/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/Vector/Transforms/Passes.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <mutex>
#include <optional>

using namespace mlir;

namespace courier {
namespace {

/// Stage 1, input dialects to linalg on tensors, for the host's functions and those of its
/// target modules (the vectorizer, which runs on both, sees linalg): TOSA, then aggregate ops
/// and linalg.pack/unpack decomposed. Code without them is left as it was.
void addInputLowering(OpPassManager &pm) {
  pm.addPass(createLowerTosa());
  pm.addPass(createDecomposeLinalgOps());
}

/// `vectorize` with the value of local-runs-here, or nothing for IR vectorized before (a
/// target module cross-compile-targets lowers: its copy no longer says what CPU it is for).
void addOneShotBufferize(OpPassManager &pm, std::optional<bool> vectorize) {
  addInputLowering(pm);
  // Elementwise arith/math on tensors has no bufferization of its own; linalg does.
  pm.addNestedPass<func::FuncOp>(createConvertElementwiseToLinalgPass());
  // On tensors, before bufferization: accumulators become values carried by loops.
  if (vectorize)
    pm.addPass(createVectorizeKernels({*vectorize}));
  bufferization::OneShotBufferizePassOptions options;
  options.bufferizeFunctionBoundaries = true;
  options.functionBoundaryTypeConversion = bufferization::LayoutMapOption::IdentityLayoutMap;
  // A loop that carries a kernel's result into its next iteration yields a fresh buffer, not
  // its iter_arg's; the ownership-based deallocation below frees each one after its last use.
  options.allowReturnAllocsFromLoops = true;
  pm.addPass(bufferization::createOneShotBufferizePass(options));
}

/// Bufferized IR -> LLVM dialect; `withExecutor` adds convert-executor-to-llvm where memref
/// types are still in place; `threads` runs the outer loops of large ops on OpenMP's threads
/// (kernels: the object host binds them to the executor's kernel-thread team).
void addLowerToLLVM(OpPassManager &pm, bool withExecutor, bool threads) {
  bufferization::buildBufferDeallocationPipeline(pm);
  pm.addPass(createConvertBufferizationToMemRefPass());
  pm.addPass(createExpandStridedCopies());
  ParallelizeKernelsOptions parallel;
  parallel.enabled = threads;
  pm.addPass(createParallelizeKernels(parallel));
  if (threads) {
    pm.addPass(createConvertSCFToOpenMPPass());
    // It wraps each loop body in a memref.alloca_scope, whose single block the lowering of
    // the loops inside would split; the canonicalizer inlines scopes that hold no alloca.
    pm.addPass(createCanonicalizerPass());
  }
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  // Vector transfers to plain loads and stores (unrolled: loops of allocas in a k loop would
  // overflow the stack), reductions to shuffles.
  VectorTransferToSCFOptions transfers;
  transfers.enableFullUnroll();
  pm.addPass(createConvertVectorToSCFPass(transfers));
  pm.addNestedPass<func::FuncOp>(vector::createLowerVectorMultiReductionPass());
  // Vector math becomes vector arithmetic where an approximation is accurate enough, before
  // the rest goes to libm (and before bf16 is emulated: approximations compute it in f32).
  // Complex arithmetic becomes arithmetic and math on its parts (no __mulsc3, no libm
  // complex functions); the math that leaves goes the way of all math below.
  pm.addPass(createConvertComplexToStandardPass());
  pm.addPass(createApproximateMath());
  // bf16 arithmetic runs in f32 and is rounded back (to nearest, ties to even) with integer
  // ops: LLVM would call __truncsfbf2 instead, which neither the JIT nor an executor provides.
  pm.addPass(arith::createArithEmulateUnsupportedFloats({{"bf16"}, "f32"}));
  pm.addPass(arith::createArithExpandOpsPass({/*includeBf16=*/true}));
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  // Every math op to something that loads: ipowi and fpowi to functions multiplying by
  // squaring, the rest to libm, arithmetic or LLVM intrinsics (courier-lower-math); the
  // calls that can come out are executor/RuntimeSymbols.c's, which a test checks.
  pm.addPass(createConvertMathToFuncs());
  pm.addPass(createLowerMath());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertComplexToLLVMPass());
  pm.addPass(createConvertVectorToLLVMPass());
  if (withExecutor)
    pm.addPass(createConvertExecutorToLLVM());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createUBToLLVMConversionPass());
  if (threads)
    pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCheckLowered());
}

} // namespace

void buildBufferizeAndLowerToLLVM(OpPassManager &pm, bool vectorize) {
  addOneShotBufferize(pm, vectorize ? std::optional<bool>(true) : std::nullopt);
  addLowerToLLVM(pm, /*withExecutor=*/false, /*threads=*/true);
}

void buildDispatchPipeline(OpPassManager &pm, const PipelineOptions &options) {
  pm.addPass(createLowerRuntimeDispatch());
  addOneShotBufferize(pm, options.localRunsHere);
  pm.addPass(createCrossCompileTargets({options.workspace, options.optLevel, options.maxObjectBytes,
                                        options.jobs, options.localRunsHere},
                                       options.hooks));
  pm.addPass(createDispatchExecutorTargets());
}

void buildHostLowering(OpPassManager &pm) {
  addLowerToLLVM(pm, /*withExecutor=*/true, /*threads=*/false);
}

void buildCourierPipeline(OpPassManager &pm, const PipelineOptions &options) {
  buildDispatchPipeline(pm, options);
  buildHostLowering(pm);
}

std::string defaultWorkspace() {
  SmallString<256> dir;
  llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, dir);
  llvm::sys::path::append(dir, "courier-objects");
  return std::string(dir);
}

namespace {
struct CourierPipelineOptions : public PassPipelineOptions<CourierPipelineOptions> {
  Option<std::string> workspace{*this, "workspace",
                                llvm::cl::desc("Directory for target object files")};
  Option<unsigned> optLevel{*this, "opt-level", llvm::cl::desc("Target optimisation level"),
                            llvm::cl::init(2)};
  Option<unsigned> jobs{*this, "jobs",
                        llvm::cl::desc("Threads generating target code (0: one per core)"),
                        llvm::cl::init(0)};
};
} // namespace

void registerPassesForParsing() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    if (!PassInfo::lookup("canonicalize"))
      registerAllPasses();
    if (!PassPipelineInfo::lookup("courier-lower-to-llvm"))
      registerCourierPassesAndPipelines();
  });
}

void registerCourierPassesAndPipelines() {
  registerCourierPasses();
  PassPipelineRegistration<CourierPipelineOptions>(
      "courier-pipeline",
      "Tensor-level host module with nested target modules to the LLVM dialect: "
      "lower-runtime-dispatch, one-shot bufferize, cross-compile-targets, "
      "dispatch-executor-targets, convert-executor-to-llvm and the standard lowering",
      [](OpPassManager &pm, const CourierPipelineOptions &options) {
        buildCourierPipeline(pm, {options.workspace, options.optLevel, 0, options.jobs});
      });
  PassPipelineRegistration<>(
      "courier-input-lowering",
      "Stage 1 of the default lowering: TOSA and aggregate linalg ops to linalg on tensors",
      [](OpPassManager &pm) { addInputLowering(pm); });
  PassPipelineRegistration<>(
      "courier-lower-to-llvm",
      "Bufferize and lower a module without executor ops to the LLVM dialect",
      [](OpPassManager &pm) { buildBufferizeAndLowerToLLVM(pm, /*vectorize=*/true); });
}

} // namespace courier
