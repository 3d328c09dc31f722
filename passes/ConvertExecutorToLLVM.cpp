// convert-executor-to-llvm: each executor op becomes a call into the
// __catalyst__executor__* runtime (runtime/ExecutorABI.h).
#include "passes/Passes.h"

#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"

#include <deque>

namespace courier {
#define GEN_PASS_DEF_CONVERTEXECUTORTOLLVM
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// Runtime entry points and their C signatures, in LLVM terms. Kept equal to
/// runtime/ExecutorABI.h by tests/unit/AbiTest.cpp.
enum class Abi { Void, I32, I64, Ptr };
struct RuntimeFunction {
  StringLiteral name;
  Abi result;
  SmallVector<Abi, 11> params;
};
const RuntimeFunction kRuntimeFunctions[] = {
    {"__catalyst__executor__open", Abi::I64, {Abi::Ptr}},
    {"__catalyst__executor__send_binary", Abi::I32, {Abi::I64, Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__launch",
     Abi::I32,
     {Abi::I64, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr,
      Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__launch_async", Abi::I64, {Abi::I64, Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__await", Abi::I32, {Abi::I64}},
    {"__catalyst__executor__call_wrapper",
     Abi::I32,
     {Abi::I64, Abi::Ptr, Abi::Ptr, Abi::I64, Abi::Ptr, Abi::Ptr}},
    {"__catalyst__executor__free_result", Abi::Void, {Abi::Ptr}},
    {"__catalyst__executor__close", Abi::I32, {Abi::I64}},
};

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

/// What the patterns share: the runtime declarations and the string constants, both
/// created before conversion so patterns only reference them.
struct LoweringContext {
  llvm::StringMap<LLVM::LLVMFuncOp> functions;
  llvm::StringMap<LLVM::GlobalOp> strings;

  Value string(OpBuilder &builder, Location loc, StringRef text) const {
    return LLVM::AddressOfOp::create(builder, loc, strings.lookup(text));
  }

  Value callRuntime(OpBuilder &builder, Location loc, StringRef name, ValueRange args) const {
    auto call = LLVM::CallOp::create(builder, loc, functions.lookup(name), args);
    return call.getNumResults() ? call.getResult() : Value();
  }
};

/// Bytes per element as stored in memory.
FailureOr<int64_t> elementBytes(Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  return failure();
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

struct OpenLowering : ExecutorPattern<executor::OpenOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::OpenOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value address = lowering.string(rewriter, op.getLoc(), op.getAddress());
    rewriter.replaceOp(
        op, lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__open", address));
    return success();
  }
};

struct SendBinaryLowering : ExecutorPattern<executor::SendBinaryOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::SendBinaryOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__send_binary",
                         {adaptor.getSession(), lowering.string(rewriter, loc, op.getPath()),
                          lowering.string(rewriter, loc, op.getFormat())});
    rewriter.eraseOp(op);
    return success();
  }
};

/// Arrays the launch ABI takes: descriptor pointers, ranks and element sizes.
struct DescriptorArrays {
  Value descs, ranks, elemSizes;
};

struct LaunchLowering : ExecutorPattern<executor::LaunchOp> {
  using ExecutorPattern::ExecutorPattern;

  LogicalResult matchAndRewrite(executor::LaunchOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    for (Type type : llvm::concat<const Type>(op.getInputs().getTypes(), op.getResultTypes()))
      if (!isa<MemRefType>(type) || failed(elementBytes(cast<MemRefType>(type).getElementType())))
        return rewriter.notifyMatchFailure(
            op, "operands and results must be memrefs of integers, floats or index; run "
                "one-shot bufferize first");
    Location loc = op.getLoc();
    // Inputs: the converted descriptors, each stored in its own slot.
    SmallVector<Value> inputSlots;
    for (auto [value, type] : llvm::zip(adaptor.getInputs(), op.getInputs().getTypes())) {
      Value slot = entryAlloca(rewriter, op, value.getType());
      LLVM::StoreOp::create(rewriter, loc, value, slot);
      inputSlots.push_back(slot);
    }
    // Results: descriptors pre-filled with the static shape (-1 where dynamic).
    SmallVector<Value> resultSlots;
    SmallVector<Type> resultStructs;
    for (Type type : op.getResultTypes()) {
      auto memref = cast<MemRefType>(type);
      Type structType = getTypeConverter()->convertType(memref);
      auto desc = MemRefDescriptor::poison(rewriter, loc, structType);
      for (auto [dim, size] : llvm::enumerate(memref.getShape()))
        desc.setSize(rewriter, loc, dim,
                     i64(rewriter, loc, ShapedType::isDynamic(size) ? -1 : size));
      Value slot = entryAlloca(rewriter, op, structType);
      LLVM::StoreOp::create(rewriter, loc, desc, slot);
      resultSlots.push_back(slot);
      resultStructs.push_back(structType);
    }
    DescriptorArrays in = arrays(rewriter, op, inputSlots, op.getInputs().getTypes());
    DescriptorArrays out = arrays(rewriter, op, resultSlots, op.getResultTypes());

    std::string entry = executor::entrySymbol(op.getCallee());
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__launch",
                         {adaptor.getSession(), lowering.string(rewriter, loc, entry),
                          lowering.string(rewriter, loc, op.getObject()),
                          i64(rewriter, loc, static_cast<int64_t>(inputSlots.size())), in.descs,
                          in.ranks, in.elemSizes,
                          i64(rewriter, loc, static_cast<int64_t>(resultSlots.size())), out.descs,
                          out.ranks, out.elemSizes});

    SmallVector<Value> results;
    for (auto [slot, structType] : llvm::zip(resultSlots, resultStructs))
      results.push_back(LLVM::LoadOp::create(rewriter, loc, structType, slot));
    rewriter.replaceOp(op, results);
    return success();
  }

  /// Fills the three ABI arrays for `slots`; null pointers when there are none.
  DescriptorArrays arrays(ConversionPatternRewriter &rewriter, Operation *op, ArrayRef<Value> slots,
                          TypeRange types) const {
    Location loc = op->getLoc();
    auto ptr = LLVM::LLVMPointerType::get(op->getContext());
    if (slots.empty()) {
      Value null = LLVM::ZeroOp::create(rewriter, loc, ptr);
      return {null, null, null};
    }
    int64_t n = slots.size();
    auto ptrArray = LLVM::LLVMArrayType::get(ptr, n);
    auto i64Array = LLVM::LLVMArrayType::get(rewriter.getI64Type(), n);
    DescriptorArrays result{entryAlloca(rewriter, op, ptrArray),
                            entryAlloca(rewriter, op, i64Array),
                            entryAlloca(rewriter, op, i64Array)};
    for (auto [position, slot, type] : llvm::enumerate(slots, types)) {
      auto memref = cast<MemRefType>(type);
      auto index = static_cast<int32_t>(position);
      auto at = [&](Value base, Type arrayType) {
        return LLVM::GEPOp::create(rewriter, loc, ptr, arrayType, base,
                                   ArrayRef<LLVM::GEPArg>{0, index});
      };
      LLVM::StoreOp::create(rewriter, loc, slot, at(result.descs, ptrArray));
      LLVM::StoreOp::create(rewriter, loc, i64(rewriter, loc, memref.getRank()),
                            at(result.ranks, i64Array));
      LLVM::StoreOp::create(rewriter, loc,
                            i64(rewriter, loc, *elementBytes(memref.getElementType())),
                            at(result.elemSizes, i64Array));
    }
    return result;
  }
};

struct LaunchAsyncLowering : ExecutorPattern<executor::LaunchAsyncOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::LaunchAsyncOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    std::string entry = executor::entrySymbol(op.getCallee());
    rewriter.replaceOp(
        op, lowering.callRuntime(rewriter, loc, "__catalyst__executor__launch_async",
                                 {adaptor.getSession(), lowering.string(rewriter, loc, entry),
                                  lowering.string(rewriter, loc, op.getObject())}));
    return success();
  }
};

struct AwaitLowering : ExecutorPattern<executor::AwaitOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::AwaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__await", adaptor.getToken());
    rewriter.eraseOp(op);
    return success();
  }
};

struct CloseLowering : ExecutorPattern<executor::CloseOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::CloseOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    lowering.callRuntime(rewriter, op.getLoc(), "__catalyst__executor__close",
                         adaptor.getSession());
    rewriter.eraseOp(op);
    return success();
  }
};

/// executor.call in destination-passing form: pack the inputs into one heap buffer, call,
/// copy the reply into the output buffers, release both buffers.
struct CallLowering : ExecutorPattern<executor::CallOp> {
  using ExecutorPattern::ExecutorPattern;
  LogicalResult matchAndRewrite(executor::CallOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (op.getNumResults() != 0)
      return rewriter.notifyMatchFailure(op, "has tensor results; run one-shot bufferize first");
    Location loc = op.getLoc();
    auto ptr = LLVM::LLVMPointerType::get(op.getContext());
    auto i8 = rewriter.getI8Type();

    struct Piece {
      Value data;
      int64_t offset, bytes;
    };
    auto layout = [&](ValueRange values, ValueRange converted,
                      int64_t &total) -> FailureOr<SmallVector<Piece>> {
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
    };
    unsigned numInputs = op.getNumInputArgs();
    int64_t inBytes = 0, outBytes = 0;
    FailureOr<SmallVector<Piece>> inputs = layout(op.getArgs().take_front(numInputs),
                                                  adaptor.getArgs().take_front(numInputs), inBytes);
    FailureOr<SmallVector<Piece>> outputs = layout(
        op.getArgs().drop_front(numInputs), adaptor.getArgs().drop_front(numInputs), outBytes);
    if (failed(inputs) || failed(outputs))
      return rewriter.notifyMatchFailure(op, "operands must be memrefs of integers or floats");

    auto module = op->getParentOfType<ModuleOp>();
    FailureOr<LLVM::LLVMFuncOp> mallocFn =
        LLVM::lookupOrCreateMallocFn(rewriter, module, rewriter.getI64Type());
    FailureOr<LLVM::LLVMFuncOp> freeFn = LLVM::lookupOrCreateFreeFn(rewriter, module);
    if (failed(mallocFn) || failed(freeFn))
      return rewriter.notifyMatchFailure(op, "malloc/free are declared with other signatures");

    // Byte offsets are 64-bit values: packed layouts may exceed what a constant GEP index
    // (32 bits) holds.
    auto at = [&](Value base, int64_t offset) {
      return LLVM::GEPOp::create(rewriter, loc, ptr, i8, base,
                                 ArrayRef<LLVM::GEPArg>{i64(rewriter, loc, offset)});
    };
    Value packed = inputs->empty()
                       ? LLVM::ZeroOp::create(rewriter, loc, ptr).getResult()
                       : LLVM::CallOp::create(rewriter, loc, *mallocFn, i64(rewriter, loc, inBytes))
                             .getResult();
    for (const Piece &piece : *inputs) {
      Value dst = at(packed, piece.offset);
      LLVM::MemcpyOp::create(rewriter, loc, dst, piece.data, i64(rewriter, loc, piece.bytes),
                             /*isVolatile=*/false);
    }
    Value replySlot = entryAlloca(rewriter, op, ptr);
    Value sizeSlot = entryAlloca(rewriter, op, rewriter.getI64Type());
    LLVM::StoreOp::create(rewriter, loc, i64(rewriter, loc, outBytes), sizeSlot);
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__call_wrapper",
                         {adaptor.getSession(), lowering.string(rewriter, loc, op.getCallee()),
                          packed, i64(rewriter, loc, inBytes), replySlot, sizeSlot});
    Value reply = LLVM::LoadOp::create(rewriter, loc, ptr, replySlot);
    for (const Piece &piece : *outputs) {
      Value src = at(reply, piece.offset);
      LLVM::MemcpyOp::create(rewriter, loc, piece.data, src, i64(rewriter, loc, piece.bytes),
                             /*isVolatile=*/false);
    }
    lowering.callRuntime(rewriter, loc, "__catalyst__executor__free_result", reply);
    if (!inputs->empty())
      LLVM::CallOp::create(rewriter, loc, *freeFn, packed);
    rewriter.eraseOp(op);
    return success();
  }
};

struct ConvertExecutorToLLVM : impl::ConvertExecutorToLLVMBase<ConvertExecutorToLLVM> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // A deque keeps the entry names' storage stable while `texts` refers to it.
    std::deque<std::string> entries;
    SetVector<StringRef> texts;
    bool any = false;
    WalkResult walk = module.walk([&](Operation *op) {
      // Catalyst ops that reach this point have no lowering; say what would give them one.
      if (auto call = dyn_cast<catalyst::RuntimeCallOp>(op)) {
        if (call.getDispatch())
          call.emitOpError("is dispatched but was not lowered: lower-runtime-dispatch handles "
                           "calls in functions of the host module only");
        else
          call.emitOpError("without a dispatch attribute (an in-process library call) is not "
                           "supported; add dispatch = \"local\" to run it on the in-process "
                           "executor, whose plugins provide the symbol");
        return WalkResult::interrupt();
      }
      if (auto launch = dyn_cast<catalyst::LaunchKernelOp>(op)) {
        launch.emitOpError("targets module '")
            << launch.getCallee().getRootReference().getValue()
            << "', which is not a dispatched target module; give it a catalyst.target "
               "attribute so it is compiled and shipped";
        return WalkResult::interrupt();
      }
      if (!isa<executor::ExecutorDialect>(op->getDialect()))
        return WalkResult::advance();
      any = true;
      // Runtime declarations and strings live in this module; stack slots need a function.
      if (op->getParentOfType<ModuleOp>() != module ||
          !op->getParentOfType<FunctionOpInterface>()) {
        op->emitOpError("must be inside a function of the module being converted");
        return WalkResult::interrupt();
      }
      for (Type type : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
        if (isa<TensorType>(type)) {
          op->emitOpError("has tensor operands or results; run one-shot bufferize before "
                          "convert-executor-to-llvm");
          return WalkResult::interrupt();
        }
      if (auto open = dyn_cast<executor::OpenOp>(op))
        texts.insert(open.getAddress());
      if (auto send = dyn_cast<executor::SendBinaryOp>(op)) {
        texts.insert(send.getPath());
        texts.insert(send.getFormat());
      }
      if (isa<executor::LaunchOp, executor::LaunchAsyncOp>(op)) {
        texts.insert(entries.emplace_back(
            executor::entrySymbol(op->getAttrOfType<StringAttr>("callee").getValue())));
        texts.insert(op->getAttrOfType<StringAttr>("object").getValue());
      }
      if (auto call = dyn_cast<executor::CallOp>(op))
        texts.insert(call.getCallee());
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    if (!any)
      return;

    LoweringContext lowering;
    OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
    for (const RuntimeFunction &fn : kRuntimeFunctions) {
      SmallVector<Type> params =
          llvm::map_to_vector(fn.params, [&](Abi abi) { return abiType(ctx, abi); });
      auto type = LLVM::LLVMFunctionType::get(abiType(ctx, fn.result), params);
      if (auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(fn.name)) {
        if (existing.getFunctionType() != type) {
          existing.emitError("'") << fn.name << "' is declared as " << existing.getFunctionType()
                                  << " but the executor runtime defines it as " << type;
          return signalPassFailure();
        }
        lowering.functions[fn.name] = existing;
        continue;
      }
      lowering.functions[fn.name] =
          LLVM::LLVMFuncOp::create(builder, module.getLoc(), fn.name, type);
    }
    for (auto [index, text] : llvm::enumerate(texts)) {
      SmallString<32> bytes(text);
      bytes.push_back('\0');
      auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), bytes.size());
      std::string name = "__courier_str_" + std::to_string(index);
      for (unsigned suffix = 0; module.lookupSymbol(name); ++suffix)
        name = "__courier_str_" + std::to_string(index) + "_" + std::to_string(suffix);
      lowering.strings[text] =
          LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                                 LLVM::Linkage::Internal, name, builder.getStringAttr(bytes));
    }

    LLVMTypeConverter converter(ctx);
    converter.addConversion(
        [](executor::SessionType type) { return IntegerType::get(type.getContext(), 64); });
    converter.addConversion(
        [](executor::TokenType type) { return IntegerType::get(type.getContext(), 64); });
    RewritePatternSet patterns(ctx);
    patterns.add<OpenLowering, SendBinaryLowering, LaunchLowering, LaunchAsyncLowering,
                 AwaitLowering, CallLowering, CloseLowering>(converter, lowering);
    ConversionTarget target(*ctx);
    target.addLegalDialect<LLVM::LLVMDialect>();
    target.addIllegalDialect<executor::ExecutorDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace courier
