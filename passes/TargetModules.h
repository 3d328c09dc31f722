// Helpers the dispatch passes share: finding target modules, their executor addresses,
// and the per-function session for an address.
#ifndef COURIER_PASSES_TARGETMODULES_H
#define COURIER_PASSES_TARGETMODULES_H

#include "dialect/Dialects.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/MapVector.h"

#include <string>

namespace courier {

/// The address a module runs on when its `catalyst.dispatch` names none.
inline constexpr llvm::StringLiteral kLocalAddress = "local";

/// Modules directly nested in `host` that carry `catalyst.target` or `catalyst.dispatch`.
llvm::SmallVector<mlir::ModuleOp> getTargetModules(mlir::ModuleOp host);

/// The executor address of a target module: its `catalyst.dispatch` address, or "local".
std::string getDispatchAddress(mlir::ModuleOp target);

/// The distinct addresses the `catalyst.dispatch` attributes of `host`'s target modules name,
/// in order: the executors an empty `dispatch` may bind to (modules without one do not count).
llvm::SmallVector<std::string> getProgramExecutors(mlir::ModuleOp host);

/// Opens sessions at the top of functions, at most once per function and address.
class SessionCache {
public:
  /// The session for `address` in the function enclosing `user`.
  mlir::Value get(mlir::Operation *user, llvm::StringRef address);

private:
  llvm::DenseMap<std::pair<mlir::Operation *, mlir::StringAttr>, mlir::Value> sessions;
};

} // namespace courier

#endif // COURIER_PASSES_TARGETMODULES_H
