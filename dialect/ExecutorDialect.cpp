// The `executor` dialect: types, verifiers and memory effects of its ops.
#include "dialect/Dialects.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace courier::dialect::executor;

#include "dialect/ExecutorDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/ExecutorTypes.cpp.inc"

#define GET_OP_CLASSES
#include "dialect/ExecutorOps.cpp.inc"

void ExecutorDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialect/ExecutorTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialect/ExecutorOps.cpp.inc"
      >();
}

namespace {
/// Every executor op talks to another process; none may be reordered, merged or erased.
void addExecutorEffects(SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &e) {
  e.emplace_back(MemoryEffects::Read::get());
  e.emplace_back(MemoryEffects::Write::get());
}

/// Memref operands are read (inputs) or written (output buffers); tensors carry no effect.
void addOperandEffects(SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &e,
                       OpOperand &operand, bool written) {
  if (!isa<BaseMemRefType>(operand.get().getType()))
    return;
  e.emplace_back(MemoryEffects::Read::get(), &operand);
  if (written)
    e.emplace_back(MemoryEffects::Write::get(), &operand);
}

/// Memref results are fresh buffers the op allocates.
void addResultEffects(SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &e,
                      ResultRange results) {
  for (OpResult result : results) {
    if (!isa<BaseMemRefType>(result.getType()))
      continue;
    e.emplace_back(MemoryEffects::Allocate::get(), result);
    e.emplace_back(MemoryEffects::Write::get(), result);
  }
}
} // namespace

#define COURIER_PLAIN_EFFECTS(OP)                                                                  \
  void OP::getEffects(                                                                             \
      SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {              \
    addExecutorEffects(effects);                                                                   \
  }
COURIER_PLAIN_EFFECTS(OpenOp)
COURIER_PLAIN_EFFECTS(SendBinaryOp)
COURIER_PLAIN_EFFECTS(LaunchAsyncOp)
COURIER_PLAIN_EFFECTS(AwaitOp)
COURIER_PLAIN_EFFECTS(CloseOp)
#undef COURIER_PLAIN_EFFECTS

void LaunchOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  addExecutorEffects(effects);
  for (OpOperand &operand : getInputsMutable())
    addOperandEffects(effects, operand, /*written=*/false);
  addResultEffects(effects, getResults());
}

void CallOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  addExecutorEffects(effects);
  unsigned numInputs = getInputCount();
  for (auto [index, operand] : llvm::enumerate(getArgsMutable()))
    addOperandEffects(effects, operand, /*written=*/index >= numInputs);
  addResultEffects(effects, getResults());
}

LogicalResult OpenOp::verify() {
  if (getAddress().empty())
    return emitOpError("needs a non-empty address (\"host:port\" or \"local\")");
  return success();
}

/// Tensors and memrefs may not be mixed: an op is either before or after bufferization.
static LogicalResult verifyOneLevel(Operation *op, TypeRange operands, TypeRange results) {
  bool anyTensor = false, anyMemRef = false;
  for (TypeRange range : {operands, results})
    for (Type type : range) {
      anyTensor |= isa<TensorType>(type);
      anyMemRef |= isa<BaseMemRefType>(type);
    }
  if (anyTensor && anyMemRef)
    return op->emitOpError("mixes tensor and memref operands or results");
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getCallee().empty())
    return emitOpError("needs a non-empty callee");
  if (getObject().empty())
    return emitOpError("needs a non-empty object path");
  // Kernels are compiled for identity layouts: a strided view would be read as if packed.
  for (Type type : llvm::concat<const Type>(getInputs().getTypes(), getResultTypes()))
    if (auto memref = dyn_cast<MemRefType>(type); memref && !memref.getLayout().isIdentity())
      return emitOpError("needs identity-layout (contiguous) buffers, got ") << type;
  return verifyOneLevel(*this, getInputs().getTypes(), getResultTypes());
}

LogicalResult CallOp::verify() {
  int64_t numInputs = getNumInputArgs().value_or(getArgs().size());
  if (numInputs < 0 || static_cast<size_t>(numInputs) > getArgs().size())
    return emitOpError("num_input_args (")
           << numInputs << ") must be between 0 and the operand count (" << getArgs().size() << ")";
  if (failed(verifyOneLevel(*this, getArgs().getTypes(), getResultTypes())))
    return failure();
  if (!getResults().empty() && static_cast<size_t>(numInputs) != getArgs().size())
    return emitOpError("has both results and output buffers; after bufferization outputs are "
                       "operands after num_input_args, before it they are results");
  // The packed layouts must be addressable with 64-bit byte offsets.
  int64_t inputBytes = 0, outputBytes = 0;
  for (auto [index, value] : llvm::enumerate(llvm::concat<Value>(getArgs(), getResults()))) {
    auto shaped = cast<ShapedType>(value.getType());
    if (!shaped.hasStaticShape())
      return emitOpError("needs statically shaped operands and results, got ") << shaped;
    if (!shaped.getElementType().isIntOrFloat())
      return emitOpError("needs integer or float elements, got ") << shaped;
    int64_t bytes = 0, &total = index < static_cast<size_t>(numInputs) ? inputBytes : outputBytes;
    int64_t elementBytes = (shaped.getElementTypeBitWidth() + 7) / 8;
    if (llvm::MulOverflow(shaped.getNumElements(), elementBytes, bytes) ||
        llvm::AddOverflow(total, bytes, total))
      return emitOpError("packs more bytes than a 64-bit size holds");
    if (auto memref = dyn_cast<MemRefType>(shaped); memref && !memref.getLayout().isIdentity())
      return emitOpError("needs contiguous (identity layout) buffers, got ") << shaped;
  }
  return success();
}
