// courier-parallelize-kernels: the outermost loops courier-vectorize made over the independent
// dimensions of a large enough op become scf.parallel, which convert-scf-to-openmp hands to
// the OpenMP runtime's threads.
#include "passes/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;

namespace courier {

#define GEN_PASS_DEF_PARALLELIZEKERNELS
#include "passes/Passes.h.inc"

void markParallelTileLoops(ArrayRef<LoopLikeOpInterface> loops, ArrayRef<int64_t> tileSizes,
                           ArrayRef<utils::IteratorType> iterators, int64_t work,
                           ArrayRef<int64_t> interchange) {
  SmallVector<int64_t> order(interchange);
  if (order.empty())
    order = llvm::to_vector(llvm::seq<int64_t>(0, tileSizes.size()));
  // Tiling makes one loop per dimension with a tile size, in `order`, outer first.
  size_t next = 0;
  for (int64_t dim : order) {
    if (dim < 0 || dim >= static_cast<int64_t>(tileSizes.size()) ||
        dim >= static_cast<int64_t>(iterators.size()))
      return;
    if (tileSizes[dim] == 0)
      continue;
    if (next == loops.size())
      return;
    Operation *loop = LoopLikeOpInterface(loops[next++]).getOperation();
    if (iterators[dim] == utils::IteratorType::parallel && isa<scf::ForOp>(loop))
      loop->setAttr(kParallelWorkAttr,
                    IntegerAttr::get(IntegerType::get(loop->getContext(), 64), work));
  }
}

namespace {

/// The number of iterations of `loop` when its bounds are constants.
std::optional<int64_t> tripCount(scf::ForOp loop) {
  std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
  std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
  std::optional<int64_t> step = getConstantIntValue(loop.getStep());
  if (!lower || !upper || !step || *step <= 0)
    return std::nullopt;
  return *upper <= *lower ? 0 : (*upper - *lower + *step - 1) / *step;
}

/// Gives each iteration of `loop` its own copy of the buffers allocated before it that only it
/// uses (and frees after it): scratch space hoisted out of a tile loop (a packed tile), which
/// iterations on different threads must not share. Their contents never pass from one
/// iteration to the next: on tensors they were tensor.empty, written before being read. False
/// when a buffer the loop writes is used after it in any other way than being freed, yet is
/// not the function's to hand on: such a loop is left as it is.
bool privatizeScratch(scf::ForOp loop) {
  SetVector<Operation *> allocations;
  loop.getBody()->walk([&](Operation *op) {
    for (Value operand : op->getOperands())
      if (auto alloc = operand.getDefiningOp<memref::AllocOp>())
        if (!loop->isAncestor(alloc))
          allocations.insert(alloc);
  });
  for (Operation *alloc : allocations) {
    SmallVector<Operation *> frees;
    bool onlyHere = true;
    for (Operation *user : alloc->getResult(0).getUsers()) {
      if (loop->isAncestor(user))
        continue;
      if (isa<memref::DeallocOp>(user) && user->getBlock() == loop->getBlock() &&
          loop->isBeforeInBlock(user))
        frees.push_back(user);
      else
        onlyHere = false;
    }
    // Used after the loop: a result the iterations write disjoint parts of.
    if (!onlyHere || alloc->getNumOperands() != 0)
      continue;
    OpBuilder builder(loop.getBody(), loop.getBody()->begin());
    Operation *own = builder.clone(*alloc);
    alloc->getResult(0).replaceUsesWithIf(
        own->getResult(0), [&](OpOperand &use) { return loop->isAncestor(use.getOwner()); });
    builder.setInsertionPoint(loop.getBody()->getTerminator());
    memref::DeallocOp::create(builder, loop.getLoc(), own->getResult(0));
    for (Operation *free : frees)
      free->erase();
    if (alloc->use_empty())
      alloc->erase();
  }
  return true;
}

/// Replaces `loop`, which carries no values, with an scf.parallel over the same range.
void replaceWithParallel(scf::ForOp loop) {
  OpBuilder builder(loop);
  auto parallel =
      scf::ParallelOp::create(builder, loop.getLoc(), ValueRange{loop.getLowerBound()},
                              ValueRange{loop.getUpperBound()}, ValueRange{loop.getStep()});
  Block *body = parallel.getBody();
  // The new loop's body holds only its terminator (scf.reduce); the old body goes before it.
  Block *old = loop.getBody();
  old->getTerminator()->erase();
  body->getOperations().splice(body->begin(), old->getOperations());
  loop.getInductionVar().replaceAllUsesWith(parallel.getInductionVars()[0]);
  loop.erase();
}

class ParallelizeKernels : public impl::ParallelizeKernelsBase<ParallelizeKernels> {
public:
  using ParallelizeKernelsBase::ParallelizeKernelsBase;

  void runOnOperation() override {
    SmallVector<scf::ForOp> chosen;
    getOperation().walk([&](scf::ForOp loop) {
      auto work = loop->getAttrOfType<IntegerAttr>(kParallelWorkAttr);
      if (!work || !enabled)
        return;
      // Only the outermost: one team of threads per op, never one nested in another.
      for (Operation *parent = loop->getParentOp(); parent; parent = parent->getParentOp())
        if (parent->hasAttr(kParallelWorkAttr) || isa<scf::ParallelOp>(parent))
          return;
      std::optional<int64_t> trips = tripCount(loop);
      // A loop that still carries values was not bufferized in place; a small op costs less on
      // one thread than waking others.
      if (loop.getNumResults() != 0 || !trips || *trips < 2 ||
          work.getInt() < static_cast<int64_t>(minWork))
        return;
      chosen.push_back(loop);
    });
    for (scf::ForOp loop : chosen)
      if (privatizeScratch(loop))
        replaceWithParallel(loop);
    getOperation().walk([](scf::ForOp loop) { loop->removeAttr(kParallelWorkAttr); });
  }
};

} // namespace

} // namespace courier
