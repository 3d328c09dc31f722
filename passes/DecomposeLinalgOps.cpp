// courier-decompose-linalg-ops: linalg ops that neither bufferize nor vectorize as they are
// (aggregates such as linalg.softmax, linalg.pack and linalg.unpack) become the linalg and
// tensor ops they are made of.
#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"

namespace courier {
#define GEN_PASS_DEF_DECOMPOSELINALGOPS
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// Decomposes `op` if it is one this pass takes; ops it does not take are left as they are.
LogicalResult decompose(IRRewriter &rewriter, Operation *op) {
  rewriter.setInsertionPoint(op);
  if (auto pack = dyn_cast<linalg::PackOp>(op)) {
    if (pack.hasPureTensorSemantics() && failed(linalg::lowerPack(rewriter, pack)))
      return op->emitError("linalg.pack could not be lowered to pad, expand and transpose");
    return success();
  }
  if (auto unpack = dyn_cast<linalg::UnPackOp>(op)) {
    if (unpack.hasPureTensorSemantics() && failed(linalg::lowerUnPack(rewriter, unpack)))
      return op->emitError("linalg.unpack could not be lowered to transpose, collapse and slice");
    return success();
  }
  if (auto aggregate = dyn_cast<linalg::AggregatedOpInterface>(op)) {
    FailureOr<SmallVector<Value>> parts = aggregate.decomposeOperation(rewriter);
    if (failed(parts))
      return op->emitError("the op could not be decomposed");
    rewriter.replaceOp(op, *parts);
  }
  return success();
}

// A walk, not a greedy rewrite: the rest of the IR (a target module with a pipeline of its
// own among it) is left exactly as it was, unfolded.
struct DecomposeLinalgOps : impl::DecomposeLinalgOpsBase<DecomposeLinalgOps> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<linalg::PackOp, linalg::UnPackOp, linalg::AggregatedOpInterface>(op))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (Operation *op : ops)
      if (failed(decompose(rewriter, op)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace courier
