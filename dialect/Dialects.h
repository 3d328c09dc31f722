// The `executor` and `catalyst` dialects, and the bufferization models of their ops.
#ifndef COURIER_DIALECT_DIALECTS_H
#define COURIER_DIALECT_DIALECTS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "abi/KernelABI.h"

#include "dialect/ExecutorDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/ExecutorTypes.h.inc"

#define GET_OP_CLASSES
#include "dialect/ExecutorOps.h.inc"

#include "dialect/CatalystDialect.h.inc"

#define GET_OP_CLASSES
#include "dialect/CatalystOps.h.inc"

namespace courier {

/// The dialects' own C++ namespaces, apart from the executor server's (courier::executor).
namespace dialect {

namespace catalyst {
/// The fixed width, in bytes, of the NUL-padded field a `str` parameter travels in.
inline constexpr int64_t kStringFieldWidth = 256;

/// The type a C parameter kind of `catalyst.runtime_call` travels as on the wire (`ptr` is
/// 64 bits); null for `str` and unknown kinds.
mlir::Type cKindWireType(mlir::MLIRContext *ctx, llvm::StringRef kind);
} // namespace catalyst

namespace executor {
/// The names and layout of kernel entries and their signature tables; the ABI header holds
/// the one definition.
inline constexpr llvm::StringLiteral kEntryPrefix = COURIER_ENTRY_PREFIX;
inline constexpr llvm::StringLiteral kSignaturePrefix = COURIER_SIGNATURE_PREFIX;
inline constexpr int64_t kSignatureVersion = COURIER_SIGNATURE_VERSION;

inline std::string entrySymbol(llvm::StringRef function) { return (kEntryPrefix + function).str(); }
inline std::string signatureSymbol(llvm::StringRef function) {
  return (kSignaturePrefix + function).str();
}
} // namespace executor

} // namespace dialect

/// Registers the `executor` and `catalyst` dialects and the external models that let
/// one-shot bufferize handle `executor.call`, `executor.launch` and
/// `catalyst.launch_kernel`.
void registerCourierDialects(mlir::DialectRegistry &registry);

} // namespace courier

#endif // COURIER_DIALECT_DIALECTS_H
