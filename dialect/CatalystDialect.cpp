// The `catalyst` input ops: verifiers, symbol checks, memory effects and the checks on the
// `catalyst.target` / `catalyst.dispatch` / `catalyst.object_file` module attributes.
#include "dialect/Dialects.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace courier::dialect::catalyst;

#include "dialect/CatalystDialect.cpp.inc"

#define GET_OP_CLASSES
#include "dialect/CatalystOps.cpp.inc"

void CatalystDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialect/CatalystOps.cpp.inc"
      >();
}

namespace {
/// The keys each dictionary attribute accepts.
/// `pipeline` and `backend` are Catalyst's: the passes that lower the module, and a label
/// Catalyst's front end sets (kept, not used). `fp` is the floating-point policy:
/// "fast" (the default: reductions may be reordered and products fused) or "strict".
constexpr StringLiteral kTargetKeys[] = {"triple", "cpu", "features", "pipeline", "backend", "fp"};
constexpr StringLiteral kDispatchKeys[] = {"address"};
constexpr StringLiteral kKnownAttributes[] = {
    CatalystDialect::kTargetAttrName, CatalystDialect::kDispatchAttrName,
    CatalystDialect::kObjectFileAttrName, CatalystDialect::kNonblockingAttrName,
    CatalystDialect::kBacklineBringupAttrName};

template <size_t N> std::string quotedList(const StringLiteral (&names)[N]) {
  std::string text;
  for (StringRef name : names)
    text += (text.empty() ? "'" : ", '") + name.str() + "'";
  return text;
}
} // namespace

LogicalResult CatalystDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kTargetAttrName || name == kDispatchAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' is only valid on a builtin.module";
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict)
      return op->emitError() << "'" << name << "' must be a dictionary";
    bool isDispatch = name == kDispatchAttrName;
    ArrayRef<StringLiteral> known = isDispatch ? ArrayRef(kDispatchKeys) : ArrayRef(kTargetKeys);
    for (NamedAttribute field : dict) {
      if (!llvm::is_contained(known, field.getName().getValue()))
        return op->emitError() << "'" << name << "' has unknown key '" << field.getName().getValue()
                               << "'; the known keys are "
                               << (isDispatch ? quotedList(kDispatchKeys)
                                              : quotedList(kTargetKeys));
      if (!isa<StringAttr>(field.getValue()))
        return op->emitError() << "'" << name << "' field '" << field.getName().getValue()
                               << "' must be a string";
    }
    if (auto fp = dict.getAs<StringAttr>("fp"); fp && fp != "fast" && fp != "strict")
      return op->emitError() << "'" << name << "' field 'fp' must be \"fast\" or \"strict\", not '"
                             << fp.getValue() << "'";
    if (isDispatch) {
      auto address = dict.getAs<StringAttr>("address");
      if (!address)
        return op->emitError() << "'" << name << "' needs an 'address': \"host:port\", or "
                               << "\"local\" for the in-process executor";
      if (address.empty())
        return op->emitError() << "'" << name << "' has an empty 'address'; write "
                               << "\"host:port\", or \"local\" for the in-process executor";
    }
    return success();
  }
  if (name == kObjectFileAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' is only valid on a builtin.module";
    auto path = dyn_cast<StringAttr>(attr.getValue());
    if (!path)
      return op->emitError() << "'" << name << "' must be a string (the object's path)";
    if (path.empty())
      return op->emitError() << "'" << name << "' must name an object file, not be empty";
    return success();
  }
  if (name == kNonblockingAttrName || name == kBacklineBringupAttrName) {
    bool nonblocking = name == kNonblockingAttrName;
    if (nonblocking ? !isa<LaunchKernelOp>(op) : !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << name << "' is only valid on "
                             << (nonblocking ? "a catalyst.launch_kernel" : "a host function");
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' is a unit attribute and takes no value";
    return success();
  }
  return op->emitError() << "unknown catalyst attribute '" << name << "'; the known ones are "
                         << quotedList(kKnownAttributes);
}

/// Whether a kernel declared on `declared` elements reads `passed` ones as they are: the same
/// type, or integers of one width that differ only in signedness (a host entry on ui8 hands
/// its bytes to a kernel computing on i8, since arith takes signless integers only).
static bool sameElementBytes(Type passed, Type declared) {
  if (passed == declared)
    return true;
  auto p = dyn_cast<IntegerType>(passed), d = dyn_cast<IntegerType>(declared);
  return p && d && p.getWidth() == d.getWidth();
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
    for (Type type : {passed, declared})
      if (auto shaped = dyn_cast<ShapedType>(type); !shaped || !shaped.hasRank()) {
        InFlightDiagnostic diag = emitOpError()
                                  << what << " " << index << " has type " << passed << " and "
                                  << callee << " declares " << declared
                                  << ", but kernels take and return ranked tensors or memrefs";
        if (!shaped)
          diag << "; pass a scalar as a rank-0 tensor, " << RankedTensorType::get({}, type);
        return diag;
      }
    bool compatible = p && d && p.hasRank() && d.hasRank() &&
                      sameElementBytes(p.getElementType(), d.getElementType()) &&
                      p.getRank() == d.getRank();
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

namespace courier::dialect::catalyst {

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

} // namespace courier::dialect::catalyst

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

StringAttr CustomCallOp::getDispatch() {
  if (DictionaryAttr config = getBackendConfigAttr())
    return config.getAs<StringAttr>("dispatch");
  return nullptr;
}

LogicalResult CustomCallOp::verify() {
  if (getCallTargetName().empty())
    return emitOpError("needs a non-empty fn name");
  if (DictionaryAttr config = getBackendConfigAttr())
    if (Attribute dispatch = config.get("dispatch"); dispatch && !isa<StringAttr>(dispatch))
      return emitOpError("backend_config 'dispatch' must be a string: an executor address, or "
                         "\"\" for the program's single executor");
  if (std::optional<int32_t> inputs = getNumberOriginalArg()) {
    if (*inputs < 0 || static_cast<size_t>(*inputs) > getInputs().size())
      return emitOpError("number_original_arg (")
             << *inputs << ") must be between 0 and the operand count (" << getInputs().size()
             << ")";
    if (getNumResults() != 0)
      return emitOpError("has both results and number_original_arg; in the destination-passing "
                         "form the outputs are the operands after number_original_arg");
    if (llvm::any_of(getOperandTypes(), [](Type type) { return isa<TensorType>(type); }))
      return emitOpError("has number_original_arg on tensors; it marks the destination-passing "
                         "form on buffers, and on tensors the outputs are the results");
  }
  bool anyTensor = false, anyMemRef = false;
  for (Type type : llvm::concat<const Type>(getOperandTypes(), getResultTypes())) {
    anyTensor |= isa<TensorType>(type);
    anyMemRef |= isa<BaseMemRefType>(type);
  }
  if (anyTensor && anyMemRef)
    return emitOpError("mixes tensor and memref operands or results");
  if (anyMemRef && getNumResults() != 0)
    return emitOpError("returns buffers; after bufferization the outputs are operands after "
                       "number_original_arg and the op has no results");
  return success();
}

void CustomCallOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  // External code: it may touch anything, and it writes its output buffers.
  effects.emplace_back(MemoryEffects::Read::get());
  effects.emplace_back(MemoryEffects::Write::get());
  size_t inputs = getNumberOriginalArg().value_or(getInputs().size());
  for (auto [index, operand] : llvm::enumerate(getInputsMutable()))
    if (isa<BaseMemRefType>(operand.get().getType())) {
      effects.emplace_back(MemoryEffects::Read::get(), &operand);
      if (index >= inputs)
        effects.emplace_back(MemoryEffects::Write::get(), &operand);
    }
}
