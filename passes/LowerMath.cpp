// courier-lower-math: every math op the approximations left becomes what loads: a libm call
// where libm has the function, arithmetic where it has none (rsqrt, isinf, isnormal), and
// what convert-math-to-llvm takes (bit counts, absi, isnan, isfinite, sincos) is left for it.
#include "passes/Passes.h"

#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace courier {
#define GEN_PASS_DEF_LOWERMATH
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// A constant of `type` (a float type or a vector of one) with every element `value`.
Value floatConstant(PatternRewriter &rewriter, Location loc, Type type, const APFloat &value) {
  auto element = cast<FloatType>(getElementTypeOrSelf(type));
  TypedAttr attr = rewriter.getFloatAttr(element, value);
  if (auto vector = dyn_cast<VectorType>(type))
    attr = DenseElementsAttr::get(vector, attr);
  return arith::ConstantOp::create(rewriter, loc, type, attr);
}

/// isinf(x) is |x| == inf: libm has no function for it, nor convert-math-to-llvm a pattern.
/// |x| is LLVM's fabs, an instruction (math.absf would become a call of fabsf below).
struct IsInfToCompare : OpRewritePattern<math::IsInfOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::IsInfOp op, PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type type = op.getOperand().getType();
    auto semantics = &cast<FloatType>(getElementTypeOrSelf(type)).getFloatSemantics();
    Value magnitude = LLVM::FAbsOp::create(rewriter, loc, type, op.getOperand());
    Value infinity = floatConstant(rewriter, loc, type, APFloat::getInf(*semantics));
    rewriter.replaceOpWithNewOp<arith::CmpFOp>(op, arith::CmpFPredicate::OEQ, magnitude, infinity);
    return success();
  }
};

/// isnormal(x) is smallest normal <= |x| < inf (false for NaN: both compares are ordered).
struct IsNormalToCompare : OpRewritePattern<math::IsNormalOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::IsNormalOp op, PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type type = op.getOperand().getType();
    auto semantics = &cast<FloatType>(getElementTypeOrSelf(type)).getFloatSemantics();
    Value magnitude = LLVM::FAbsOp::create(rewriter, loc, type, op.getOperand());
    Value smallest = floatConstant(rewriter, loc, type, APFloat::getSmallestNormalized(*semantics));
    Value infinity = floatConstant(rewriter, loc, type, APFloat::getInf(*semantics));
    Value above =
        arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OGE, magnitude, smallest);
    Value below =
        arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OLT, magnitude, infinity);
    rewriter.replaceOpWithNewOp<arith::AndIOp>(op, above, below);
    return success();
  }
};

struct LowerMath : impl::LowerMathBase<LowerMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    // rsqrt has no libm function (upstream's libm lowering would call rsqrtf): 1 / sqrt(x);
    // clampf is upstream's maximumf(minimumf(value, min), max), as its documentation says.
    math::populateExpansionPatterns(patterns, {"rsqrt", "clampf"});
    patterns.add<IsInfToCompare, IsNormalToCompare>(&getContext());
    // Applied as rewrites, not as convert-math-to-libm's conversion, which fails on any math
    // op it has no function for (math.ctlz, math.isnan, ...) instead of leaving it to
    // convert-math-to-llvm.
    populateMathToLibmConversionPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
} // namespace courier
