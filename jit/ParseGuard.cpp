// The parser's recursion bounded on the text, the IR's nesting bounded after the parse, and
// the stack compiles run on.
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
//
// Aliases nest with no brackets (`!t1 = tuple<!t0>`, `#a1 = [#a0]`, `#l1 = loc(callsite(#l0
// at ...))`): each line parses with no recursion, but a chain of them builds a type, attribute
// or location that everything after the parse recurses on, ~570 bytes per level (a
// 1.2-million-line chain overflows even kCompileStackBytes), and a few lines can build one
// whose expanded size doubles per line. checkIRNesting bounds both on the parsed IR.
#include "jit/ParseGuard.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <pthread.h>

namespace courier {

namespace {

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

/// A type or an attribute (locations are attributes), by its uniqued storage: one node per
/// distinct type or attribute however many times aliases name it.
struct Node {
  const void *storage;
  bool isType;
};

template <typename Fn> void forEachChild(Node node, Fn &&fn) {
  auto attrFn = [&](mlir::Attribute attr) {
    if (attr)
      fn(Node{attr.getAsOpaquePointer(), false});
  };
  auto typeFn = [&](mlir::Type type) {
    if (type)
      fn(Node{type.getAsOpaquePointer(), true});
  };
  if (node.isType)
    mlir::Type::getFromOpaquePointer(node.storage).walkImmediateSubElements(attrFn, typeFn);
  else
    mlir::Attribute::getFromOpaquePointer(node.storage).walkImmediateSubElements(attrFn, typeFn);
}

Node nodeOf(mlir::Type type) { return {type.getAsOpaquePointer(), true}; }
Node nodeOf(mlir::Attribute attr) { return {attr.getAsOpaquePointer(), false}; }

enum class Verdict { fits, tooDeep, tooLarge };

/// Measures nodes with an explicit stack, each distinct node once: its depth and expanded
/// size are kept, so a node reached again through another alias (or another op) costs one
/// lookup. The walk is linear in the distinct nodes and the edges between them, which the
/// parser built one by one from the text, whatever the expanded size it computes. Of no use
/// after a refusal: the nodes being walked then stay open.
class NestingMeter {
public:
  explicit NestingMeter(uint64_t maxSize) : maxSize(maxSize) {}

  Verdict measure(Node root) {
    if (auto it = known.find(root.storage); it != known.end())
      return verdictOf(it->second);
    stack.assign(1, {root, false});
    unsigned open = 0;
    while (!stack.empty()) {
      auto [node, expanded] = stack.back();
      if (!expanded) {
        // Known already: measured through another parent, or open, being one of the nodes
        // the walk is inside of (a cycle, as an LLVM struct naming itself).
        if (!known.try_emplace(node.storage).second) {
          stack.pop_back();
          continue;
        }
        // The open nodes are a path from the root: refused as soon as it is too long, not
        // after walking a chain of aliases to its end.
        if (++open > kMaxIRDepth)
          return Verdict::tooDeep;
        stack.back().expanded = true;
        forEachChild(node, [&](Node child) {
          if (!known.count(child.storage))
            stack.push_back({child, false});
        });
        continue;
      }
      stack.pop_back();
      --open;
      Measure measured{false, 1, 1};
      forEachChild(node, [&](Node child) {
        const Measure &sub = known.find(child.storage)->second;
        if (sub.open)
          return; // The edge closing a cycle adds nothing.
        measured.depth = std::max(measured.depth, sub.depth + 1);
        measured.size = std::min(measured.size + sub.size, maxSize + 1);
      });
      known[node.storage] = measured;
      if (Verdict verdict = verdictOf(measured); verdict != Verdict::fits)
        return verdict;
    }
    return Verdict::fits;
  }

private:
  struct Measure {
    bool open = true;
    unsigned depth = 0;
    /// Nodes with every shared subtree counted once per use, up to maxSize + 1.
    uint64_t size = 0;
  };
  struct Frame {
    Node node;
    bool expanded;
  };

  Verdict verdictOf(const Measure &measure) const {
    if (measure.depth > kMaxIRDepth)
      return Verdict::tooDeep;
    return measure.size > maxSize ? Verdict::tooLarge : Verdict::fits;
  }

  uint64_t maxSize;
  llvm::DenseMap<const void *, Measure> known;
  std::vector<Frame> stack;
};

} // namespace

llvm::LogicalResult checkIRNesting(mlir::Operation *root, llvm::StringRef bufferName,
                                   size_t textBytes) {
  // What the text spells out inline is at most a node or two per byte (`[1,2]` is two
  // integers and their type); printing or walking more than twice that comes from aliases.
  uint64_t maxSize = std::max<uint64_t>(kMinExpandedLimit, 2 * uint64_t(textBytes));
  NestingMeter meter(maxSize);
  auto refuse = [&](mlir::Location at, Verdict verdict, const llvm::Twine &what) {
    mlir::InFlightDiagnostic error = mlir::emitError(at) << what;
    if (verdict == Verdict::tooDeep)
      error << " nested deeper than " << kMaxIRDepth << " levels";
    else
      error << " expands to more than " << maxSize << " types and attributes";
    error << " (through aliases)";
    return mlir::WalkResult::interrupt();
  };
  // Pre-order: the op around any op has had its location checked, so a refused location
  // can be reported there. Operand types need no walk: each operand is some op's result or
  // some block's argument.
  mlir::WalkResult walked = root->walk<mlir::WalkOrder::PreOrder>([&](mlir::Operation *op) {
    llvm::StringRef name = op->getName().getStringRef();
    if (Verdict verdict = meter.measure(nodeOf(op->getLoc())); verdict != Verdict::fits) {
      mlir::Operation *parent = op->getParentOp();
      mlir::Location at =
          parent ? parent->getLoc()
                 : mlir::Location(mlir::FileLineColLoc::get(op->getContext(), bufferName, 1, 1));
      return refuse(at, verdict, "the location of '" + name + "'");
    }
    // Inherent attributes (properties) included.
    for (mlir::NamedAttribute attr : op->getAttrDictionary())
      if (Verdict verdict = meter.measure(nodeOf(attr.getValue())); verdict != Verdict::fits)
        return refuse(op->getLoc(), verdict,
                      "attribute '" + attr.getName().getValue() + "' of '" + name + "'");
    for (auto [index, type] : llvm::enumerate(op->getResultTypes()))
      if (Verdict verdict = meter.measure(nodeOf(type)); verdict != Verdict::fits)
        return refuse(op->getLoc(), verdict,
                      "the type of result #" + llvm::Twine(index) + " of '" + name + "'");
    for (mlir::Region &region : op->getRegions())
      for (mlir::Block &block : region)
        for (mlir::BlockArgument arg : block.getArguments()) {
          Verdict verdict = meter.measure(nodeOf(arg.getType()));
          const char *what = "the type";
          if (verdict == Verdict::fits) {
            verdict = meter.measure(nodeOf(arg.getLoc()));
            what = "the location";
          }
          if (verdict != Verdict::fits)
            return refuse(op->getLoc(), verdict,
                          llvm::Twine(what) + " of block argument #" +
                              llvm::Twine(arg.getArgNumber()) + " in '" + name + "'");
        }
    return mlir::WalkResult::advance();
  });
  return llvm::failure(walked.wasInterrupted());
}

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
