// courier-approximate-math: f32 math functions, scalar and vector, become upstream's
// polynomial approximations (vector arithmetic instead of a libm call per element); f16 and
// bf16 ones are computed in f32; exact ops with an instruction of their own (fma, absf,
// floor, sqrt, ...) become LLVM's intrinsics before libm would take them.
#include "passes/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace courier {
#define GEN_PASS_DEF_APPROXIMATEMATH
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// The functions whose approximations are within 4 ulps of libm (tests/jit/
/// InputDialectsTest.cpp measures each). Not sin and cos, whose range reduction loses every
/// digit for large arguments, nor atan and atan2 (27 and 39 ulps): they and f64 stay with
/// libm.
bool isApproximated(StringRef name) {
  return llvm::is_contained({math::ExpOp::getOperationName(), math::ExpM1Op::getOperationName(),
                             math::LogOp::getOperationName(), math::Log2Op::getOperationName(),
                             math::Log1pOp::getOperationName(), math::TanhOp::getOperationName(),
                             math::ErfOp::getOperationName()},
                            name);
}

/// The approximations are made of math.fma, absf, floor, copysign and the like, which
/// convert-math-to-libm, running before convert-math-to-llvm, would turn into a call per
/// element (fmaf, fabsf, floorf); LLVM's intrinsics are single instructions where the CPU
/// has them. An n-D vector (vector<1x64xf32>, as vectorized tiles of 2-D tensors are) is
/// computed as the 1-D vector of its elements.
template <typename MathOp, typename Intrinsic> struct ToIntrinsic : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(MathOp op, PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32() && !getElementTypeOrSelf(type).isF64())
      return rewriter.notifyMatchFailure(op, "neither f32 nor f64");
    auto vector = dyn_cast<VectorType>(type);
    if (vector && vector.isScalable())
      return rewriter.notifyMatchFailure(op, "a scalable vector");
    if (!vector || vector.getRank() == 1) {
      rewriter.replaceOpWithNewOp<Intrinsic>(op, type, op->getOperands(),
                                             ArrayRef<NamedAttribute>{});
      return success();
    }
    auto flat = VectorType::get({vector.getNumElements()}, vector.getElementType());
    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(vector::ShapeCastOp::create(rewriter, op.getLoc(), flat, operand));
    Value result =
        Intrinsic::create(rewriter, op.getLoc(), flat, operands, ArrayRef<NamedAttribute>{});
    rewriter.replaceOpWithNewOp<vector::ShapeCastOp>(op, vector, result);
    return success();
  }
};

struct ApproximateMath : impl::ApproximateMathBase<ApproximateMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    // f16 and bf16 have no libm functions: every math function computes them in f32.
    populateMathF32ExpansionPatterns(patterns, [](StringRef) { return true; });
    populateMathPolynomialApproximationPatterns(patterns, isApproximated);
    patterns.add<
        ToIntrinsic<math::FmaOp, LLVM::FMAOp>, ToIntrinsic<math::AbsFOp, LLVM::FAbsOp>,
        ToIntrinsic<math::FloorOp, LLVM::FFloorOp>, ToIntrinsic<math::CeilOp, LLVM::FCeilOp>,
        ToIntrinsic<math::TruncOp, LLVM::FTruncOp>,
        ToIntrinsic<math::RoundEvenOp, LLVM::RoundEvenOp>,
        ToIntrinsic<math::RoundOp, LLVM::RoundOp>, ToIntrinsic<math::CopySignOp, LLVM::CopySignOp>,
        ToIntrinsic<math::SqrtOp, LLVM::SqrtOp>>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
} // namespace courier
