// What the engine and its modules share inside jit/: the state of a loaded module and
// the constructors of classified errors.
#ifndef COURIER_JIT_INTERNAL_H
#define COURIER_JIT_INTERNAL_H

#include "jit/Engine.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"

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

} // namespace courier

#endif // COURIER_JIT_INTERNAL_H
