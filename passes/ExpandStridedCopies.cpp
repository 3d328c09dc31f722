// courier-expand-strided-copies: copies of strided buffers become linalg.copy, so they
// lower to loops instead of a call into MLIR's runner utilities.
#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace courier {
#define GEN_PASS_DEF_EXPANDSTRIDEDCOPIES
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

bool isContiguous(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  return memref && memref.getLayout().isIdentity();
}

struct ExpandStridedCopies : impl::ExpandStridedCopiesBase<ExpandStridedCopies> {
  void runOnOperation() override {
    getOperation().walk([](memref::CopyOp copy) {
      if (isContiguous(copy.getSource().getType()) && isContiguous(copy.getTarget().getType()))
        return;
      OpBuilder builder(copy);
      linalg::CopyOp::create(builder, copy.getLoc(), copy.getSource(), copy.getTarget());
      copy.erase();
    });
  }
};

} // namespace
} // namespace courier
