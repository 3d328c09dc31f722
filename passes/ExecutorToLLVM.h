// convert-executor-to-llvm in pieces, for a conversion of one's own (the shape of upstream's
// populate...Patterns): each executor op becomes calls of the runtime's C ABI
// (runtime/ExecutorABI.h). A module is first checked and prepared (ExecutorToLLVMLowering::
// prepare): the patterns then only reference what that step declared, and cannot fail on an
// op it accepted. convert-executor-to-llvm is these pieces and one partial conversion.
#ifndef COURIER_PASSES_EXECUTORTOLLVM_H
#define COURIER_PASSES_EXECUTORTOLLVM_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <memory>

namespace mlir {
class ConversionTarget;
class LLVMTypeConverter;
class RewritePatternSet;
} // namespace mlir

namespace courier {

/// What the executor patterns of one module share, made by the precondition step: the
/// runtime functions the module's executor ops call, declared; the constants they reference
/// (addresses, paths, entry symbols, objects, rank and element-size tables), created; and
/// where each executor.call packs its inputs (its function's stack while the calls there fit
/// 64 KiB together, else the heap). It must outlive the conversion that uses its patterns.
class ExecutorToLLVMLowering {
public:
  /// The precondition step. Checks every op of `module`, and emits an error on the first that
  /// fails: a Catalyst op that only the dispatch passes lower, an executor op outside a
  /// function of `module`, on tensors (not bufferized) or on elements an executor does not
  /// take, or a runtime function declared with another signature than the ABI's. Then
  /// declares and creates what the patterns reference. Loads the LLVM dialect if the context
  /// has not (a pass that calls this declares it as a dependent dialect).
  static mlir::FailureOr<ExecutorToLLVMLowering> prepare(mlir::ModuleOp module);

  ExecutorToLLVMLowering(ExecutorToLLVMLowering &&) noexcept;
  ExecutorToLLVMLowering &operator=(ExecutorToLLVMLowering &&) noexcept;
  ~ExecutorToLLVMLowering();

  /// Whether the module has executor ops to convert.
  bool hasExecutorOps() const;

  class Context; ///< Defined beside the patterns (passes/ConvertExecutorToLLVM.cpp).
  const Context &context() const { return *impl; }

private:
  explicit ExecutorToLLVMLowering(std::unique_ptr<Context> impl);
  std::unique_ptr<Context> impl;
};

/// !executor.session and !executor.token are i64 in LLVM, as the runtime's ABI has them.
void populateExecutorToLLVMTypeConversions(mlir::LLVMTypeConverter &converter);

/// The patterns that lower executor.open, send_binary, launch, launch_async, await, call and
/// close to calls of the runtime, for the module `lowering` was prepared from; `converter`
/// needs the executor's type conversions.
void populateExecutorToLLVMConversionPatterns(const mlir::LLVMTypeConverter &converter,
                                              const ExecutorToLLVMLowering &lowering,
                                              mlir::RewritePatternSet &patterns);

/// The executor dialect is illegal, the LLVM dialect legal.
void configureExecutorToLLVMConversionLegality(mlir::ConversionTarget &target);

} // namespace courier

#endif // COURIER_PASSES_EXECUTORTOLLVM_H
