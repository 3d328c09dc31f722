// The parser's recursion bounded on the text, and the stack compiles run on.
//
// What MLIR 22's parser spends per level (measured: a parse of the construct nested 2000 and
// 4000 deep on a thread of a known stack, the difference in pages touched, Release build of
// libMLIR 22.1):
//   nested regions `module {`            2144 bytes
//   `[`, `{a = ` in attributes           1231, 1360
//   `!llvm.struct<(`, `!llvm.array<2 x`  2626, 2159 (two levels and one)
//   `tensor<`, `memref<`, `tuple<`,
//   `vector<`, `(` in types              223-655
//   `loc(callsite(`, `fused[`, `"n"(`    287-367
//   affine `(`, `-(`                     1343, 2353 (one level and two)
//   affine unary `-`                     1120 (it recurses once per minus)
//   affine `+`, `-` chains               160 (each binary operator recurses once more)
//   affine `*`, `floordiv`, `mod` chains 49 (and time quadratic in the chain)
// So kMaxParseDepth levels cost the parser at most ~1.2 MiB, and everything that recurses
// with the IR's depth afterwards (verifier, passes, translation, code generation) has the
// rest of kCompileStackBytes: ~1 MiB per level.
#include "jit/ParseGuard.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <pthread.h>

namespace courier {

namespace {

/// Address space may be limited (a worker under RLIMIT_AS): smaller stacks are tried down to
/// this, still far above what kMaxParseDepth levels need.
constexpr size_t kMinCompileStackBytes = size_t(64) << 20;

bool isBareIdChar(char c) { return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.'; }
/// Value, block, alias and dialect names (`%a-1`, `^bb0`, `#map`, `!llvm.ptr`) may hold '-'.
bool isSuffixIdChar(char c) { return isBareIdChar(c) || c == '-'; }

char openerOf(char closer) {
  switch (closer) {
  case '}':
    return '{';
  case ']':
    return '[';
  case ')':
    return '(';
  case '>':
    return '<';
  default:
    return 0;
  }
}

/// One open bracket, and the operators of the expression running inside it.
struct Level {
  char opener;
  unsigned operators;
};

class Scanner {
public:
  explicit Scanner(llvm::StringRef text) : text(text) { levels.push_back({0, 0}); }

  std::optional<size_t> run(std::string &message) {
    while (at < text.size()) {
      char c = text[at];
      char next = at + 1 < text.size() ? text[at + 1] : 0;
      if (c == '"') {
        skipString();
      } else if (c == '/' && next == '/') {
        at = std::min(text.find('\n', at), text.size());
      } else if (c == '{' || c == '[' || c == '(' || c == '<') {
        levels.push_back({c, 0});
        if (++depth > kMaxParseDepth) {
          message = llvm::formatv("nested deeper than {0} levels", kMaxParseDepth).str();
          return at;
        }
        ++at;
      } else if (c == '-' && next == '>') {
        at += 2; // A function type's arrow.
      } else if (c == '>' && next == '=') {
        at += 2; // An integer set's constraint.
      } else if (char opener = openerOf(c)) {
        close(opener);
        ++at;
      } else if (c == '+' || c == '-' || c == '*') {
        if (addOperator()) {
          message = operatorMessage();
          return at;
        }
        ++at;
      } else if (c == ',' || c == '=') {
        depth -= levels.back().operators;
        levels.back().operators = 0;
        ++at;
      } else if (c == '%' || c == '^' || c == '#' || c == '!') {
        for (++at; at < text.size() && isSuffixIdChar(text[at]); ++at)
          ;
      } else if (llvm::isDigit(c)) {
        skipNumber();
      } else if (llvm::isAlpha(c) || c == '_') {
        size_t start = at;
        for (++at; at < text.size() && isBareIdChar(text[at]); ++at)
          ;
        llvm::StringRef word = text.slice(start, at);
        if ((word == "floordiv" || word == "ceildiv" || word == "mod") && addOperator()) {
          message = operatorMessage();
          return start;
        }
      } else {
        ++at;
      }
    }
    return std::nullopt;
  }

private:
  static std::string operatorMessage() {
    return llvm::formatv("expression nested deeper than {0} levels (each operator of an "
                         "expression and each bracket counts one)",
                         kMaxParseDepth)
        .str();
  }

  /// The parser recurses once per operator until the expression ends.
  bool addOperator() {
    ++levels.back().operators;
    return ++depth > kMaxParseDepth;
  }

  /// Closes the innermost `opener` and every level inside it; a closer with no opener to
  /// match is not the parser's closer either (`a < b` in an op's own syntax, say).
  void close(char opener) {
    size_t match = levels.size();
    while (match > 1 && levels[match - 1].opener != opener)
      --match;
    if (match == 1)
      return;
    for (size_t i = match - 1; i < levels.size(); ++i)
      depth -= 1 + levels[i].operators;
    levels.truncate(match - 1);
  }

  void skipString() {
    for (++at; at < text.size(); ++at) {
      if (text[at] == '\\')
        ++at;
      else if (text[at] == '"')
        break;
    }
    ++at;
  }

  /// `4x8xf32`, `0x1F`, `1.5e-3`: the sign of a float's exponent is no operator.
  void skipNumber() {
    bool fraction = false;
    for (++at; at < text.size(); ++at) {
      char c = text[at];
      if (c == '.') {
        fraction = true;
      } else if (fraction && (c == 'e' || c == 'E') && at + 1 < text.size() &&
                 (text[at + 1] == '+' || text[at + 1] == '-')) {
        ++at;
      } else if (!llvm::isAlnum(c) && c != '_') {
        break;
      }
    }
  }

  llvm::StringRef text;
  size_t at = 0;
  /// Open brackets plus the operators of every expression still running.
  unsigned depth = 0;
  /// The text outside any bracket first, then each open bracket.
  llvm::SmallVector<Level, 32> levels;
};

} // namespace

std::optional<ParseRefusal> findParseRefusal(llvm::StringRef text) {
  std::string message;
  std::optional<size_t> at = Scanner(text).run(message);
  if (!at)
    return std::nullopt;
  llvm::StringRef before = text.take_front(*at);
  auto line = static_cast<unsigned>(before.count('\n') + 1);
  auto column = static_cast<unsigned>(*at - (before.rfind('\n') + 1) + 1);
  return ParseRefusal{*at, line, column, std::move(message)};
}

void runOnCompileStack(llvm::function_ref<void()> work) {
  for (size_t bytes = kCompileStackBytes; bytes >= kMinCompileStackBytes; bytes /= 2) {
    pthread_attr_t attributes;
    if (pthread_attr_init(&attributes) != 0)
      break;
    pthread_attr_setstacksize(&attributes, bytes);
    pthread_t thread;
    int failed = pthread_create(
        &thread, &attributes,
        [](void *raw) -> void * {
          (*static_cast<llvm::function_ref<void()> *>(raw))();
          return nullptr;
        },
        &work);
    pthread_attr_destroy(&attributes);
    if (!failed) {
      pthread_join(thread, nullptr);
      return;
    }
  }
  work();
}

} // namespace courier
