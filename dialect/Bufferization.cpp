// Bufferization models: kernel launches read their operands and produce fresh buffers;
// executor.call becomes its destination-passing form with output buffers as operands.
#include "dialect/Dialects.h"

#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace mlir::bufferization;

namespace courier {
namespace {

/// The buffers of an op's tensor operands (other operands unchanged).
FailureOr<SmallVector<Value>> getOperandBuffers(RewriterBase &rewriter, ValueRange operands,
                                                const BufferizationOptions &options,
                                                BufferizationState &state) {
  SmallVector<Value> buffers;
  for (Value operand : operands) {
    if (!isa<TensorType>(operand.getType())) {
      buffers.push_back(operand);
      continue;
    }
    FailureOr<Value> buffer = getBuffer(rewriter, operand, options, state);
    if (failed(buffer))
      return failure();
    buffers.push_back(*buffer);
  }
  return buffers;
}

/// Replaces buffers that are strided views with contiguous copies: kernels are compiled for
/// identity layouts, and the call wire layout is packed.
LogicalResult makeContiguous(RewriterBase &rewriter, Operation *op,
                             const BufferizationOptions &options, MutableArrayRef<Value> buffers) {
  for (Value &buffer : buffers) {
    auto type = dyn_cast<MemRefType>(buffer.getType());
    if (!type || type.getLayout().isIdentity())
      continue;
    auto contiguous = MemRefType::get(type.getShape(), type.getElementType());
    SmallVector<Value> dynamicSizes;
    for (int64_t dim = 0; dim < type.getRank(); ++dim)
      if (type.isDynamicDim(dim))
        dynamicSizes.push_back(memref::DimOp::create(rewriter, op->getLoc(), buffer, dim));
    FailureOr<Value> copy = options.createAlloc(rewriter, op->getLoc(), contiguous, dynamicSizes);
    if (failed(copy) || failed(options.createMemCpy(rewriter, op->getLoc(), buffer, *copy)))
      return op->emitError("could not copy a strided input into a contiguous buffer");
    buffer = *copy;
  }
  return success();
}

SmallVector<Type> identityBufferTypes(TypeRange types) {
  return llvm::map_to_vector(types, [](Type type) -> Type {
    if (auto tensor = dyn_cast<TensorType>(type))
      return getMemRefTypeWithStaticIdentityLayout(tensor);
    return type;
  });
}

/// Shared answers for ops that only read their tensor operands and return fresh tensors.
template <typename ConcreteModel, typename ConcreteOp>
struct ReadsOperandsModel : BufferizableOpInterface::ExternalModel<ConcreteModel, ConcreteOp> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &, const AnalysisState &) const {
    return true;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &, const AnalysisState &) const {
    return false;
  }
  AliasingValueList getAliasingValues(Operation *, OpOperand &, const AnalysisState &) const {
    return {};
  }
  bool bufferizesToAllocation(Operation *, Value) const { return true; }
  /// Results are fresh identity-layout buffers. Said before bufferization too, so a loop
  /// carrying a result into its next iteration keeps that type rather than a fully dynamic
  /// layout that would force a copy per iteration.
  FailureOr<BufferLikeType> getBufferType(Operation *, Value value, const BufferizationOptions &,
                                          const BufferizationState &, SmallVector<Value> &) const {
    return cast<BufferLikeType>(
        getMemRefTypeWithStaticIdentityLayout(cast<TensorType>(value.getType())));
  }
};

/// A kernel launch: the same op on the operands' buffers, returning fresh identity-layout
/// buffers. `rebuild` creates it from the op, its new result types and the buffers.
template <typename LaunchOp>
struct LaunchModel : ReadsOperandsModel<LaunchModel<LaunchOp>, LaunchOp> {
  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options, BufferizationState &state) const {
    auto launch = cast<LaunchOp>(op);
    FailureOr<SmallVector<Value>> inputs =
        getOperandBuffers(rewriter, launch.getInputs(), options, state);
    if (failed(inputs) || failed(makeContiguous(rewriter, op, options, *inputs)))
      return failure();
    Operation *newOp =
        rebuild(rewriter, launch, identityBufferTypes(op->getResultTypes()), *inputs);
    // Discardable attributes such as catalyst.nonblocking say how the launch runs.
    newOp->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    replaceOpWithBufferizedValues(rewriter, op, newOp->getResults());
    return success();
  }

  static Operation *rebuild(RewriterBase &rewriter, dialect::catalyst::LaunchKernelOp launch,
                            TypeRange types, ValueRange inputs) {
    return dialect::catalyst::LaunchKernelOp::create(rewriter, launch.getLoc(), types,
                                                     launch.getCallee(), inputs);
  }
  static Operation *rebuild(RewriterBase &rewriter, dialect::executor::LaunchOp launch,
                            TypeRange types, ValueRange inputs) {
    return dialect::executor::LaunchOp::create(rewriter, launch.getLoc(), types,
                                               launch.getSession(), launch.getCallee(),
                                               launch.getObject(), inputs);
  }
};

/// The operands of a call's destination-passing form: the inputs' contiguous buffers, then
/// a freshly allocated (statically shaped) buffer per result, also returned in `outputs`.
FailureOr<SmallVector<Value>> destinationOperands(Operation *op, ValueRange inputs,
                                                  RewriterBase &rewriter,
                                                  const BufferizationOptions &options,
                                                  BufferizationState &state,
                                                  SmallVector<Value> &outputs) {
  FailureOr<SmallVector<Value>> operands = getOperandBuffers(rewriter, inputs, options, state);
  if (failed(operands) || failed(makeContiguous(rewriter, op, options, *operands)))
    return failure();
  for (Type type : identityBufferTypes(op->getResultTypes())) {
    auto memref = dyn_cast<MemRefType>(type);
    if (!memref || !memref.hasStaticShape())
      return op->emitError("custom_call results must be statically shaped tensors, got ") << type;
    FailureOr<Value> buffer = options.createAlloc(rewriter, op->getLoc(), memref, {});
    if (failed(buffer))
      return op->emitError("could not allocate an output buffer of type ") << type;
    outputs.push_back(*buffer);
  }
  llvm::append_range(*operands, outputs);
  return operands;
}

/// executor.call on tensors: inputs are read; each result becomes a freshly allocated
/// output buffer appended to the operands.
struct CallModel : ReadsOperandsModel<CallModel, dialect::executor::CallOp> {
  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options, BufferizationState &state) const {
    auto call = cast<dialect::executor::CallOp>(op);
    SmallVector<Value> outputs;
    FailureOr<SmallVector<Value>> operands =
        destinationOperands(op, call.getArgs(), rewriter, options, state, outputs);
    if (failed(operands))
      return failure();
    dialect::executor::CallOp::create(rewriter, op->getLoc(), TypeRange{}, call.getSession(),
                                      call.getCallee(), *operands,
                                      rewriter.getI32IntegerAttr(call.getInputCount()));
    replaceOpWithBufferizedValues(rewriter, op, outputs);
    return success();
  }
};

/// catalyst.custom_call on tensors: the same destination-passing form as executor.call,
/// with `number_original_arg` marking where the inputs end.
struct CustomCallModel : ReadsOperandsModel<CustomCallModel, dialect::catalyst::CustomCallOp> {
  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options, BufferizationState &state) const {
    auto call = cast<dialect::catalyst::CustomCallOp>(op);
    SmallVector<Value> outputs;
    FailureOr<SmallVector<Value>> operands =
        destinationOperands(op, call.getInputs(), rewriter, options, state, outputs);
    if (failed(operands))
      return failure();
    auto bufferized = dialect::catalyst::CustomCallOp::create(
        rewriter, op->getLoc(), TypeRange{}, *operands, call.getCallTargetName(),
        rewriter.getI32IntegerAttr(call.getInputs().size()), call.getBackendConfigAttr());
    bufferized->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    replaceOpWithBufferizedValues(rewriter, op, outputs);
    return success();
  }
};

} // namespace

void registerCourierDialects(DialectRegistry &registry) {
  registry.insert<dialect::executor::ExecutorDialect, dialect::catalyst::CatalystDialect>();
  registry.addExtension(+[](MLIRContext *ctx, dialect::executor::ExecutorDialect *) {
    dialect::executor::LaunchOp::attachInterface<LaunchModel<dialect::executor::LaunchOp>>(*ctx);
    dialect::executor::CallOp::attachInterface<CallModel>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, dialect::catalyst::CatalystDialect *) {
    dialect::catalyst::LaunchKernelOp::attachInterface<
        LaunchModel<dialect::catalyst::LaunchKernelOp>>(*ctx);
    dialect::catalyst::CustomCallOp::attachInterface<CustomCallModel>(*ctx);
  });
}

} // namespace courier
