// convert-executor-to-llvm's pieces in a conversion of one's own (passes/ExecutorToLLVM.h): its
// patterns beside upstream's in one full conversion, and its precondition step.
#include "passes/ExecutorToLLVM.h"
#include "passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Transforms/DialectConversion.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

namespace {

const char *kSession = R"mlir(
func.func @scaled(%x: memref<4xf32>) -> memref<4xf32> {
  %s = executor.open("h:7000") : !executor.session
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  executor.close %s : !executor.session
  return %r : memref<4xf32>
}
)mlir";

const char *kUnbufferized = R"mlir(
func.func @scaled(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = executor.open("h:7000") : !executor.session
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
)mlir";

struct Parsed {
  Parsed() : context(registry()) {}
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry registry;
    mlir::registerAllDialects(registry);
    courier::registerCourierDialects(registry);
    return registry;
  }
  mlir::MLIRContext context;
};

} // namespace

TEST_CASE("the executor patterns convert beside upstream's func, memref and arith patterns in "
          "one full conversion",
          "[passes]") {
  Parsed parsed;
  mlir::MLIRContext &context = parsed.context;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kSession, &context);
  REQUIRE(module);
  mlir::FailureOr<courier::ExecutorToLLVMLowering> lowering =
      courier::ExecutorToLLVMLowering::prepare(*module);
  REQUIRE(mlir::succeeded(lowering));
  CHECK(lowering->hasExecutorOps());

  mlir::LLVMTypeConverter converter(&context);
  courier::populateExecutorToLLVMTypeConversions(converter);
  mlir::RewritePatternSet patterns(&context);
  mlir::populateFuncToLLVMConversionPatterns(converter, patterns);
  mlir::populateFinalizeMemRefToLLVMConversionPatterns(converter, patterns);
  mlir::arith::populateArithToLLVMConversionPatterns(converter, patterns);
  courier::populateExecutorToLLVMConversionPatterns(converter, *lowering, patterns);
  mlir::LLVMConversionTarget target(context);
  courier::configureExecutorToLLVMConversionLegality(target);
  target.addLegalOp<mlir::ModuleOp>();
  REQUIRE(mlir::succeeded(mlir::applyFullConversion(*module, target, std::move(patterns))));
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  REQUIRE(mlir::succeeded(pm.run(*module)));

  // Nothing but the LLVM dialect is left, and the function calls the runtime in order.
  std::vector<std::string> calls;
  module->walk([&](mlir::Operation *op) {
    if (!mlir::isa<mlir::ModuleOp>(op))
      CHECK(op->getDialect()->getNamespace() == "llvm");
    if (auto call = mlir::dyn_cast<mlir::LLVM::CallOp>(op))
      calls.push_back(call.getCallee()->str());
  });
  CHECK(calls == std::vector<std::string>{"__catalyst__executor__open",
                                          "__catalyst__executor__launch",
                                          "__catalyst__executor__close"});
  auto function = module->lookupSymbol<mlir::LLVM::LLVMFuncOp>("scaled");
  REQUIRE(function);
  CHECK_FALSE(function.isExternal());
}

TEST_CASE("the precondition step refuses an executor op on tensors before any pattern runs",
          "[passes]") {
  Parsed parsed;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kUnbufferized, &parsed.context);
  REQUIRE(module);
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&parsed.context, [&](mlir::Diagnostic &diagnostic) {
    message = diagnostic.str();
    return mlir::success();
  });
  CHECK(mlir::failed(courier::ExecutorToLLVMLowering::prepare(*module)));
  CHECK(message == "'executor.launch' op has tensor operands or results; run one-shot bufferize "
                   "before convert-executor-to-llvm");
  // Nothing was declared: the module is as it was.
  CHECK(module->getOps<mlir::LLVM::LLVMFuncOp>().empty());
}
