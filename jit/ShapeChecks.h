// The dimensions of an entry's inputs its code needs equal: found in the entry's IR (and in
// the kernels it launches with its inputs) before lowering, checked by invoke before any
// code runs, so that a matmul given A 2x3 and B 2x1 is refused instead of reading past B.
#ifndef COURIER_JIT_SHAPECHECKS_H
#define COURIER_JIT_SHAPECHECKS_H

#include "jit/Engine.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/Support/Error.h"

namespace courier {

/// The equalities `entry` (a public function of `module`) needs of its inputs' dynamic
/// dimensions: those of each linalg op and elementwise op on tensors that takes inputs of the
/// entry directly, in the entry and in the target-module functions it launches with them.
/// `specs` are the entry's inputs as invoke sees them.
std::vector<DimEquality> findDimEqualities(mlir::func::FuncOp entry, mlir::ModuleOp module,
                                           llvm::ArrayRef<TensorSpec> specs);

/// An invalid_input error naming the op and both sizes for the first equality `shapes` (one
/// shape per input of `entry`) breaks; success when all hold.
llvm::Error checkDimEqualities(const EntrySignature &entry,
                               llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

} // namespace courier

#endif // COURIER_JIT_SHAPECHECKS_H
