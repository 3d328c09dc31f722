// convert-executor-to-llvm: each executor op becomes a call into the
// __catalyst__executor__* runtime (runtime/ExecutorABI.h).
#include "passes/ExecutorToLLVM.h"
#include "passes/Passes.h"

#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Transforms/DialectConversion.h"
#include "runtime/ExecutorABI.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Path.h"

namespace courier {
#define GEN_PASS_DEF_CONVERTEXECUTORTOLLVM
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// Runtime entry points and their C signatures, in LLVM terms: Catalyst's ExecutorCAPI.h.
/// Kept equal to runtime/ExecutorABI.h by tests/unit/AbiTest.cpp.
enum class Abi { Void, I32, I64, Ptr };
struct RuntimeFunction {
  StringLiteral name;
  Abi result;
  SmallVector<Abi, 11> params;
};
const RuntimeFunction kRuntimeFunctions[] = {
    {"__catalyst__executor__open", Abi::I64, {Abi::Ptr}},
    {"__catalyst__executor__send_binary", Abi::I64, {Abi::I64, Abi::Ptr, Abi::I32}},
    {"__catalyst__executor__launch",
     Abi::Void,
     {Abi::I64, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr,
      Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__launch_async", Abi::I64, {Abi::I64, Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__await", Abi::Void, {Abi::I64}},
    {"__catalyst__executor__call_wrapper",
     Abi::I32,
     {Abi::I64, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__free_result", Abi::Void, {Abi::Ptr}},
    {"__catalyst__executor__close", Abi::I64, {Abi::I64}},
};

/// The runtime functions an executor op's lowering calls.
SmallVector<StringRef, 2> runtimeFunctionsOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, SmallVector<StringRef, 2>>(op)
      .Case([](dialect::executor::OpenOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__open"};
      })
      .Case([](dialect::executor::SendBinaryOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__send_binary"};
      })
      .Case([](dialect::executor::LaunchOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__launch"};
      })
      .Case([](dialect::executor::LaunchAsyncOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__launch_async"};
      })
      .Case([](dialect::executor::AwaitOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__await"};
      })
      .Case([](dialect::executor::CallOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__call_wrapper",
                                         "__catalyst__executor__free_result"};
      })
      .Case([](dialect::executor::CloseOp) {
        return SmallVector<StringRef, 2>{"__catalyst__executor__close"};
      })
      .Default([](Operation *) { return SmallVector<StringRef, 2>{}; });
}

Type abiType(MLIRContext *ctx, Abi abi) {
  switch (abi) {
  case Abi::Void:
    return LLVM::LLVMVoidType::get(ctx);
  case Abi::I32:
    return IntegerType::get(ctx, 32);
  case Abi::I64:
    return IntegerType::get(ctx, 64);
  case Abi::Ptr:
    return LLVM::LLVMPointerType::get(ctx);
  }
  llvm_unreachable("unknown ABI kind");
}

/// `prefix` followed by `name` with every character outside [A-Za-z0-9_] replaced by '_':
/// the global names Catalyst's lowering gives the constants it emits.
std::string globalKey(StringRef prefix, StringRef name) {
  std::string key = prefix.str();
  for (char c : name)
    key.push_back(llvm::isAlnum(c) || c == '_' ? c : '_');
  return key;
}

} // namespace

/// What the patterns share: the runtime declarations and the constant globals, all created
/// before conversion so patterns only reference them.
class ExecutorToLLVMLowering::Context {
public:
  explicit Context(ModuleOp module)
      : module(module), builder(OpBuilder::atBlockBegin(module.getBody())) {}

  llvm::StringMap<LLVM::LLVMFuncOp> functions;
  /// executor.call ops whose inputs are packed on the heap: the stack slots of a function's
  /// calls together stay within kStackPackedBytes.
  llvm::DenseSet<Operation *> heapPacked;

  /// Creates (or finds) the NUL-terminated string constant `key` holding `text`.
  void addString(StringRef key, StringRef text) {
    SmallString<64> bytes(text);
    bytes.push_back('\0');
    auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), bytes.size());
    add(key, type, builder.getStringAttr(bytes));
  }
  /// Creates (or finds) the constant `key` holding `values` as 64-bit integers.
  void addI64Array(StringRef key, ArrayRef<int64_t> values) {
    if (values.empty())
      return;
    auto type = LLVM::LLVMArrayType::get(builder.getI64Type(), values.size());
    auto tensor =
        RankedTensorType::get({static_cast<int64_t>(values.size())}, builder.getI64Type());
    add(key, type, DenseElementsAttr::get(tensor, values));
  }

  /// A pointer to the first element of the string constant created for (`key`, `text`).
  Value string(OpBuilder &at, Location loc, StringRef key, StringRef text) const {
    SmallString<64> bytes(text);
    bytes.push_back('\0');
    return address(at, loc, key, at.getStringAttr(bytes));
  }
  /// A pointer to the array constant created for (`key`, `values`); null when empty.
  Value i64Array(OpBuilder &at, Location loc, StringRef key, ArrayRef<int64_t> values) const {
    if (values.empty())
      return LLVM::ZeroOp::create(at, loc, LLVM::LLVMPointerType::get(at.getContext()));
    auto tensor = RankedTensorType::get({static_cast<int64_t>(values.size())}, at.getI64Type());
    return address(at, loc, key, DenseElementsAttr::get(tensor, values));
  }

  Value callRuntime(OpBuilder &at, Location loc, StringRef name, ValueRange args) const {
    auto call = LLVM::CallOp::create(at, loc, functions.lookup(name), args);
    return call.getNumResults() ? call.getResult() : Value();
  }

private:
  /// A global named `key` (or `key_<n>` when another constant already took that name)
  /// holding `value`; one per distinct (key, value).
  void add(StringRef key, Type type, Attribute value) {
    std::pair<Attribute, Attribute> id{builder.getStringAttr(key), value};
    if (globals.count(id))
      return;
    std::string name = key.str();
    for (unsigned suffix = 1; module.lookupSymbol(name); ++suffix)
      name = key.str() + "_" + std::to_string(suffix);
    globals[id] = LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                                         LLVM::Linkage::Internal, name, value);
  }

  Value address(OpBuilder &at, Location loc, StringRef key, Attribute value) const {
    LLVM::GlobalOp global = globals.lookup({at.getStringAttr(key), value});
    auto ptr = LLVM::LLVMPointerType::get(at.getContext());
    Value base = LLVM::AddressOfOp::create(at, loc, global);
    return LLVM::GEPOp::create(at, loc, ptr, global.getGlobalType(), base,
                               ArrayRef<LLVM::GEPArg>{0, 0}, LLVM::GEPNoWrapFlags::inbounds);
  }

  ModuleOp module;
  OpBuilder builder;
  llvm::DenseMap<std::pair<Attribute, Attribute>, LLVM::GlobalOp> globals;
};

namespace {

using LoweringContext = ExecutorToLLVMLowering::Context;

/// Bytes per element as stored in memory.
FailureOr<int64_t> elementBytes(Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  return failure();
}

constexpr int64_t kExpectedShapeMarker = COURIER_EXPECTED_SHAPE_MARKER;

/// The packed inputs of a function's executor.call ops live in stack slots up to this many
/// bytes in all; the rest on the heap, so neither a big call nor many calls overflow the
/// stack.
constexpr int64_t kStackPackedBytes = 64 * 1024;

/// The names of the constants each op's lowering uses, shared by the walk that creates
/// them and the patterns that reference them.
std::string addressKey(StringRef address) { return globalKey("executor_addr_", address); }
std::string pathKey(StringRef path) {
  return globalKey("executor_path_", llvm::sys::path::stem(path));
}
std::string symbolKey(StringRef callee) { return globalKey("executor_sym_", callee); }
std::string objectKey(StringRef callee) { return globalKey("executor_obj_", callee); }
std::string librarySymbolKey(StringRef symbol) { return globalKey("executor_lib_sym_", symbol); }
std::string arrayKey(StringRef which, StringRef callee) {
  return globalKey(("executor_" + which + "_").str(), callee);
}

/// Ranks and element sizes of a launch's inputs or results.
struct Shapes {
  SmallVector<int64_t> ranks, elemSizes;
};
Shapes shapesOf(TypeRange types) {
  Shapes shapes;
  for (Type type : types) {
    auto memref = cast<MemRefType>(type);
    shapes.ranks.push_back(memref.getRank());
    shapes.elemSizes.push_back(*elementBytes(memref.getElementType()));
  }
  return shapes;
}

/// Whether a launch or call has only contiguous memrefs of integers, floats or index.
bool hasLowerableBuffers(Operation *op) {
  for (Type type : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes())) {
    if (isa<dialect::executor::SessionType>(type))
      continue;
    auto memref = dyn_cast<MemRefType>(type);
    if (!memref || failed(elementBytes(memref.getElementType())))
      return false;
  }
  return true;
}

/// Creates the constants `op`'s lowering references.
void addConstants(Operation *op, LoweringContext &lowering) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](dialect::executor::OpenOp open) {
        lowering.addString(addressKey(open.getAddress()), open.getAddress());
      })
      .Case([&](dialect::executor::SendBinaryOp send) {
        lowering.addString(pathKey(send.getPath()), send.getPath());
      })
      .Case([&](dialect::executor::LaunchOp launch) {
        lowering.addString(symbolKey(launch.getCallee()),
                           dialect::executor::entrySymbol(launch.getCallee()));
        lowering.addString(objectKey(launch.getCallee()), launch.getObject());
        if (!hasLowerableBuffers(launch))
          return;
        Shapes in = shapesOf(launch.getInputs().getTypes());
        Shapes out = shapesOf(launch.getResultTypes());
        lowering.addI64Array(arrayKey("in_ranks", launch.getCallee()), in.ranks);
        lowering.addI64Array(arrayKey("in_sizes", launch.getCallee()), in.elemSizes);
        lowering.addI64Array(arrayKey("out_ranks", launch.getCallee()), out.ranks);
        lowering.addI64Array(arrayKey("out_sizes", launch.getCallee()), out.elemSizes);
      })
      .Case([&](dialect::executor::LaunchAsyncOp launch) {
        lowering.addString(symbolKey(launch.getCallee()),
                           dialect::executor::entrySymbol(launch.getCallee()));
        lowering.addString(objectKey(launch.getCallee()), launch.getObject());
      })
      .Case([&](dialect::executor::CallOp call) {
        lowering.addString(librarySymbolKey(call.getCallee()), call.getCallee());
      });
}

/// A stack slot of `type` in the entry block of the enclosing function, so launches in
/// loops do not grow the stack.
Value entryAlloca(ConversionPatternRewriter &rewriter, Operation *op, Type type) {
  OpBuilder::InsertionGuard guard(rewriter);
  Region *body = &op->getParentOfType<FunctionOpInterface>().getFunctionBody();
  rewriter.setInsertionPointToStart(&body->front());
  Location loc = op->getLoc();
  Value one = LLVM::ConstantOp::create(rewriter, loc, rewriter.getI64Type(), 1);
  return LLVM::AllocaOp::create(rewriter, loc, LLVM::LLVMPointerType::get(op->getContext()), type,
                                one);
}

template <typename Op> struct ExecutorPattern : ConvertOpToLLVMPattern<Op> {
  ExecutorPattern(const LLVMTypeConverter &converter, const LoweringContext &lowering)
      : ConvertOpToLLVMPattern<Op>(converter), lowering(lowering) {}
  const LoweringContext &lowering;

  Value i64(OpBuilder &builder, Location loc, int64_t value) const {
    return LLVM::ConstantOp::create(builder, loc, builder.getI64Type(), value);
  }
};

struct OpenLowering : ExecutorPattern<dialect::executor::OpenOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(dialect::executor::OpenOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value address =
        lowering.string(rewriter, op.getLoc(), addressKey(op.getAddress()), op.getAddress());
    rewriter.replaceOp(
        op, lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__open", address));
    return success();
  }
};

struct SendBinaryLowering : ExecutorPattern<dialect::executor::SendBinaryOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(dialect::executor::SendBinaryOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value format = LLVM::ConstantOp::create(rewriter, loc, rewriter.getI32Type(), op.getFormat());
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__send_binary",
                         {adaptor.getSession(),
                          lowering.string(rewriter, loc, pathKey(op.getPath()), op.getPath()),
                          format});
    rewriter.eraseOp(op);
    return success();
  }
};

/// Builds `!llvm.array<N x ptr>` of `pointers` with insertvalue and stores it into a stack
/// slot; null when there are none.
Value pointerArray(ConversionPatternRewriter &rewriter, Operation *op, ArrayRef<Value> pointers) {
  Location loc = op->getLoc();
  auto ptr = LLVM::LLVMPointerType::get(op->getContext());
  if (pointers.empty())
    return LLVM::ZeroOp::create(rewriter, loc, ptr);
  auto arrayType = LLVM::LLVMArrayType::get(ptr, pointers.size());
  Value slot = entryAlloca(rewriter, op, arrayType);
  Value array = LLVM::UndefOp::create(rewriter, loc, arrayType);
  for (auto [index, pointer] : llvm::enumerate(pointers))
    array = LLVM::InsertValueOp::create(rewriter, loc, array, pointer,
                                        ArrayRef<int64_t>{static_cast<int64_t>(index)});
  LLVM::StoreOp::create(rewriter, loc, array, slot);
  return slot;
}

struct LaunchLowering : ExecutorPattern<dialect::executor::LaunchOp> {
  using ExecutorPattern::ExecutorPattern;

  LogicalResult matchAndRewrite(dialect::executor::LaunchOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (!hasLowerableBuffers(op))
      return rewriter.notifyMatchFailure(
          op, "operands and results must be memrefs of integers, floats or index; run "
              "one-shot bufferize first");
    Location loc = op.getLoc();
    auto ptr = LLVM::LLVMPointerType::get(op.getContext());
    // Inputs: the converted descriptors, each stored in its own slot.
    SmallVector<Value> inputSlots;
    for (Value value : adaptor.getInputs()) {
      Value slot = entryAlloca(rewriter, op, value.getType());
      LLVM::StoreOp::create(rewriter, loc, value, slot);
      inputSlots.push_back(slot);
    }
    // Results: descriptors carrying the marker and the static shape (-1 where dynamic) the
    // reply must have.
    SmallVector<Value> resultSlots;
    SmallVector<Type> resultStructs;
    for (Type type : op.getResultTypes()) {
      auto memref = cast<MemRefType>(type);
      Type structType = getTypeConverter()->convertType(memref);
      auto desc = MemRefDescriptor::poison(rewriter, loc, structType);
      desc.setAllocatedPtr(rewriter, loc, LLVM::ZeroOp::create(rewriter, loc, ptr));
      desc.setAlignedPtr(
          rewriter, loc,
          LLVM::IntToPtrOp::create(rewriter, loc, ptr, i64(rewriter, loc, kExpectedShapeMarker)));
      desc.setOffset(rewriter, loc, i64(rewriter, loc, 0));
      for (auto [dim, size] : llvm::enumerate(memref.getShape()))
        desc.setSize(rewriter, loc, dim,
                     i64(rewriter, loc, ShapedType::isDynamic(size) ? -1 : size));
      Value slot = entryAlloca(rewriter, op, structType);
      LLVM::StoreOp::create(rewriter, loc, desc, slot);
      resultSlots.push_back(slot);
      resultStructs.push_back(structType);
    }
    StringRef callee = op.getCallee();
    Shapes in = shapesOf(op.getInputs().getTypes());
    Shapes out = shapesOf(op.getResultTypes());
    Value inDescs = pointerArray(rewriter, op, inputSlots);
    Value outDescs = pointerArray(rewriter, op, resultSlots);
    lowering.callRuntime(
        rewriter, loc, "__catalyst__executor__launch",
        {adaptor.getSession(),
         lowering.string(rewriter, loc, symbolKey(callee), dialect::executor::entrySymbol(callee)),
         lowering.string(rewriter, loc, objectKey(callee), op.getObject()),
         i64(rewriter, loc, static_cast<int64_t>(inputSlots.size())), inDescs,
         lowering.i64Array(rewriter, loc, arrayKey("in_ranks", callee), in.ranks),
         lowering.i64Array(rewriter, loc, arrayKey("in_sizes", callee), in.elemSizes),
         i64(rewriter, loc, static_cast<int64_t>(resultSlots.size())), outDescs,
         lowering.i64Array(rewriter, loc, arrayKey("out_ranks", callee), out.ranks),
         lowering.i64Array(rewriter, loc, arrayKey("out_sizes", callee), out.elemSizes)});

    SmallVector<Value> results;
    for (auto [slot, structType] : llvm::zip(resultSlots, resultStructs))
      results.push_back(LLVM::LoadOp::create(rewriter, loc, structType, slot));
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct LaunchAsyncLowering : ExecutorPattern<dialect::executor::LaunchAsyncOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(dialect::executor::LaunchAsyncOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    StringRef callee = op.getCallee();
    rewriter.replaceOp(
        op,
        lowering.callRuntime(rewriter, loc, "__catalyst__executor__launch_async",
                             {adaptor.getSession(),
                              lowering.string(rewriter, loc, symbolKey(callee),
                                              dialect::executor::entrySymbol(callee)),
                              lowering.string(rewriter, loc, objectKey(callee), op.getObject())}));
    return success();
  }
};

struct AwaitLowering : ExecutorPattern<dialect::executor::AwaitOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(dialect::executor::AwaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__await", adaptor.getToken());
    rewriter.eraseOp(op);
    return success();
  }
};

struct CloseLowering : ExecutorPattern<dialect::executor::CloseOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(dialect::executor::CloseOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__close",
                         adaptor.getSession());
    rewriter.eraseOp(op);
    return success();
  }
};

/// executor.call in destination-passing form: pack the inputs into one buffer, call, copy
/// the reply into the output buffers, release the reply.
struct CallLowering : ExecutorPattern<dialect::executor::CallOp> {
  using ExecutorPattern::ExecutorPattern;
  /// One operand's place in the packed buffer: its data, at `offset`, `bytes` long.
  struct Piece {
    Value data;
    int64_t offset, bytes;
  };

  /// The operands `values` (converted: `converted`) packed one after another; `total` their
  /// bytes. Fails for an operand of elements with no byte size.
  FailureOr<SmallVector<Piece>> layout(ValueRange values, ValueRange converted, int64_t &total,
                                       ConversionPatternRewriter &rewriter, Location loc) const {
    SmallVector<Piece> pieces;
    total = 0;
    for (auto [value, desc] : llvm::zip(values, converted)) {
      auto memref = cast<MemRefType>(value.getType());
      FailureOr<int64_t> elem = elementBytes(memref.getElementType());
      if (failed(elem))
        return failure();
      int64_t bytes = memref.getNumElements() * *elem;
      pieces.push_back(
          {MemRefDescriptor(desc).bufferPtr(rewriter, loc, *getTypeConverter(), memref), total,
           bytes});
      total += bytes;
    }
    return pieces;
  }

  LogicalResult matchAndRewrite(dialect::executor::CallOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (op.getNumResults() != 0)
      return rewriter.notifyMatchFailure(op, "has tensor results; run one-shot bufferize first");
    Location loc = op.getLoc();
    auto ptr = LLVM::LLVMPointerType::get(op.getContext());
    auto i8 = rewriter.getI8Type();
    unsigned numInputs = op.getInputCount();
    int64_t inBytes = 0, outBytes = 0;
    FailureOr<SmallVector<Piece>> inputs =
        layout(op.getArgs().take_front(numInputs), adaptor.getArgs().take_front(numInputs), inBytes,
               rewriter, loc);
    FailureOr<SmallVector<Piece>> outputs =
        layout(op.getArgs().drop_front(numInputs), adaptor.getArgs().drop_front(numInputs),
               outBytes, rewriter, loc);
    if (failed(inputs) || failed(outputs))
      return rewriter.notifyMatchFailure(op, "operands must be memrefs of integers or floats");

    // Byte offsets are 64-bit values: packed layouts may exceed what a constant GEP index
    // (32 bits) holds.
    auto at = [&](Value base, int64_t offset) {
      return LLVM::GEPOp::create(rewriter, loc, ptr, i8, base,
                                 ArrayRef<LLVM::GEPArg>{i64(rewriter, loc, offset)});
    };
    Value packed;
    FailureOr<LLVM::LLVMFuncOp> freeFn;
    if (!lowering.heapPacked.contains(op)) {
      packed =
          entryAlloca(rewriter, op, LLVM::LLVMArrayType::get(i8, std::max<int64_t>(inBytes, 1)));
    } else {
      auto module = op->getParentOfType<ModuleOp>();
      FailureOr<LLVM::LLVMFuncOp> mallocFn =
          LLVM::lookupOrCreateMallocFn(rewriter, module, rewriter.getI64Type());
      freeFn = LLVM::lookupOrCreateFreeFn(rewriter, module);
      if (failed(mallocFn) || failed(freeFn))
        return rewriter.notifyMatchFailure(op, "malloc/free are declared with other signatures");
      packed =
          LLVM::CallOp::create(rewriter, loc, *mallocFn, i64(rewriter, loc, inBytes)).getResult();
    }
    for (const Piece &piece : *inputs)
      LLVM::MemcpyOp::create(rewriter, loc, at(packed, piece.offset), piece.data,
                             i64(rewriter, loc, piece.bytes), /*isVolatile=*/false);
    // The reply slot carries the marker saying the size slot holds the expected reply size.
    Value replySlot = entryAlloca(rewriter, op, ptr);
    Value sizeSlot = entryAlloca(rewriter, op, rewriter.getI64Type());
    LLVM::StoreOp::create(
        rewriter, loc,
        LLVM::IntToPtrOp::create(rewriter, loc, ptr, i64(rewriter, loc, kExpectedShapeMarker)),
        replySlot);
    LLVM::StoreOp::create(rewriter, loc, i64(rewriter, loc, outBytes), sizeSlot);
    lowering.callRuntime(
        rewriter, loc, "__catalyst__executor__call_wrapper",
        {adaptor.getSession(),
         lowering.string(rewriter, loc, librarySymbolKey(op.getCallee()), op.getCallee()), packed,
         i64(rewriter, loc, inBytes), replySlot, sizeSlot});
    Value reply = LLVM::LoadOp::create(rewriter, loc, ptr, replySlot);
    for (const Piece &piece : *outputs)
      LLVM::MemcpyOp::create(rewriter, loc, piece.data, at(reply, piece.offset),
                             i64(rewriter, loc, piece.bytes), /*isVolatile=*/false);
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__free_result", reply);
    if (succeeded(freeFn) && *freeFn)
      LLVM::CallOp::create(rewriter, loc, *freeFn, packed);
    rewriter.eraseOp(op);
    return success();
  }
};

/// The runtime's C ABI as LLVM function types, by name; an error on a declaration in
/// `module` with another signature (whether or not it is called here).
FailureOr<llvm::StringMap<LLVM::LLVMFunctionType>> runtimeSignatures(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  llvm::StringMap<LLVM::LLVMFunctionType> abi;
  for (const RuntimeFunction &fn : kRuntimeFunctions) {
    SmallVector<Type> params =
        llvm::map_to_vector(fn.params, [&](Abi kind) { return abiType(ctx, kind); });
    abi[fn.name] = LLVM::LLVMFunctionType::get(abiType(ctx, fn.result), params);
    if (auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(fn.name);
        existing && existing.getFunctionType() != abi[fn.name]) {
      existing.emitError("'") << fn.name << "' is declared as " << existing.getFunctionType()
                              << " but the executor runtime defines it as " << abi[fn.name];
      return failure();
    }
  }
  return abi;
}

/// A library call left unlowered: a dispatched one is outside what `pass` lowers (calls in
/// functions of the host module); one without `dispatchSpelling` is an in-process call.
LogicalResult refuseLibraryCall(Operation *op, bool dispatched, StringRef pass,
                                StringRef dispatchSpelling) {
  if (dispatched)
    return op->emitOpError("is dispatched but was not lowered: ")
           << pass << " handles calls in functions of the host module only";
  return op->emitOpError("without ")
         << dispatchSpelling
         << " (an in-process library call) is not supported; add dispatch = \"local\" to run "
            "it on the in-process executor, whose plugins provide the symbol";
}

/// A Catalyst op left at this point has no lowering: says what would give it one.
LogicalResult checkNoCatalystLeft(Operation *op) {
  if (auto call = dyn_cast<dialect::catalyst::RuntimeCallOp>(op))
    return refuseLibraryCall(call, bool(call.getDispatch()), "lower-runtime-dispatch",
                             "a dispatch attribute");
  if (auto call = dyn_cast<dialect::catalyst::CustomCallOp>(op))
    return refuseLibraryCall(call, bool(call.getDispatch()), "dispatch-executor-targets",
                             "backend_config = {dispatch = ...}");
  if (auto launch = dyn_cast<dialect::catalyst::LaunchKernelOp>(op))
    return launch.emitOpError("targets module '")
           << launch.getCallee().getRootReference().getValue()
           << "', which is not a dispatched target module; give it a catalyst.target "
              "attribute so it is compiled and shipped";
  return success();
}

/// What an executor op must be before it is converted: in a function of `module`,
/// bufferized, and (launch, call) with element types an executor takes.
LogicalResult checkConvertible(Operation *op, ModuleOp module) {
  // Runtime declarations and constants live in this module; stack slots need a function.
  if (op->getParentOfType<ModuleOp>() != module || !op->getParentOfType<FunctionOpInterface>())
    return op->emitOpError("must be inside a function of the module being converted");
  for (Type type : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
    if (isa<TensorType>(type))
      return op->emitOpError("has tensor operands or results; run one-shot bufferize before "
                             "convert-executor-to-llvm");
  if (isa<dialect::executor::LaunchOp, dialect::executor::CallOp>(op))
    for (Type type : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
      if (auto memref = dyn_cast<MemRefType>(type);
          memref && failed(elementBytes(memref.getElementType())))
        return op->emitOpError("has elements of type ")
               << memref.getElementType() << "; executors take integers, floats and index";
  return success();
}

/// Packs `call`'s inputs on its function's stack while that function's calls fit in
/// kStackPackedBytes together (`used`, by function), else on the heap.
void placePackedInputs(dialect::executor::CallOp call, llvm::DenseMap<Operation *, int64_t> &used,
                       LoweringContext &lowering) {
  int64_t bytes = 0;
  for (Value input : call.getInputs()) {
    auto memref = cast<MemRefType>(input.getType());
    bytes += memref.getNumElements() * *elementBytes(memref.getElementType());
  }
  int64_t &total = used[call->getParentOfType<FunctionOpInterface>()];
  if (total + std::max<int64_t>(bytes, 1) <= kStackPackedBytes)
    total += std::max<int64_t>(bytes, 1);
  else
    lowering.heapPacked.insert(call);
}

struct ConvertExecutorToLLVM : impl::ConvertExecutorToLLVMBase<ConvertExecutorToLLVM> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<ExecutorToLLVMLowering> lowering = ExecutorToLLVMLowering::prepare(module);
    if (failed(lowering))
      return signalPassFailure();
    if (!lowering->hasExecutorOps())
      return;
    LLVMTypeConverter converter(&getContext());
    populateExecutorToLLVMTypeConversions(converter);
    RewritePatternSet patterns(&getContext());
    populateExecutorToLLVMConversionPatterns(converter, *lowering, patterns);
    ConversionTarget target(getContext());
    configureExecutorToLLVMConversionLegality(target);
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

FailureOr<ExecutorToLLVMLowering> ExecutorToLLVMLowering::prepare(ModuleOp module) {
  // Loaded already in a pass (its dependent dialect); outside one, before any thread runs.
  module.getContext()->getOrLoadDialect<LLVM::LLVMDialect>();
  FailureOr<llvm::StringMap<LLVM::LLVMFunctionType>> abi = runtimeSignatures(module);
  if (failed(abi))
    return failure();
  // Checks every op first, and notes what the conversion needs: runtime functions,
  // constants, where each call packs its inputs.
  auto lowering = std::make_unique<Context>(module);
  SetVector<StringRef> needed;
  llvm::DenseMap<Operation *, int64_t> stackPacked;
  WalkResult walk = module.walk([&](Operation *op) {
    if (failed(checkNoCatalystLeft(op)))
      return WalkResult::interrupt();
    if (!isa<dialect::executor::ExecutorDialect>(op->getDialect()))
      return WalkResult::advance();
    if (failed(checkConvertible(op, module)))
      return WalkResult::interrupt();
    if (auto call = dyn_cast<dialect::executor::CallOp>(op))
      placePackedInputs(call, stackPacked, *lowering);
    for (StringRef name : runtimeFunctionsOf(op))
      needed.insert(name);
    addConstants(op, *lowering);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Only the functions this module calls are declared.
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  for (StringRef name : needed) {
    auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
    lowering->functions[name] =
        existing ? existing
                 : LLVM::LLVMFuncOp::create(builder, module.getLoc(), name, abi->lookup(name));
  }
  return ExecutorToLLVMLowering(std::move(lowering));
}

ExecutorToLLVMLowering::ExecutorToLLVMLowering(std::unique_ptr<Context> impl)
    : impl(std::move(impl)) {}
ExecutorToLLVMLowering::ExecutorToLLVMLowering(ExecutorToLLVMLowering &&) noexcept = default;
ExecutorToLLVMLowering &
ExecutorToLLVMLowering::operator=(ExecutorToLLVMLowering &&) noexcept = default;
ExecutorToLLVMLowering::~ExecutorToLLVMLowering() = default;

bool ExecutorToLLVMLowering::hasExecutorOps() const { return !impl->functions.empty(); }

void populateExecutorToLLVMTypeConversions(LLVMTypeConverter &converter) {
  converter.addConversion(
      [](dialect::executor::SessionType type) { return IntegerType::get(type.getContext(), 64); });
  converter.addConversion(
      [](dialect::executor::TokenType type) { return IntegerType::get(type.getContext(), 64); });
}

void populateExecutorToLLVMConversionPatterns(const LLVMTypeConverter &converter,
                                              const ExecutorToLLVMLowering &lowering,
                                              RewritePatternSet &patterns) {
  patterns.add<OpenLowering, SendBinaryLowering, LaunchLowering, LaunchAsyncLowering, AwaitLowering,
               CallLowering, CloseLowering>(converter, lowering.context());
}

void configureExecutorToLLVMConversionLegality(ConversionTarget &target) {
  target.addLegalDialect<LLVM::LLVMDialect>();
  target.addIllegalDialect<dialect::executor::ExecutorDialect>();
}

} // namespace courier
