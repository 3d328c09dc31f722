// Helpers the dispatch passes share: finding target modules, their executor addresses,
// and the per-function session for an address.
#ifndef COURIER_PASSES_TARGETMODULES_H
#define COURIER_PASSES_TARGETMODULES_H

#include "dialect/Dialects.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/MapVector.h"

#include <string>
#include <vector>

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

/// Registers every LLVM target this build has, once per process.
void initializeTargets();

/// What code for a target module is generated for.
struct TargetCpu {
  std::string triple, cpu, features;
};

/// The triple, CPU and features `target`'s `catalyst.target` names (a host module, or an
/// empty triple: this process's). A CPU of "native", or none for a module that runs in this
/// process (its dispatch address is "local") when `localRunsHere`, is this machine's CPU with
/// every feature it has; any other module without one gets "generic", which any CPU of its
/// architecture runs.
TargetCpu getTargetCpu(mlir::ModuleOp target, bool localRunsHere);

/// What code for an executor that reported `cpu` and `features` (its `/v1/health`) is
/// generated for, on `triple`: the CPU if this build of LLVM knows it ("generic" if not), every
/// reported feature it knows turned on, and every feature the CPU's model implies that the
/// reported ones do not give turned off (a virtual machine may hide what its model has).
TargetCpu getReportedTargetCpu(llvm::StringRef triple, llvm::StringRef cpu,
                               llvm::ArrayRef<std::string> features);

/// The instruction-set features code for `cpu` may use beyond those of the "generic" CPU of
/// its triple, by LLVM's names, sorted: those its features string turns on and those its CPU
/// implies, tuning features excluded. What an object records it needs (abi/KernelABI.h); empty
/// for a triple this build has no target for.
std::vector<std::string> getRequiredFeatures(const TargetCpu &cpu);

/// The width in bits of the vector registers floating-point code for `cpu` may use: 512 with
/// AVX-512, 256 with AVX, else 128 (SSE, NEON).
unsigned getVectorBits(const TargetCpu &cpu);

/// The widest vector of 16-bit integers whose adjacent pairs of products `cpu` sums into
/// 32-bit lanes in one instruction (x86's pmaddwd, which with VNNI also adds them to an
/// accumulator: vpdpwssd): 512 with AVX-512 BW, 256 with AVX2, 128 on other x86 CPUs, 0
/// elsewhere.
unsigned getPairDotBits(const TargetCpu &cpu);

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
