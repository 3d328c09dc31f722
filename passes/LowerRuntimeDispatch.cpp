// lower-runtime-dispatch: dispatched catalyst.runtime_call -> executor.call in the flat wire
// layout.
#include "passes/Passes.h"
#include "passes/TargetModules.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace courier {
#define GEN_PASS_DEF_LOWERRUNTIMEDISPATCH
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// A NUL-padded fixed-width constant holding `text`.
Value stringField(OpBuilder &builder, Location loc, StringRef text) {
  SmallVector<int8_t> bytes(dialect::catalyst::kStringFieldWidth, 0);
  llvm::copy(text, bytes.begin());
  auto type = RankedTensorType::get({dialect::catalyst::kStringFieldWidth}, builder.getI8Type());
  return arith::ConstantOp::create(builder, loc, DenseElementsAttr::get(type, ArrayRef(bytes)));
}

struct LowerRuntimeDispatch : impl::LowerRuntimeDispatchBase<LowerRuntimeDispatch> {
  void runOnOperation() override {
    ModuleOp host = getOperation();
    SmallVector<dialect::catalyst::RuntimeCallOp> calls;
    for (auto function : host.getBody()->getOps<FunctionOpInterface>())
      function.walk([&](dialect::catalyst::RuntimeCallOp call) {
        if (call.getDispatch())
          calls.push_back(call);
      });
    if (calls.empty())
      return;

    // The executors named by catalyst.dispatch attributes.
    SmallVector<std::string> programExecutors = getProgramExecutors(host);

    SessionCache sessions;
    for (dialect::catalyst::RuntimeCallOp call : calls) {
      std::string address = call.getDispatch()->str();
      if (address.empty()) {
        if (programExecutors.empty()) {
          call.emitOpError("has an empty dispatch but the program has no executor: no nested "
                           "module carries catalyst.dispatch");
          return signalPassFailure();
        }
        if (programExecutors.size() > 1) {
          InFlightDiagnostic diag =
              call.emitOpError("has an empty dispatch but the program's executor is ambiguous: ");
          llvm::interleaveComma(programExecutors, diag,
                                [&](StringRef a) { diag << "'" << a << "'"; });
          return signalPassFailure();
        }
        address = programExecutors.front();
      }
      lower(call, sessions.get(call, address));
    }
  }

  void lower(dialect::catalyst::RuntimeCallOp call, Value session) {
    MLIRContext *ctx = &getContext();
    Location loc = call.getLoc();
    OpBuilder builder(call);

    SmallVector<Value> inputs;
    auto operand = call.getInputs().begin();
    auto string = call.getCStrings().begin();
    for (Attribute attr : call.getCParams()) {
      StringRef kind = cast<StringAttr>(attr).getValue();
      if (kind == "str") {
        inputs.push_back(stringField(builder, loc, cast<StringAttr>(*string++).getValue()));
        continue;
      }
      Value value = *operand++;
      if (value.getType().isIndex())
        value = arith::IndexCastOp::create(builder, loc, builder.getI64Type(), value);
      auto type = RankedTensorType::get({1}, dialect::catalyst::cKindWireType(ctx, kind));
      inputs.push_back(tensor::FromElementsOp::create(builder, loc, type, value));
    }

    SmallVector<Type> resultTypes;
    bool hasResult = call.getCResult() != "void";
    if (hasResult)
      resultTypes.push_back(
          RankedTensorType::get({1}, dialect::catalyst::cKindWireType(ctx, call.getCResult())));
    llvm::append_range(resultTypes, call.getOuts().getTypes());

    auto executorCall = dialect::executor::CallOp::create(
        builder, loc, resultTypes, session, call.getCallee(), inputs,
        builder.getI32IntegerAttr(static_cast<int32_t>(inputs.size())));

    SmallVector<Value> replacements;
    ValueRange results = executorCall.getResults();
    if (hasResult) {
      Value zero = arith::ConstantIndexOp::create(builder, loc, 0);
      Value scalar = tensor::ExtractOp::create(builder, loc, results.front(), zero);
      Type declared = call.getResult().front().getType();
      if (declared.isIndex())
        scalar = arith::IndexCastOp::create(builder, loc, declared, scalar);
      replacements.push_back(scalar);
      results = results.drop_front();
    }
    llvm::append_range(replacements, results);
    call.replaceAllUsesWith(replacements);
    call.erase();
  }
};

} // namespace
} // namespace courier
