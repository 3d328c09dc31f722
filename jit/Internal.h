// What the engine and its modules share inside jit/: the state of a loaded module and
// the constructors of classified errors.
#ifndef COURIER_JIT_INTERNAL_H
#define COURIER_JIT_INTERNAL_H

#include "jit/Engine.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/LogicalResult.h"

namespace mlir {
class Operation;
} // namespace mlir

namespace courier {

/// Packed wrappers are `<kPackedPrefix><entry>(void **args)`; see addPackedWrapper.
inline constexpr llvm::StringLiteral kPackedPrefix = "_courier_packed_";

struct Module::Impl {
  std::string name;
  std::vector<EntrySignature> entries;
  /// Public functions invoke cannot call, with the reason.
  llvm::StringMap<std::string> unsupported;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  struct Functions {
    void (*packed)(void **) = nullptr;
    void *ciface = nullptr;
  };
  llvm::StringMap<Functions> functions;
  void (*teardown)() = nullptr;
  std::unique_ptr<runtime::ModuleScope> scope;
  PhaseTimes times;
};

llvm::Error engineError(ErrorCode kind, std::string message);

/// An executor failure the runtime recorded, classified by the transport's wire code.
llvm::Error executorError(llvm::Twine context, llvm::Error cause);

/// The offset at which `text` first nests `openers` deeper than `maxDepth`, or npos. Text in
/// double-quoted strings (with backslash escapes) never counts; with `lineComments`, neither
/// does text from "//" to the end of the line. The parsers downstream recurse per level.
size_t findExcessNesting(llvm::StringRef text, unsigned maxDepth, llvm::StringRef openers,
                         llvm::StringRef closers, bool lineComments);

/// Fails, with an error at the op, if an attribute of `root` or of an op nested in it holds
/// element data (any ElementsAttr) of more than `maxBytes` (0: no limit) counted as it will be
/// built, every element of a splat included, or of a size that does not fit in 64 bits. Runs
/// before any pass: a splat costs nothing to parse but its full size in every pass after.
llvm::LogicalResult checkConstantSizes(mlir::Operation *root, uint64_t maxBytes);

/// Fails, with an error at `module`, if its host object of `bytes` exceeds `maxBytes` (0: no
/// limit). Target objects are checked where cross-compile-targets emits them.
llvm::LogicalResult checkHostObjectSize(mlir::Operation *module, uint64_t bytes, uint64_t maxBytes);

} // namespace courier

#endif // COURIER_JIT_INTERNAL_H
