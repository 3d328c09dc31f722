// courier-check-lowered: the end of the default lowering; names the first op it left that
// is not of the LLVM dialect, where the user wrote it.
#include "passes/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/IR/BuiltinOps.h"

namespace courier {
#define GEN_PASS_DEF_CHECKLOWERED
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

/// `file:line:col` of the first file location in `loc`, or `loc` as MLIR prints it.
std::string where(Location loc) {
  if (auto file = loc->findInstanceOf<FileLineColLoc>())
    return (file.getFilename().getValue() + ":" + llvm::Twine(file.getLine()) + ":" +
            llvm::Twine(file.getColumn()))
        .str();
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

/// Whether `op` may stay in a module translated to LLVM IR.
bool isLowered(Operation *op) {
  // OpenMP's ops (parallel loops, courier-parallelize-kernels) translate to runtime calls.
  return isa<ModuleOp>(op) || isa<LLVM::LLVMDialect, omp::OpenMPDialect>(op->getDialect());
}

struct CheckLowered : impl::CheckLoweredBase<CheckLowered> {
  void runOnOperation() override {
    // A cast the conversions could not reconcile stands for an op they did not convert:
    // that op is what the user can act on, so it is named first.
    Operation *unlowered = nullptr;
    Operation *cast = nullptr;
    getOperation().walk([&](Operation *op) {
      if (isLowered(op))
        return WalkResult::advance();
      if (isa<UnrealizedConversionCastOp>(op)) {
        if (!cast)
          cast = op;
        return WalkResult::advance();
      }
      unlowered = op;
      return WalkResult::interrupt();
    });
    if (Operation *op = unlowered ? unlowered : cast) {
      InFlightDiagnostic diagnostic = emitError(op->getLoc())
                                      << "'" << op->getName() << "' at " << where(op->getLoc())
                                      << " could not be lowered to LLVM by the default pipeline";
      if (!unlowered)
        diagnostic << ": no conversion takes " << op->getOperandTypes() << " to "
                   << op->getResultTypes();
      signalPassFailure();
    }
  }
};

} // namespace
} // namespace courier
