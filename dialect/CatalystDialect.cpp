// The `catalyst` input ops: verifiers, symbol checks, memory effects and the checks on the
// `catalyst.target` / `catalyst.dispatch` / `catalyst.object_file` module attributes.
#include "dialect/Dialects.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace courier::catalyst;

#include "dialect/CatalystDialect.cpp.inc"

#define GET_OP_CLASSES
#include "dialect/CatalystOps.cpp.inc"

void CatalystDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/CatalystOps.cpp.inc"
      >();
}

LogicalResult CatalystDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto requireStringField = [&](DictionaryAttr dict, StringRef field) -> LogicalResult {
    Attribute value = dict.get(field);
    if (value && !isa<StringAttr>(value))
      return op->emitError() << "'" << name << "' field '" << field << "' must be a string";
    return success();
  };
  if (name == kTargetAttrName || name == kDispatchAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' is only valid on a builtin.module";
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict)
      return op->emitError() << "'" << name << "' must be a dictionary";
    if (name == kDispatchAttrName)
      return requireStringField(dict, "address");
    for (StringRef field : {"triple", "cpu", "features"})
      if (failed(requireStringField(dict, field)))
        return failure();
    return success();
  }
  if (name == kObjectFileAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' is only valid on a builtin.module";
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a string (the object's path)";
    return success();
  }
  return op->emitError() << "unknown catalyst attribute '" << name << "'";
}

LogicalResult LaunchKernelOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  SymbolRefAttr callee = getCallee();
  if (callee.getNestedReferences().size() != 1)
    return emitOpError("callee must be @module::@function, got ") << callee;
  Operation *module = symbolTable.lookupNearestSymbolFrom(*this, callee.getRootReference());
  if (!module || !isa<ModuleOp>(module))
    return emitOpError("'") << callee.getRootReference().getValue() << "' is not a nested module";
  Operation *fn = symbolTable.lookupSymbolIn(module, callee.getLeafReference());
  auto function = dyn_cast_or_null<FunctionOpInterface>(fn);
  if (!function)
    return emitOpError("no function '") << callee.getLeafReference().getValue() << "' in module '"
                                        << callee.getRootReference().getValue() << "'";
  if (function.getNumArguments() != getInputs().size() ||
      function.getNumResults() != getNumResults())
    return emitOpError("callee ") << callee << " takes " << function.getNumArguments()
                                  << " arguments and returns " << function.getNumResults()
                                  << " results, but the launch passes " << getInputs().size()
                                  << " and expects " << getNumResults();
  if (!cast<SymbolOpInterface>(fn).isPublic())
    return emitOpError("callee ") << callee << " is not public; only public functions get a "
                                  << "kernel entry";
  // The kernel is compiled for its own signature: a launch that disagrees would make it
  // read or write past its buffers on the executor.
  auto check = [&](StringRef what, unsigned index, Type passed, Type declared) -> LogicalResult {
    auto p = dyn_cast<ShapedType>(passed), d = dyn_cast<ShapedType>(declared);
    bool compatible = p && d && p.hasRank() && d.hasRank() &&
                      p.getElementType() == d.getElementType() && p.getRank() == d.getRank();
    for (int64_t dim = 0; compatible && dim < p.getRank(); ++dim)
      compatible =
          p.isDynamicDim(dim) || d.isDynamicDim(dim) || p.getDimSize(dim) == d.getDimSize(dim);
    if (compatible)
      return success();
    return emitOpError() << what << " " << index << " has type " << passed << " but " << callee
                         << " declares " << declared;
  };
  for (auto [index, types] :
       llvm::enumerate(llvm::zip(getInputs().getTypes(), function.getArgumentTypes())))
    if (failed(check("operand", index, std::get<0>(types), std::get<1>(types))))
      return failure();
  for (auto [index, types] :
       llvm::enumerate(llvm::zip(getResultTypes(), function.getResultTypes())))
    if (failed(check("result", index, std::get<0>(types), std::get<1>(types))))
      return failure();
  return success();
}

void LaunchKernelOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  // The kernel runs elsewhere; treat it as touching the world so it is never dropped.
  effects.emplace_back(MemoryEffects::Read::get());
  effects.emplace_back(MemoryEffects::Write::get());
  for (OpOperand &operand : getInputsMutable())
    if (isa<BaseMemRefType>(operand.get().getType()))
      effects.emplace_back(MemoryEffects::Read::get(), &operand);
  for (OpResult result : getResults())
    if (isa<BaseMemRefType>(result.getType())) {
      effects.emplace_back(MemoryEffects::Allocate::get(), result);
      effects.emplace_back(MemoryEffects::Write::get(), result);
    }
}

void RuntimeCallOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  effects.emplace_back(MemoryEffects::Read::get());
  effects.emplace_back(MemoryEffects::Write::get());
}

namespace courier::catalyst {

Type cKindWireType(MLIRContext *ctx, StringRef kind) {
  return llvm::StringSwitch<Type>(kind)
      .Case("i8", IntegerType::get(ctx, 8))
      .Case("i16", IntegerType::get(ctx, 16))
      .Case("i32", IntegerType::get(ctx, 32))
      .Cases({"i64", "ptr"}, IntegerType::get(ctx, 64))
      .Case("f16", Float16Type::get(ctx))
      .Case("f32", Float32Type::get(ctx))
      .Case("f64", Float64Type::get(ctx))
      .Default(Type());
}

} // namespace courier::catalyst

/// Whether `type` is what a C parameter of kind `kind` is passed as (a `ptr` may also be an
/// index).
static bool matchesKind(StringRef kind, Type type) {
  return type == cKindWireType(type.getContext(), kind) || (kind == "ptr" && type.isIndex());
}

LogicalResult RuntimeCallOp::verify() {
  if (getCallee().empty())
    return emitOpError("needs a non-empty callee name");
  size_t scalarParams = 0, stringParams = 0;
  for (auto [index, attr] : llvm::enumerate(getCParams())) {
    StringRef kind = cast<StringAttr>(attr).getValue();
    if (kind == "str") {
      ++stringParams;
      continue;
    }
    if (!cKindWireType(getContext(), kind))
      return emitOpError("c_params[")
             << index << "] has unknown kind '" << kind
             << "' (expected i8, i16, i32, i64, f16, f32, f64, ptr or str)";
    if (scalarParams < getInputs().size() &&
        !matchesKind(kind, getInputs()[scalarParams].getType()))
      return emitOpError("operand ")
             << scalarParams << " of type " << getInputs()[scalarParams].getType()
             << " does not match its C parameter kind '" << kind << "'";
    ++scalarParams;
  }
  if (scalarParams != getInputs().size())
    return emitOpError("c_params declares ")
           << scalarParams << " scalar or ptr parameters but the op has " << getInputs().size()
           << " operands";
  if (stringParams != getCStrings().size())
    return emitOpError("c_params declares ") << stringParams << " str parameters but c_strings has "
                                             << getCStrings().size() << " entries";
  for (Attribute attr : getCStrings())
    if (cast<StringAttr>(attr).size() >= kStringFieldWidth)
      return emitOpError("c_strings entry '")
             << cast<StringAttr>(attr).getValue() << "' is longer than " << kStringFieldWidth - 1
             << " bytes";
  StringRef resultKind = getCResult();
  if (resultKind == "void") {
    if (!getResult().empty())
      return emitOpError("c_result is void but the op declares a result");
  } else {
    if (!cKindWireType(getContext(), resultKind))
      return emitOpError("c_result has unknown kind '") << resultKind << "'";
    if (getResult().size() != 1 || !matchesKind(resultKind, getResult()[0].getType()))
      return emitOpError("c_result '") << resultKind << "' needs exactly one result of that type";
  }
  for (Type type : getOuts().getTypes())
    if (!cast<ShapedType>(type).hasStaticShape() ||
        !cast<ShapedType>(type).getElementType().isIntOrFloat())
      return emitOpError("out buffers need static shapes and integer or float elements, got ")
             << type;
  return success();
}
