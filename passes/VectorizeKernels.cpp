// courier-vectorize: tiles linalg ops on tensors for the caches and the registers of the CPU
// a function's code is for, then vectorizes them with upstream's transform ops.
#include "passes/Passes.h"
#include "passes/TargetModules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Dialect/Transform/IR/TransformDialect.h"
#include "mlir/Dialect/Transform/Transforms/TransformInterpreterUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <mutex>

using namespace mlir;

namespace courier {

#define GEN_PASS_DEF_VECTORIZEKERNELS
#include "passes/Passes.h.inc"

namespace {

/// What follows the tiling, for a whole function: vectorize every tile, fold the tiles'
/// slices into the vector transfers, hoist what does not change across a loop (the matmul's
/// accumulator becomes a vector carried by the k loop), and lower contractions to outer
/// products and those to FMAs.
constexpr llvm::StringLiteral kVectorizeSchedule = R"mlir(
module attributes {transform.with_named_sequence} {
  transform.named_sequence @vectorize(%function: !transform.any_op {transform.consumed}) {
    %vectorized = transform.structured.vectorize_children_and_apply_patterns %function
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %vectorized {
      transform.apply_patterns.canonicalization
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      // A tile's read and write of its accumulator must have one type to be hoisted as a
      // pair: a convolution's 1-D view reads it with one leading unit dimension fewer.
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    } : !transform.any_op
    %loops = transform.structured.match ops{["scf.for"]} in %vectorized
        : (!transform.any_op) -> !transform.any_op
    transform.apply_licm to %loops : !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %loops : !transform.any_op
    // Loops come outer first: once more for each reduction loop a tile may be nested in
    // (a convolution's filter row, column and input channel), so the accumulator leaves all.
    transform.loop.hoist_loop_invariant_subsets %loops : !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %loops : !transform.any_op
    transform.yield
  }

  transform.named_sequence @lower_contractions(%function: !transform.any_op {transform.readonly}) {
    transform.apply_patterns to %function {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.yield
  }
}
)mlir";

/// How a function's ops are tiled: the vector width of its CPU, in bits.
struct Plan {
  unsigned vectorBits = 128;
  /// The widest vector of i16 pairs whose products the CPU sums in one instruction
  /// (getPairDotBits); 0: integer matmuls are tiled as float ones are.
  unsigned pairDotBits = 0;
  /// Left as written: fp = "strict", or a module with a pipeline of its own.
  bool strict = false;
};

int64_t lanesOf(Type element, unsigned vectorBits) {
  unsigned bits = element.isIntOrFloat() ? element.getIntOrFloatBitWidth() : 0;
  return bits ? std::max<int64_t>(1, vectorBits / bits) : 1;
}

/// Marks the generic an integer matmul becomes when its products are summed in pairs
/// (rewriteIntoPairs): loops (m, n, k / 2, 2) over A as m x k/2 x 2 and B as k/2 x n x 2, both
/// of i16.
constexpr llvm::StringLiteral kPairDotAttr = "courier.pair_dot";

/// Tile sizes, one level after another, for `op` (a tile of an earlier `level`: its shape is
/// that tile's); empty when it is left as it is.
SmallVector<SmallVector<int64_t>> tilesFor(linalg::LinalgOp op, const Plan &plan, int64_t level) {
  if (!op.hasPureTensorSemantics())
    return {};

  // A dimension of dynamic size is tiled as one larger than any tile: peeling leaves whole
  // tiles of static shape, which vectorize, and a remainder of dynamic size, left scalar.
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (ranges.empty())
    return {};
  Type element = getElementTypeOrSelf(op->getResult(0).getType());
  int64_t lanes = lanesOf(element, plan.vectorBits);
  auto clamp = [&](SmallVector<int64_t> sizes) {
    for (auto [size, range] : llvm::zip(sizes, ranges))
      if (!ShapedType::isDynamic(range))
        size = std::min(size, range);
    return sizes;
  };
  // An integer matmul taken as pairs (m, n, k / 2, 2): cache tiles as a float matmul's, then
  // 8 rows by two vectors of i32 lanes, one pair of k a step (PairDotContraction).
  if (op->hasAttr(kPairDotAttr) && ranges.size() == 4 && !ShapedType::isDynamic(ranges[2])) {
    int64_t pairLanes = lanesOf(element, plan.pairDotBits);
    return {level == 0 ? clamp({64, 256, 128, 0}) : SmallVector<int64_t>{},
            clamp({8, 2 * pairLanes, 1, 0})};
  }
  // Cache tiles where the shape is known; with a dynamic dimension, register tiles alone (a
  // cache tile's remainder would have a dynamic shape and leave a scalar strip of every
  // register-tile loop inside it).
  bool dynamic = llvm::any_of(ranges, ShapedType::isDynamic);
  if (isa<linalg::MatmulOp>(op) && element.isIntOrFloat() && ranges.size() == 3 && dynamic)
    return {clamp({8, 2 * lanes, 1})};
  if (isa<linalg::MatmulOp>(op) && element.isIntOrFloat() && ranges.size() == 3)
    return {level == 0 ? clamp({64, 256, 256}) : SmallVector<int64_t>{}, clamp({8, 2 * lanes, 1})};
  // A 2-D convolution (n, oh, ow, f, kh, kw, c): a register tile of 8 output pixels by two
  // vectors of filters, one filter tap and one input channel a step; decomposed to a 1-D
  // convolution, it vectorizes to outer products as a matmul tile does.
  if (isa<linalg::Conv2DNhwcHwcfOp>(op) && isa<FloatType>(element) && ranges.size() == 7)
    return {clamp({1, 1, 8, 2 * lanes, 1, 1, 1})};
  SmallVector<int64_t> sizes(ranges.size(), 1);
  sizes.back() = 4 * lanes;
  if (op.getIteratorTypesArray().back() != utils::IteratorType::reduction)
    return {clamp(sizes)};
  // A reduction along the innermost loop (a row sum): the other loops first, then that one,
  // keeping a vector of partial results the loop carries (tileAndPeel).
  SmallVector<int64_t> outer(ranges.size(), 1), inner(ranges.size(), 0);
  outer.back() = 0;
  inner.back() = 4 * lanes;
  return {clamp(outer), clamp(inner)};
}

/// Marks an op tiled by the first `n` levels of its tile sizes.
constexpr llvm::StringLiteral kLevelAttr = "courier.tiled_levels";

/// Marks an op no level tiles again.
constexpr int64_t kTiledForGood = std::numeric_limits<int64_t>::max();

/// Whether a matmul's cache tiles should read B from a packed copy: where B's rows are a page
/// or more apart, the register tile's walk down a column of B touches lines that share a few
/// cache sets (4 KiB apart), and the tile of B stops fitting in L2 (a 1024 x 1024 f32 matmul
/// ran at three quarters of a 512 x 512 one's rate). The copy is made once per tile of B:
/// the tile loops go over N and K outside M, and the copy is hoisted out of the M loop.
/// Only where the tiles divide the matmul (no remainders to copy for).
bool packsB(linalg::LinalgOp op, ArrayRef<int64_t> sizes, int64_t level) {
  // The copy is of B as k x n: a matmul whose maps transpose or broadcast B reads it as is.
  auto matmul = dyn_cast<linalg::MatmulOp>(op.getOperation());
  if (level != 0 || !matmul || matmul.hasUserDefinedMaps() || sizes.size() != 3)
    return false;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return false;
  Type element = getElementTypeOrSelf(op->getResult(0).getType());
  int64_t rowBytes = ranges[1] * element.getIntOrFloatBitWidth() / 8;
  for (auto [size, range] : llvm::zip(sizes, ranges))
    if (size <= 0 || range % size != 0 || size == range)
      return false;
  return rowBytes >= 4096;
}

/// Makes the tiled matmul of `tiled` (loops N, K, M by `sizes`) read its B operand from a
/// contiguous copy of its tile of `b`, made in the K loop before the M loop and tiled itself a
/// row and 64 elements at a time.
LogicalResult packOperandB(RewriterBase &rewriter, const scf::SCFTilingResult &tiled, Value b,
                           ArrayRef<int64_t> sizes);

/// Tiles `op` by `sizes` and peels the last iteration of each loop where the sizes do not
/// divide the loop's range: the main loop then has tiles of static shape, which vectorize, and
/// the remainder one of static shape too (its bounds are constants). The tiled ops, the
/// remainder's among them, are marked as tiled to `level`.
LogicalResult tileAndPeel(RewriterBase &rewriter, linalg::LinalgOp op, ArrayRef<int64_t> sizes,
                          int64_t level) {
  scf::SCFTilingOptions options;
  options.setTileSizes(getAsIndexOpFoldResult(rewriter.getContext(), sizes));
  // A reduction along the innermost loop alone (a row sum's second level) keeps a vector of
  // partial results the loop carries, reduced across once after it, rather than reducing each
  // tile across.
  unsigned innermost = op.getNumLoops() - 1;
  bool onlyInnermost = llvm::all_of(sizes.drop_back(), [](int64_t size) { return size == 0; });
  if (!isa<linalg::MatmulOp>(op) && onlyInnermost && sizes.back() > 1 &&
      op.getIteratorTypesArray().back() == utils::IteratorType::reduction)
    options.setReductionTilingStrategy(ReductionTilingStrategy::PartialReductionOuterReduction)
        .setReductionDims({innermost});
  bool packing = packsB(op, sizes, level - 1);
  Value b = op->getOperand(1);
  if (packing)
    options.setInterchange({1, 2, 0});
  rewriter.setInsertionPoint(op);
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  // Work of unknown size (a dynamic dimension) is not split across threads.
  int64_t work = 1;
  for (int64_t range : op.getStaticLoopRanges())
    work = ShapedType::isDynamic(range) ? 0 : work * range;
  FailureOr<scf::SCFTilingResult> tiled =
      scf::tileUsingSCF(rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(tiled))
    return op.emitError("tiling for vectors failed");
  rewriter.replaceOp(op, tiled->replacements);
  tiled->tiledOps.back()->setAttr(kLevelAttr, rewriter.getI64IntegerAttr(level));
  if (packing && failed(packOperandB(rewriter, *tiled, b, sizes)))
    return failure();
  markParallelTileLoops(tiled->loops, sizes, iterators, work, options.interchangeVector);
  // Innermost first: peeling a loop copies those inside it, which are then peeled already.
  for (LoopLikeOpInterface loop : llvm::reverse(tiled->loops)) {
    auto forOp = dyn_cast<scf::ForOp>(loop.getOperation());
    scf::ForOp remainder;
    // Fails where nothing is left over: the loop stays as it is.
    if (forOp)
      (void)scf::peelForLoopAndSimplifyBounds(rewriter, forOp, remainder);
  }
  return success();
}

LogicalResult packOperandB(RewriterBase &rewriter, const scf::SCFTilingResult &tiled, Value b,
                           ArrayRef<int64_t> sizes) {
  auto tile = cast<linalg::LinalgOp>(tiled.tiledOps.back());
  auto nLoop = dyn_cast<scf::ForOp>(LoopLikeOpInterface(tiled.loops[0]).getOperation());
  auto kLoop = dyn_cast<scf::ForOp>(LoopLikeOpInterface(tiled.loops[1]).getOperation());
  auto mLoop = dyn_cast<scf::ForOp>(LoopLikeOpInterface(tiled.loops[2]).getOperation());
  if (!nLoop || !kLoop || !mLoop)
    return tile.emitError("packing a matmul's B operand needs its tile loops");
  // Inside the K loop, outside the M loop: one copy for every M tile that reads it.
  rewriter.setInsertionPoint(mLoop);
  Location loc = tile.getLoc();
  SmallVector<OpFoldResult> offsets = {kLoop.getInductionVar(), nLoop.getInductionVar()};
  SmallVector<OpFoldResult> extent = {rewriter.getIndexAttr(sizes[2]),
                                      rewriter.getIndexAttr(sizes[1])};
  SmallVector<OpFoldResult> unit(2, rewriter.getIndexAttr(1));
  Value slice = tensor::ExtractSliceOp::create(rewriter, loc, b, offsets, extent, unit);
  auto type = cast<RankedTensorType>(slice.getType());
  Value empty = tensor::EmptyOp::create(rewriter, loc, type.getShape(), type.getElementType());
  auto copy = linalg::CopyOp::create(rewriter, loc, slice, empty);
  rewriter.modifyOpInPlace(tile, [&] { tile->getOpOperand(1).set(copy.getResult(0)); });
  SmallVector<int64_t> rows = {1, std::min<int64_t>(64, type.getShape()[1])};
  return tileAndPeel(rewriter, cast<linalg::LinalgOp>(copy.getOperation()), rows, kTiledForGood);
}

/// Whether `op` is a matmul of 8-bit integers (signed or unsigned) or signed 16-bit ones into
/// i32, of static shape, reading A as m x k and B as k x n.
bool takesPairs(linalg::MatmulOp op) {
  if (!op.hasPureTensorSemantics() || op.hasDynamicShape() || op.hasUserDefinedMaps())
    return false;
  Type a = getElementTypeOrSelf(op.getInputs()[0].getType());
  Type b = getElementTypeOrSelf(op.getInputs()[1].getType());
  Type c = getElementTypeOrSelf(op.getOutputs()[0].getType());
  bool isUnsigned = op.getCast() == linalg::TypeFn::cast_unsigned;
  auto fits = [&](Type t) { return t.isInteger(8) || (t.isInteger(16) && !isUnsigned); };
  return fits(a) && fits(b) && c.isInteger(32);
}

/// Rewrites an integer matmul (takesPairs) as a generic over pairs of k: A as m x k/2 x 2 and B
/// as k/2 x n x 2 (a copy with each pair of B's rows interleaved), both widened to i16 and k
/// padded with a zero to an even count. A register tile of it then reads a pair of A's
/// elements as one 32-bit lane to broadcast and a vector of B's pairs as they lie, which
/// pair-dot instructions take (PairDotContraction).
void rewriteIntoPairs(RewriterBase &rewriter, linalg::MatmulOp op) {
  Location loc = op.getLoc();
  bool isUnsigned = op.getCast() == linalg::TypeFn::cast_unsigned;
  Value a = op.getInputs()[0], b = op.getInputs()[1], init = op.getOutputs()[0];
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(b.getType());
  int64_t m = aType.getDimSize(0), k = aType.getDimSize(1), n = bType.getDimSize(1);
  int64_t pairs = (k + 1) / 2;
  MLIRContext *context = rewriter.getContext();
  Type i16 = rewriter.getI16Type(), i32 = rewriter.getI32Type();
  rewriter.setInsertionPoint(op);
  auto padK = [&](Value v, RankedTensorType type, unsigned dim) -> Value {
    if (k % 2 == 0)
      return v;
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] += 1;
    Value zero = arith::ConstantOp::create(rewriter, loc, type.getElementType(),
                                           rewriter.getZeroAttr(type.getElementType()));
    return tensor::createPadHighOp(RankedTensorType::get(shape, type.getElementType()), v, zero,
                                   /*nofold=*/false, loc, rewriter);
  };
  auto widen = [&](OpBuilder &b, Location at, Value v, Type to) -> Value {
    if (v.getType() == to)
      return v;
    return isUnsigned ? arith::ExtUIOp::create(b, at, to, v).getResult()
                      : arith::ExtSIOp::create(b, at, to, v).getResult();
  };
  AffineExpr d0, d1, d2, d3;
  bindDims(context, d0, d1, d2, d3);
  // Widened to i16 as it lies (rows of vectors), before it is seen as pairs.
  auto widened = [&](Value v) -> Value {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getElementType() == i16)
      return v;
    auto identity = AffineMap::getMultiDimIdentityMap(2, context);
    Value empty = tensor::EmptyOp::create(rewriter, loc, type.getShape(), i16);
    return linalg::GenericOp::create(
               rewriter, loc, empty.getType(), v, empty, ArrayRef<AffineMap>{identity, identity},
               SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
               [&](OpBuilder &b, Location at, ValueRange args) {
                 linalg::YieldOp::create(b, at, widen(b, at, args[0], i16));
               })
        .getResult(0);
  };
  // A: m x k -> m x k/2 x 2.
  Value aWide = tensor::ExpandShapeOp::create(
      rewriter, loc, RankedTensorType::get({m, pairs, 2}, i16), widened(padK(a, aType, 1)),
      SmallVector<ReassociationIndices>{{0}, {1, 2}});
  // B: k x n -> k/2 x 2 x n, copied as k/2 x n x 2.
  Value bPairs = tensor::ExpandShapeOp::create(
      rewriter, loc, RankedTensorType::get({pairs, 2, n}, i16), widened(padK(b, bType, 0)),
      SmallVector<ReassociationIndices>{{0, 1}, {2}});
  Value bEmpty = tensor::EmptyOp::create(rewriter, loc, ArrayRef<int64_t>{pairs, n, 2}, i16);
  Value bWide =
      linalg::TransposeOp::create(rewriter, loc, bPairs, bEmpty, ArrayRef<int64_t>{0, 2, 1})
          .getResult()[0];
  // C[m, n] += A[m, p, t] * B[p, n, t], over pairs p and their two halves t.
  SmallVector<AffineMap> maps = {AffineMap::get(4, 0, {d0, d2, d3}, context),
                                 AffineMap::get(4, 0, {d2, d1, d3}, context),
                                 AffineMap::get(4, 0, {d0, d1}, context)};
  SmallVector<utils::IteratorType> iterators = {
      utils::IteratorType::parallel, utils::IteratorType::parallel, utils::IteratorType::reduction,
      utils::IteratorType::reduction};
  auto product = linalg::GenericOp::create(
      rewriter, loc, init.getType(), ValueRange{aWide, bWide}, init, maps, iterators,
      [&](OpBuilder &b, Location at, ValueRange args) {
        Value x = arith::ExtSIOp::create(b, at, i32, args[0]);
        Value y = arith::ExtSIOp::create(b, at, i32, args[1]);
        Value sum =
            arith::AddIOp::create(b, at, args[2], arith::MulIOp::create(b, at, x, y).getResult());
        linalg::YieldOp::create(b, at, sum);
      });
  product->setAttr(kPairDotAttr, rewriter.getUnitAttr());
  rewriter.replaceOp(op, product.getResults());
}

/// LLVM's pmaddwd of `bits`-wide vectors: called as a function of that name, declared in the
/// module (declarePairDot), it is the intrinsic once translated to LLVM IR. A call rather than
/// an `llvm.call_intrinsic`, whose unknown memory effects bufferization's deallocation refuses.
StringRef pairDotIntrinsic(unsigned bits) {
  return bits == 512   ? "llvm.x86.avx512.pmaddw.d.512"
         : bits == 256 ? "llvm.x86.avx2.pmadd.wd"
                       : "llvm.x86.sse2.pmadd.wd";
}

/// Declares pairDotIntrinsic(bits) in `module`, once; the declaration.
func::FuncOp declarePairDot(ModuleOp module, unsigned bits) {
  StringRef name = pairDotIntrinsic(bits);
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder builder(module.getBodyRegion());
  Type i16 = builder.getI16Type(), i32 = builder.getI32Type();
  auto pairs = VectorType::get({int64_t(bits / 16)}, i16);
  auto type = builder.getFunctionType({pairs, pairs}, {VectorType::get({int64_t(bits / 32)}, i32)});
  auto declaration = func::FuncOp::create(builder, module.getLoc(), name, type);
  declaration.setPrivate();
  return declaration;
}

/// The vector of i16 that `value`, a vector of i32, sign-extends (through broadcasts adding
/// unit dimensions), or null.
Value pairSource(Value value) {
  while (auto broadcast = value.getDefiningOp<vector::BroadcastOp>())
    value = broadcast.getSource();
  auto extend = value.getDefiningOp<arith::ExtSIOp>();
  if (!extend)
    return nullptr;
  auto type = dyn_cast<VectorType>(extend.getIn().getType());
  return type && type.getElementType().isInteger(16) ? extend.getIn() : nullptr;
}

/// Lowers the contraction of a register tile of a pair-dot generic (rewriteIntoPairs): A's
/// m x 1 x 2 and B's 1 x n x 2 vectors of i16 into an m x n accumulator of i32. Each row of the
/// accumulator, a vector of lanes at a time, adds pmaddwd of a broadcast of the row's pair
/// of A (as one 32-bit lane) and the n pairs of B as they lie: lane j gets
/// a0 * B[0, j] + a1 * B[1, j]. LLVM fuses the add into the pmaddwd where the CPU has VNNI
/// (vpdpwssd).
struct PairDotContraction : OpRewritePattern<vector::ContractionOp> {
  PairDotContraction(MLIRContext *context, unsigned bits) : OpRewritePattern(context), bits(bits) {}

  LogicalResult matchAndRewrite(vector::ContractionOp op,
                                PatternRewriter &rewriter) const override {
    MLIRContext *context = op.getContext();
    AffineExpr m, n, p, t;
    bindDims(context, m, n, p, t);
    SmallVector<AffineMap> maps = {AffineMap::get(4, 0, {m, p, t}, context),
                                   AffineMap::get(4, 0, {p, n, t}, context),
                                   AffineMap::get(4, 0, {m, n}, context)};
    if (op.getKind() != vector::CombiningKind::ADD || op.getIndexingMapsArray() != maps)
      return rewriter.notifyMatchFailure(op, "not a pair-dot tile");
    Value a = pairSource(op.getLhs()), b = pairSource(op.getRhs());
    auto accType = dyn_cast<VectorType>(op.getAcc().getType());
    auto lhsType = cast<VectorType>(op.getLhs().getType());
    int64_t lanes = bits / 32;
    if (!a || !b || !accType || !accType.getElementType().isInteger(32) ||
        lhsType.getShape() != ArrayRef<int64_t>{accType.getDimSize(0), 1, 2} ||
        accType.getDimSize(1) % lanes != 0)
      return rewriter.notifyMatchFailure(op, "not a pair-dot tile of whole vectors");
    int64_t rows = accType.getDimSize(0), cols = accType.getDimSize(1);
    if (cast<VectorType>(b.getType()).getNumElements() != 2 * cols)
      return rewriter.notifyMatchFailure(op, "B's tile is not 1 x n x 2");
    StringRef intrinsic = pairDotIntrinsic(bits);
    Location loc = op.getLoc();
    Type i16 = rewriter.getI16Type(), i32 = rewriter.getI32Type();
    auto pairsType = VectorType::get({2 * lanes}, i16);
    auto lanesType = VectorType::get({lanes}, i32);
    Value aRows = vector::ShapeCastOp::create(
        rewriter, loc, VectorType::get({rows, 1}, i32),
        vector::BitCastOp::create(
            rewriter, loc, VectorType::get({rows, 1}, i32),
            vector::ShapeCastOp::create(rewriter, loc, VectorType::get({rows, 2}, i16), a)));
    Value bFlat = vector::ShapeCastOp::create(rewriter, loc, VectorType::get({2 * cols}, i16), b);
    SmallVector<Value> bChunks;
    for (int64_t c = 0; c < cols / lanes; ++c)
      bChunks.push_back(vector::ExtractStridedSliceOp::create(
          rewriter, loc, bFlat, ArrayRef<int64_t>{2 * lanes * c}, ArrayRef<int64_t>{2 * lanes},
          ArrayRef<int64_t>{1}));
    Value result = op.getAcc();
    FlatSymbolRefAttr name = FlatSymbolRefAttr::get(context, intrinsic);
    for (int64_t r = 0; r < rows; ++r) {
      Value pair = vector::ExtractOp::create(rewriter, loc, aRows, ArrayRef<int64_t>{r, 0});
      Value spread = vector::BitCastOp::create(
          rewriter, loc, pairsType, vector::BroadcastOp::create(rewriter, loc, lanesType, pair));
      Value row = vector::ExtractOp::create(rewriter, loc, result, ArrayRef<int64_t>{r});
      for (int64_t c = 0; c < cols / lanes; ++c) {
        Value acc =
            vector::ExtractStridedSliceOp::create(rewriter, loc, row, ArrayRef<int64_t>{lanes * c},
                                                  ArrayRef<int64_t>{lanes}, ArrayRef<int64_t>{1});
        Value dot = func::CallOp::create(rewriter, loc, name, TypeRange{lanesType},
                                         ValueRange{spread, bChunks[c]})
                        .getResult(0);
        Value sum = arith::AddIOp::create(rewriter, loc, acc, dot);
        row = vector::InsertStridedSliceOp::create(
            rewriter, loc, sum, row, ArrayRef<int64_t>{lanes * c}, ArrayRef<int64_t>{1});
      }
      result = vector::InsertOp::create(rewriter, loc, row, result, ArrayRef<int64_t>{r});
    }
    rewriter.replaceOp(op, result);
    return success();
  }

  unsigned bits;
};

/// Turns a whole tensor read into a vector and written into a slice of another back into that
/// slice's tensor.insert_slice. Vectorizing a tiled op's functions vectorizes the insert_slice
/// that puts a finished cache tile of C back into C; as a vector read and write (64 x 256
/// floats) it copies the tile onto itself after bufferization, where an insert_slice of a
/// tile extracted from the same place bufferizes to nothing.
struct WholeTensorWriteToInsertSlice : OpRewritePattern<vector::TransferWriteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(vector::TransferWriteOp write,
                                PatternRewriter &rewriter) const override {
    auto read = write.getVector().getDefiningOp<vector::TransferReadOp>();
    auto dest = dyn_cast<RankedTensorType>(write.getBase().getType());
    if (!read || !dest || write.getMask() || read.getMask() ||
        !write.getPermutationMap().isMinorIdentity() ||
        !read.getPermutationMap().isMinorIdentity() || write.hasOutOfBoundsDim() ||
        read.hasOutOfBoundsDim())
      return rewriter.notifyMatchFailure(write, "not a whole, plain read and write");
    auto source = dyn_cast<RankedTensorType>(read.getBase().getType());
    VectorType vector = read.getVectorType();
    if (!source || !source.hasStaticShape() || source.getShape() != vector.getShape() ||
        source.getRank() != dest.getRank() ||
        !llvm::all_of(read.getIndices(), [](Value index) { return isZeroInteger(index); }))
      return rewriter.notifyMatchFailure(write, "the read is not of a whole tensor");
    SmallVector<OpFoldResult> offsets = getAsOpFoldResult(write.getIndices());
    SmallVector<OpFoldResult> sizes =
        getAsIndexOpFoldResult(rewriter.getContext(), source.getShape());
    SmallVector<OpFoldResult> strides(source.getRank(), rewriter.getIndexAttr(1));
    rewriter.replaceOpWithNewOp<tensor::InsertSliceOp>(write, read.getBase(), write.getBase(),
                                                       offsets, sizes, strides);
    return success();
  }
};

/// The canonicalization patterns, as the canonicalizer collects them: the dialects' (a
/// tensor.cast folded into the linalg op that uses it) and the ops'.
FrozenRewritePatternSet canonicalization(MLIRContext *context) {
  RewritePatternSet patterns(context);
  for (Dialect *dialect : context->getLoadedDialects())
    dialect->getCanonicalizationPatterns(patterns);
  for (RegisteredOperationName name : context->getRegisteredOperations())
    name.getCanonicalizationPatterns(patterns, context);
  return FrozenRewritePatternSet(std::move(patterns));
}

/// Folds the bounds peeling left behind (affine.min of constants, slices of static size).
LogicalResult simplify(func::FuncOp function, const FrozenRewritePatternSet &canonical) {
  return applyPatternsGreedily(function, canonical);
}

/// Tiles every op of `function` level by level, simplifying between levels so that the next
/// level sees static shapes; true when anything was tiled.
FailureOr<bool> tileFunction(func::FuncOp function, const Plan &plan,
                             const FrozenRewritePatternSet &canonical) {
  // Elementwise arith and math on tensors become linalg first, in target modules too (the
  // pipeline's convert-elementwise-to-linalg reaches the host's functions only).
  RewritePatternSet elementwise(function.getContext());
  linalg::populateElementwiseToLinalgConversionPatterns(elementwise);
  // A contraction with a unit dimension becomes the smaller one: tosa.matmul's batch of one
  // is then a linalg.matmul, tiled as one.
  linalg::populateContractionOpRankReducingPatterns(elementwise);
  if (failed(applyPatternsGreedily(function, std::move(elementwise))))
    return function.emitError("turning elementwise ops into linalg did not converge");
  // An elementwise op's result took the place of its first operand, as an init it never
  // reads; bufferization then copies that operand into the result before the loop (16 MiB
  // read and written more for a 4M-element add). A tensor.empty init instead (upstream's
  // fusion helpers, with fusion itself declined): the loop writes the result alone.
  RewritePatternSet inits(function.getContext());
  linalg::populateElementwiseOpsFusionPatterns(inits, [](OpOperand *) { return false; });
  if (failed(applyPatternsGreedily(function, std::move(inits))))
    return function.emitError("freeing elementwise results of their operands did not converge");
  if (plan.pairDotBits) {
    SmallVector<linalg::MatmulOp> integerMatmuls;
    function.walk([&](linalg::MatmulOp op) {
      if (takesPairs(op))
        integerMatmuls.push_back(op);
    });
    IRRewriter rewriter(function.getContext());
    for (linalg::MatmulOp op : integerMatmuls)
      rewriteIntoPairs(rewriter, op);
  }
  // Vectors of i1 (or any type narrower than a byte) load and store packed bits, while a
  // tensor of them keeps a byte per element: a function with such an op is left scalar (the
  // schedule vectorizes every op of a function it is given, tiled or not).
  auto subByte = [](Type type) {
    Type element = getElementTypeOrSelf(type);
    return element.isIntOrFloat() && element.getIntOrFloatBitWidth() < 8;
  };
  WalkResult narrow = function.walk([&](linalg::LinalgOp op) {
    return llvm::any_of(op->getOperandTypes(), subByte) ||
                   llvm::any_of(op->getResultTypes(), subByte)
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  if (narrow.wasInterrupted())
    return false;
  IRRewriter rewriter(function.getContext());
  bool tiled = false;
  for (int64_t level = 0;; ++level) {
    SmallVector<std::pair<linalg::LinalgOp, SmallVector<int64_t>>> work;
    function.walk([&](linalg::LinalgOp op) {
      auto done = op->getAttrOfType<IntegerAttr>(kLevelAttr);
      if ((done ? done.getInt() : 0) != level)
        return;
      SmallVector<SmallVector<int64_t>> levels = tilesFor(op, plan, level);
      if (level < static_cast<int64_t>(levels.size()))
        work.emplace_back(op, levels[level]);
    });
    if (work.empty())
      break;
    for (auto &[op, sizes] : work)
      if (failed(tileAndPeel(rewriter, op, sizes, level + 1)))
        return failure();
    tiled = true;
    if (failed(simplify(function, canonical)))
      return function.emitError("simplifying tiled loops did not converge");
  }
  function.walk([](linalg::LinalgOp op) { op->removeAttr(kLevelAttr); });
  // Convolution tiles with one filter row become 1-D convolutions, which vectorize.
  RewritePatternSet decompose(function.getContext());
  linalg::populateDecomposeConvolutionPatterns(decompose);
  if (tiled && failed(applyPatternsGreedily(function, std::move(decompose))))
    return function.emitError("decomposing convolution tiles did not converge");
  return tiled;
}

class VectorizeKernels : public impl::VectorizeKernelsBase<VectorizeKernels> {
public:
  using VectorizeKernelsBase::VectorizeKernelsBase;

  /// Parses the schedule once per pass manager, not once per run; shared by the pass's copies.
  LogicalResult initialize(MLIRContext *context) override {
    schedule = std::make_shared<OwningOpRef<ModuleOp>>(
        parseSourceString<ModuleOp>(kVectorizeSchedule, context));
    if (!*schedule)
      return emitError(UnknownLoc::get(context), "the vectorization schedule does not parse");
    canonical = std::make_shared<FrozenRewritePatternSet>(canonicalization(context));
    return success();
  }

  void runOnOperation() override {
    ModuleOp root = getOperation();
    ModuleOp scheduleModule = schedule->get();
    auto sequence = scheduleModule.lookupSymbol("vectorize");
    auto lowering = scheduleModule.lookupSymbol("lower_contractions");
    SmallVector<func::FuncOp> functions;
    root.walk([&](func::FuncOp function) {
      if (!function.isExternal())
        functions.push_back(function);
    });
    llvm::DenseMap<Operation *, Plan> plans;
    for (func::FuncOp function : functions) {
      auto module = function->getParentOfType<ModuleOp>();
      auto [it, inserted] = plans.try_emplace(module);
      if (inserted)
        it->second = planFor(module);
      const Plan &plan = it->second;
      if (plan.strict)
        continue;
      FailureOr<bool> tiled = tileFunction(function, plan, *canonical);
      if (failed(tiled))
        return signalPassFailure();
      if (!*tiled)
        continue;
      if (failed(transform::applyTransformNamedSequence(function, sequence, scheduleModule,
                                                        transform::TransformOptions())))
        return signalPassFailure();
      RewritePatternSet slices(function.getContext());
      slices.add<WholeTensorWriteToInsertSlice>(function.getContext());
      if (failed(applyPatternsGreedily(function, std::move(slices))))
        return signalPassFailure();
      if (plan.pairDotBits) {
        func::FuncOp declaration =
            declarePairDot(function->getParentOfType<ModuleOp>(), plan.pairDotBits);
        RewritePatternSet pairDots(function.getContext());
        pairDots.add<PairDotContraction>(function.getContext(), plan.pairDotBits);
        if (failed(applyPatternsGreedily(function, std::move(pairDots))))
          return signalPassFailure();
        if (declaration.symbolKnownUseEmpty(declaration->getParentOp()))
          declaration.erase();
      }
      if (failed(transform::applyTransformNamedSequence(function, lowering, scheduleModule,
                                                        transform::TransformOptions())))
        return signalPassFailure();
    }
  }

private:
  std::shared_ptr<OwningOpRef<ModuleOp>> schedule;
  /// Built once per pass manager, as the canonicalizer builds its own.
  std::shared_ptr<FrozenRewritePatternSet> canonical;

  Plan planFor(ModuleOp module) {
    Plan plan;
    TargetCpu cpu = getTargetCpu(module, localRunsHere);
    plan.vectorBits = getVectorBits(cpu);
    plan.pairDotBits = getPairDotBits(cpu);
    if (auto spec = module->getAttrOfType<DictionaryAttr>(
            dialect::catalyst::CatalystDialect::kTargetAttrName)) {
      if (auto fp = spec.getAs<StringAttr>("fp"))
        plan.strict = fp.getValue() == "strict";
      // A module that names its own lowering pipeline is lowered as it says, from its IR.
      if (spec.getAs<StringAttr>("pipeline"))
        plan.strict = true;
    }
    return plan;
  }
};

} // namespace

} // namespace courier
