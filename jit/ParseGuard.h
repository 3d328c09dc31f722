// What keeps hostile MLIR text from exhausting the stack: a scan that bounds everything the
// parser recurses on, and a thread whose stack holds everything within those bounds.
#ifndef COURIER_JIT_PARSEGUARD_H
#define COURIER_JIT_PARSEGUARD_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/LogicalResult.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
class Operation;
} // namespace mlir

namespace courier {

/// The deepest the parser may recurse, in levels: each open bracket (`{[(<`) is one, and so
/// is each operator of an expression not yet ended (`+`, `-`, `*`, `floordiv`, `ceildiv`,
/// `mod`; a comma or `=` ends one). Real programs stay far below it.
inline constexpr unsigned kMaxParseDepth = 512;

/// Stack reserved for a compile (parse, passes, translation, code generation). Address
/// space only: the pages a compile touches are the only ones committed.
inline constexpr size_t kCompileStackBytes = size_t(512) << 20;

/// The least stack a compile runs on: where address space is limited (a worker under
/// RLIMIT_AS), smaller stacks than kCompileStackBytes are tried down to this, still far above
/// what kMaxParseDepth levels need. Code generation threads take this much: they run LLVM
/// alone, on IR no deeper than what the parse let through.
inline constexpr size_t kMinCompileStackBytes = size_t(64) << 20;

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

/// The deepest a parsed type, attribute or location may nest, in levels (a leaf is one). Text
/// within kMaxParseDepth builds at most about two levels per bracket (`tensor<4xf32, T>` holds
/// T as a type attribute), so only aliases, which nest with no brackets, get past this; and
/// what recurses on these levels after the parse (~570 bytes each) needs well under a MiB.
inline constexpr unsigned kMaxIRDepth = 2 * kMaxParseDepth;

/// The expanded size (nodes, every shared subtree counted once per use) a type, attribute or
/// location may reach however short the text; see checkIRNesting.
inline constexpr uint64_t kMinExpandedLimit = uint64_t(1) << 20;

/// Refuses, with an error at the op holding it, a type, attribute or location of `root` or
/// any op inside it that nests deeper than kMaxIRDepth, or that expands to more than
/// max(kMinExpandedLimit, 2 * `textBytes`) nodes: what aliases build without nesting in the
/// text, and what every later recursion (verifier, passes, printing a diagnostic,
/// translation) would exhaust the stack or the memory on. Run before the verifier. Where
/// the refused thing is an op's location, the error is at the op around it, or at line 1 of
/// `bufferName` for the outermost op. Never recurses, and never prints what it refuses.
llvm::LogicalResult checkIRNesting(mlir::Operation *root, llvm::StringRef bufferName,
                                   size_t textBytes);

/// Runs `work` to completion on a thread with a stack of kCompileStackBytes (or less, down
/// to 64 MiB, where address space is limited; on the calling thread if no thread can be
/// made) and returns when it is done.
void runOnCompileStack(llvm::function_ref<void()> work);

} // namespace courier

#endif // COURIER_JIT_PARSEGUARD_H
