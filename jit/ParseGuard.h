// What keeps hostile MLIR text from exhausting the stack: a scan that bounds everything the
// parser recurses on, and a thread whose stack holds everything within those bounds.
#ifndef COURIER_JIT_PARSEGUARD_H
#define COURIER_JIT_PARSEGUARD_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace courier {

/// The deepest the parser may recurse, in levels: each open bracket (`{[(<`) is one, and so
/// is each operator of an expression not yet ended (`+`, `-`, `*`, `floordiv`, `ceildiv`,
/// `mod`; a comma or `=` ends one). Real programs stay far below it.
inline constexpr unsigned kMaxParseDepth = 512;

/// Stack reserved for a compile (parse, passes, translation, code generation). Address
/// space only: the pages a compile touches are the only ones committed.
inline constexpr size_t kCompileStackBytes = size_t(512) << 20;

/// Where, and why, a text would make the parser recurse deeper than kMaxParseDepth.
struct ParseRefusal {
  size_t offset;
  unsigned line, column; ///< 1-based.
  std::string message;
};

/// The first place in `text` past kMaxParseDepth, or nullopt. Text in double-quoted strings
/// and from `//` to the end of a line never counts. One pass over the text, no allocation
/// beyond a small stack of open brackets.
std::optional<ParseRefusal> findParseRefusal(llvm::StringRef text);

/// Runs `work` to completion on a thread with a stack of kCompileStackBytes (or less, down
/// to 64 MiB, where address space is limited; on the calling thread if no thread can be
/// made) and returns when it is done.
void runOnCompileStack(llvm::function_ref<void()> work);

} // namespace courier

#endif // COURIER_JIT_PARSEGUARD_H
