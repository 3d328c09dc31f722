// courier-lower-tosa: the functions that hold TOSA ops, in the module and in its nested
// modules, go through upstream's TOSA to linalg passes; the others are left as they are.
#include "passes/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/TosaToLinalg/TosaToLinalg.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

namespace courier {
#define GEN_PASS_DEF_LOWERTOSA
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// Upstream's tosa-to-linalg-pipeline for one function (optional decompositions, shapes
/// inferred, operands made broadcastable, named ops, then the elementwise ones), with what
/// it leaves to scf, arith and tensor. Without tosa-validate: it refuses f64, which TOSA's
/// profiles lack and the lowering computes as it does f32.
void addTosaToLinalg(OpPassManager &pm) {
  pm.addPass(createTosaToSCFPass());
  pm.addPass(tosa::createTosaOptionalDecompositionsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(tosa::createTosaInferShapesPass());
  pm.addPass(tosa::createTosaMakeBroadcastablePass());
  pm.addPass(tosa::createTosaToLinalgNamed());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(tosa::createTosaLayerwiseConstantFoldPass());
  pm.addPass(tosa::createTosaMakeBroadcastablePass());
  pm.addPass(tosa::createTosaToLinalg());
  TosaToArithPassOptions arith;
  arith.includeApplyRescale = true;
  pm.addPass(createTosaToArithPass(arith));
  pm.addPass(createTosaToTensorPass());
  // The shapes tosa.reshape and tosa.pad took (tosa.const_shape) are left without uses.
  pm.addPass(createCanonicalizerPass());
}

struct LowerTosa : impl::LowerTosaBase<LowerTosa> {
  LowerTosa() : lowering(func::FuncOp::getOperationName()) { addTosaToLinalg(lowering); }
  LowerTosa(const LowerTosa &other)
      : impl::LowerTosaBase<LowerTosa>(other), lowering(other.lowering) {}

  void getDependentDialects(DialectRegistry &registry) const override {
    lowering.getDependentDialects(registry);
  }

  void runOnOperation() override {
    SmallVector<func::FuncOp> functions;
    getOperation().walk([&](func::FuncOp function) {
      WalkResult tosa = function.walk([](Operation *op) {
        return isa<tosa::TosaDialect>(op->getDialect()) ? WalkResult::interrupt()
                                                        : WalkResult::advance();
      });
      if (tosa.wasInterrupted())
        functions.push_back(function);
    });
    for (func::FuncOp function : functions)
      if (failed(runPipeline(lowering, function)))
        return signalPassFailure();
  }

  OpPassManager lowering;
};

} // namespace
} // namespace courier
