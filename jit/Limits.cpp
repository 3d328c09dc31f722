// Limits on what a module may make the engine build: constants whose bytes, once expanded,
// and objects whose size would cost memory, time and cache space out of all proportion to the
// source text that asked for them.
#include "jit/Internal.h"

#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include "llvm/Support/MathExtras.h"

namespace courier {

namespace {

/// The bytes one element of `type` takes in memory: index as 64 bits, anything without a
/// width (a string, say) as at least one.
uint64_t elementBytes(mlir::Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  if (auto complex = mlir::dyn_cast<mlir::ComplexType>(type))
    return 2 * elementBytes(complex.getElementType());
  return 1;
}

/// The bytes `attr` stands for: every element of its type, however few it stores (a splat
/// stores one), or nullopt if that does not fit in 64 bits.
std::optional<uint64_t> expandedBytes(mlir::ElementsAttr attr) {
  mlir::ShapedType type = attr.getShapedType();
  bool overflowed = false;
  uint64_t bytes = elementBytes(type.getElementType());
  // Counted here rather than with getNumElements(), which overflows silently.
  for (int64_t size : type.getShape()) {
    bytes = llvm::SaturatingMultiply(bytes, static_cast<uint64_t>(std::max<int64_t>(size, 0)),
                                     &overflowed);
    if (overflowed)
      return std::nullopt;
  }
  return bytes;
}

/// "'builtin.module' @dev" or "'builtin.module'".
std::string describe(mlir::Operation *op) {
  std::string text = "'" + op->getName().getStringRef().str() + "'";
  if (auto name = op->getAttrOfType<mlir::StringAttr>(mlir::SymbolTable::getSymbolAttrName()))
    text += " @" + name.str();
  return text;
}

} // namespace

llvm::LogicalResult checkConstantSizes(mlir::Operation *root, uint64_t maxBytes) {
  mlir::WalkResult walked = root->walk([&](mlir::Operation *op) {
    // Inherent attributes (properties) included: arith.constant's value and memref.global's
    // initial value live there.
    return op->getAttrDictionary().walk([&](mlir::ElementsAttr attr) {
      std::optional<uint64_t> bytes = expandedBytes(attr);
      // A constant that cannot be counted cannot be built under any limit.
      if (bytes && (maxBytes == 0 || *bytes <= maxBytes))
        return mlir::WalkResult::advance();
      mlir::InFlightDiagnostic error = op->emitError() << describe(op) << " holds a constant of ";
      if (bytes)
        error << *bytes << " bytes, more than the limit of " << maxBytes << " (maxConstantBytes)";
      else
        error << attr.getShapedType() << ", whose size in bytes does not fit in 64 bits";
      return mlir::WalkResult::interrupt();
    });
  });
  return llvm::failure(walked.wasInterrupted());
}

llvm::LogicalResult checkHostObjectSize(mlir::Operation *module, uint64_t bytes,
                                        uint64_t maxBytes) {
  if (maxBytes == 0 || bytes <= maxBytes)
    return llvm::success();
  module->emitError() << describe(module) << " compiled to a host object of " << bytes
                      << " bytes, more than the limit of " << maxBytes << " (maxObjectBytes)";
  return llvm::failure();
}

} // namespace courier
