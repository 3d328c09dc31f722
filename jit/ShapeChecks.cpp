// Finds and checks the equalities between input dimensions an entry's code relies on
// (jit/ShapeChecks.h).
#include "jit/ShapeChecks.h"

#include "dialect/Dialects.h"
#include "jit/Internal.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>
#include <tuple>

namespace courier {
namespace {

/// `file:line:col` of `loc`, or empty.
std::string where(mlir::Location loc) {
  if (auto file = loc->findInstanceOf<mlir::FileLineColLoc>())
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(), file.getLine(),
                         file.getColumn())
        .str();
  return "";
}

/// Which entry input each value of a function is, for the function's block arguments that
/// are one.
using Inputs = llvm::DenseMap<mlir::Value, unsigned>;

struct Finder {
  mlir::ModuleOp module;
  std::vector<DimEquality> found;
  std::set<std::tuple<unsigned, unsigned, unsigned, unsigned>> seen;
  unsigned depth = 0;

  /// Records that dimension `a` of input `i` must equal dimension `b` of input `j`, where
  /// at least one of them is dynamic in the entry's signature (static ones invoke checks).
  void equal(unsigned i, unsigned a, unsigned j, unsigned b, mlir::Operation *op,
             llvm::ArrayRef<TensorSpec> specs) {
    if (i == j && a == b)
      return;
    if (specs[i].shape[a] >= 0 && specs[j].shape[b] >= 0)
      return;
    if (std::make_pair(i, a) > std::make_pair(j, b)) {
      std::swap(i, j);
      std::swap(a, b);
    }
    if (!seen.insert({i, a, j, b}).second)
      return;
    found.push_back({i, a, j, b, op->getName().getStringRef().str(), where(op->getLoc())});
  }

  void visit(mlir::Region &body, const Inputs &inputs, llvm::ArrayRef<TensorSpec> specs) {
    body.walk([&](mlir::Operation *op) {
      auto inputOf = [&](mlir::Value v) -> std::optional<unsigned> {
        auto it = inputs.find(v);
        if (it == inputs.end())
          return std::nullopt;
        return it->second;
      };
      auto rankOf = [&](unsigned input) { return specs[input].shape.size(); };
      if (auto linalgOp = llvm::dyn_cast<mlir::linalg::LinalgOp>(op)) {
        if (!linalgOp.hasPureTensorSemantics())
          return;
        // Each loop dimension: the (input, dim) pairs of operands that are entry inputs
        // indexed by exactly that loop dimension.
        llvm::DenseMap<unsigned, std::pair<unsigned, unsigned>> first;
        for (mlir::OpOperand &operand : op->getOpOperands()) {
          std::optional<unsigned> input = inputOf(operand.get());
          if (!input || !llvm::isa<mlir::RankedTensorType>(operand.get().getType()))
            continue;
          mlir::AffineMap map = linalgOp.getMatchingIndexingMap(&operand);
          for (auto [d, expr] : llvm::enumerate(map.getResults())) {
            auto dim = llvm::dyn_cast<mlir::AffineDimExpr>(expr);
            if (!dim || d >= rankOf(*input))
              continue;
            auto [it, inserted] =
                first.try_emplace(dim.getPosition(), *input, static_cast<unsigned>(d));
            if (!inserted)
              equal(it->second.first, it->second.second, *input, d, op, specs);
          }
        }
        return;
      }
      if (op->hasTrait<mlir::OpTrait::Elementwise>() && op->getNumResults() == 1 &&
          llvm::isa<mlir::RankedTensorType>(op->getResult(0).getType())) {
        std::optional<unsigned> firstInput;
        for (mlir::Value operand : op->getOperands()) {
          std::optional<unsigned> input = inputOf(operand);
          if (!input || !llvm::isa<mlir::RankedTensorType>(operand.getType()))
            continue;
          if (!firstInput) {
            firstInput = input;
            continue;
          }
          if (rankOf(*input) != rankOf(*firstInput))
            continue;
          for (unsigned d = 0; d < rankOf(*input); ++d)
            equal(*firstInput, d, *input, d, op, specs);
        }
        return;
      }
      if (auto launch = llvm::dyn_cast<dialect::catalyst::LaunchKernelOp>(op)) {
        auto callee = llvm::dyn_cast_or_null<mlir::func::FuncOp>(
            mlir::SymbolTable::lookupNearestSymbolFrom(module, launch.getCallee()));
        if (!callee || callee.isExternal() || depth > 0)
          return;
        Inputs mapped;
        for (auto [index, operand] : llvm::enumerate(launch.getInputs()))
          if (std::optional<unsigned> input = inputOf(operand);
              input && index < callee.getNumArguments())
            mapped[callee.getArgument(index)] = *input;
        ++depth;
        visit(callee.getBody(), mapped, specs);
        --depth;
      }
    });
  }
};

} // namespace

std::vector<DimEquality> findDimEqualities(mlir::func::FuncOp entry, mlir::ModuleOp module,
                                           llvm::ArrayRef<TensorSpec> specs) {
  Finder finder{module, {}, {}, 0};
  Inputs inputs;
  for (auto [index, argument] : llvm::enumerate(entry.getArguments()))
    if (index < specs.size() && !specs[index].isScalar)
      inputs[argument] = index;
  finder.visit(entry.getBody(), inputs, specs);
  return finder.found;
}

llvm::Error checkDimEqualities(const EntrySignature &entry,
                               llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes) {
  for (const DimEquality &e : entry.dimEqualities) {
    if (e.input >= shapes.size() || e.other >= shapes.size() || e.dim >= shapes[e.input].size() ||
        e.otherDim >= shapes[e.other].size())
      continue;
    int64_t a = shapes[e.input][e.dim], b = shapes[e.other][e.otherDim];
    if (a == b)
      continue;
    return engineError(
        ErrorCode::InvalidInput,
        llvm::formatv("inputs of '{0}' disagree: '{1}'{2} needs dimension {3} of input {4} "
                      "(size {5}) to equal dimension {6} of input {7} (size {8})",
                      entry.name, e.op, e.where.empty() ? "" : " at " + e.where, e.dim, e.input, a,
                      e.otherDim, e.other, b));
  }
  return llvm::Error::success();
}

} // namespace courier
