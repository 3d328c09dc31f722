// The parser guard: texts that would make MLIR's parser recurse too deep are refused at their
// place before any parse, types and attributes aliases nest too deep are refused at the op
// holding them after it, and everything within the bounds compiles on the engine's own stack.
#include "jit/ParseGuard.h"
#include "dialect/Dialects.h"
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/Parser/Parser.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <pthread.h>

using namespace courier;
using namespace courier::testing;

namespace {

std::string repeat(llvm::StringRef piece, size_t times) {
  std::string text;
  text.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i)
    text += piece;
  return text;
}

/// `count` binary operators in one affine expression, none of which folds away.
std::string affineChain(llvm::StringRef op, size_t count) {
  std::string text = "#m = affine_map<(d0, d1)[s0] -> (d0";
  for (size_t i = 0; i < count; ++i)
    text += (" " + op + (i % 2 ? " d1" : " s0")).str();
  return text + ")>\nmodule {}\n";
}

struct Hostile {
  const char *what;
  std::string text;
  unsigned line, column; ///< Where the scan must point.
};

/// Each construct the parser recurses on, far past the bound (the first two are a quarter and
/// a few megabytes of text, as an attacker would send).
std::vector<Hostile> hostileTexts() {
  const size_t n = 100000;
  std::vector<Hostile> texts;
  texts.push_back({"unary minus in an affine map",
                   "#m = affine_map<(d0) -> (" + std::string(250000, '-') + "d0)>\nmodule {}\n", 1,
                   25 + 511});
  texts.push_back({"tuple types",
                   "func.func private @f() -> " + repeat("tuple<", 1000000) + "i32" +
                       repeat(">", 1000000) + "\n",
                   1, 26 + 6 * 513});
  texts.push_back({"llvm structs", "\n" + repeat("!llvm.struct<(", n) + "i32" + repeat(")>", n), 2,
                   14 * 256 + 13});
  texts.push_back({"vectors", repeat("vector<2x", n) + "f32" + repeat(">", n), 1, 9 * 512 + 7});
  texts.push_back({"memrefs", repeat("memref<2x", n) + "f32" + repeat(">", n), 1, 9 * 512 + 7});
  texts.push_back({"arrays", repeat("[", n) + repeat("]", n), 1, 513});
  texts.push_back(
      {"dense elements", "dense<" + repeat("[", n) + "1" + repeat("]", n) + ">", 1, 6 + 512});
  texts.push_back({"regions", repeat("module {", n) + repeat("}", n), 1, 8 * 513});
  texts.push_back({"call site locations",
                   "module {} loc(" + repeat("callsite(", n) + "\"a\":1:1" +
                       repeat(" at \"b\":1:1)", n) + ")\n",
                   1, 14 + 9 * 512});
  texts.push_back(
      {"nested parentheses in an affine map",
       "#m = affine_map<(d0) -> (" + repeat("d0 + (", n) + "d0" + repeat(")", n) + ")>\n", 1,
       25 + 6 * 255 + 4});
  texts.push_back({"a chain of additions", affineChain("+", n), 1, 35 + 5 * 510 + 2});
  texts.push_back({"a chain of floordivs", affineChain("floordiv", n), 1, 35 + 12 * 510 + 2});
  return texts;
}

/// `count` aliases `!<prefix>0` ... each naming the one before it once or, with `uses` of two,
/// twice: `open` + the names + `close` after `first`, the first's type.
std::string aliasChain(size_t count, unsigned uses, const std::string &prefix,
                       const std::string &first, const std::string &open,
                       const std::string &close) {
  std::string text = "!" + prefix + "0 = " + first + "\n";
  for (size_t i = 1; i < count; ++i) {
    std::string previous = "!" + prefix + std::to_string(i - 1);
    text += "!" + prefix + std::to_string(i) + " = " + open + previous;
    for (unsigned use = 1; use < uses; ++use)
      text += ", " + previous;
    text += close + "\n";
  }
  return text;
}

/// `count` aliases, each naming the one before it once (`!t1 = tuple<!t0>`) or, with
/// `uses` of two, twice. The last is `!t<count - 1>`, used on line `count + 1`.
std::string typeChain(size_t count, unsigned uses = 1) {
  return aliasChain(count, uses, "t", "tuple<i32>", "tuple<", ">");
}

/// The same with LLVM structs, which lower: declared by an `llvm.func` on line `count + 1`.
std::string structChain(size_t count, unsigned uses = 1) {
  return aliasChain(count, uses, "s", "!llvm.struct<(i32)>", "!llvm.struct<(", ")>") +
         "llvm.func @f(!s" + std::to_string(count - 1) + ")\n";
}

/// `#a1 = [#a0]` and so on, held by the module on line `count + 1`.
std::string attributeChain(size_t count) {
  std::string text = "#a0 = [1]\n";
  for (size_t i = 1; i < count; ++i)
    text += "#a" + std::to_string(i) + " = [#a" + std::to_string(i - 1) + "]\n";
  return text + "module attributes {test.a = #a" + std::to_string(count - 1) + "} {\n}\n";
}

/// Call sites inside call sites, `#l0` to `#l<count - 1>` on lines 1 to `count`.
std::string locationAliases(size_t count) {
  std::string text = "#l0 = loc(\"a.mlir\":1:1)\n";
  for (size_t i = 1; i < count; ++i)
    text += "#l" + std::to_string(i) + " = loc(callsite(#l" + std::to_string(i - 1) +
            " at \"b.mlir\":" + std::to_string(i) + ":1))\n";
  return text;
}

/// The deepest of them the location of a `func.return` on line `count + 2`, inside the
/// function on line `count + 1`.
std::string locationChain(size_t count) {
  return locationAliases(count) + "func.func @main() {\n  return loc(#l" +
         std::to_string(count - 1) + ")\n}\n";
}

/// The one diagnostic of a compile that must have failed.
Diagnostic onlyDiagnostic(llvm::Expected<std::shared_ptr<Module>> module) {
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics;
  llvm::handleAllErrors(
      module.takeError(), [&](const CompileError &e) { diagnostics = e.diagnostics; },
      [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
  REQUIRE(diagnostics.size() == 1);
  return diagnostics[0];
}

/// Runs `work` on a thread with a 256 KiB stack, too small for any deep parse.
void onSmallStack(std::function<void()> work) {
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, size_t(256) << 10);
  pthread_t thread;
  REQUIRE(pthread_create(
              &thread, &attributes,
              [](void *raw) -> void * {
                (*static_cast<std::function<void()> *>(raw))();
                return nullptr;
              },
              &work) == 0);
  pthread_attr_destroy(&attributes);
  pthread_join(thread, nullptr);
}

} // namespace

TEST_CASE("the scan refuses each construct the parser recurses on, at the level past the bound",
          "[parse-guard]") {
  for (const Hostile &hostile : hostileTexts()) {
    INFO(hostile.what);
    std::optional<ParseRefusal> refused = findParseRefusal(hostile.text);
    REQUIRE(refused);
    CHECK(refused->line == hostile.line);
    CHECK(refused->column == hostile.column);
    CHECK_THAT(refused->message, Catch::Contains("nested deeper than 512 levels"));
  }
}

TEST_CASE("the scan lets through text at the bound", "[parse-guard]") {
  CHECK_FALSE(findParseRefusal(repeat("[", 512) + repeat("]", 512)));
  CHECK(findParseRefusal(repeat("[", 513) + repeat("]", 513)));
  CHECK_FALSE(findParseRefusal("#m = affine_map<(d0) -> (" + std::string(510, '-') + "d0)>"));
  CHECK(findParseRefusal("#m = affine_map<(d0) -> (" + std::string(511, '-') + "d0)>"));
  // Closed brackets and ended expressions give their levels back.
  CHECK_FALSE(findParseRefusal(repeat("tuple<i32>, ", 10000)));
  CHECK_FALSE(findParseRefusal(repeat("(d0 + d1) * 2, ", 10000)));
}

TEST_CASE("what only looks like nesting does not count", "[parse-guard]") {
  // Strings and comments.
  CHECK_FALSE(findParseRefusal("// " + repeat("{", 1000) + "\n"));
  CHECK_FALSE(
      findParseRefusal("{note = \"" + repeat("[", 1000) + "\\\"" + repeat("-", 1000) + "\"}"));
  // Arrows and constraints are no brackets, value names and exponents no operators.
  CHECK_FALSE(findParseRefusal("tuple<" + repeat("() -> ", 1000) + "i32>"));
  CHECK_FALSE(findParseRefusal("(" + repeat("d0 >= 0 ", 100) + ")"));
  CHECK_FALSE(findParseRefusal("{" + repeat("%a-b-c-d ", 1000) + "}"));
  CHECK_FALSE(findParseRefusal("[" + repeat("1.0e-5 ", 1000) + "]"));
  // A closer with no opener to match closes nothing.
  CHECK(findParseRefusal(repeat(")>", 1000) + repeat("[", 513)));
  // A comma ends an expression; closing a bracket closes those left open inside it.
  CHECK_FALSE(findParseRefusal("[" + repeat("-1, ", 1000) + "]"));
  CHECK_FALSE(findParseRefusal(repeat("{ a < b }", 1000)));
}

TEST_CASE("every sample and test program passes the scan", "[parse-guard]") {
  std::error_code error;
  size_t scanned = 0;
  for (const char *folder : {"samples", "tests"}) {
    std::string root = std::string(COURIER_SOURCE_DIR) + "/" + folder;
    for (llvm::sys::fs::recursive_directory_iterator it(root, error), end; it != end && !error;
         it.increment(error)) {
      if (llvm::sys::path::extension(it->path()) != ".mlir")
        continue;
      INFO(it->path());
      CHECK_FALSE(findParseRefusal(readFile(it->path())));
      ++scanned;
    }
  }
  CHECK(!error);
  CHECK(scanned > 10);
}

TEST_CASE("the engine refuses hostile texts with a compile error at their place",
          "[parse-guard][engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (const Hostile &hostile : hostileTexts()) {
    INFO(hostile.what);
    llvm::Expected<std::shared_ptr<Module>> module = engine.compile(hostile.text, "hostile.mlir");
    REQUIRE(failed(module));
    std::vector<Diagnostic> diagnostics;
    llvm::handleAllErrors(
        module.takeError(), [&](const CompileError &e) { diagnostics = e.diagnostics; },
        [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
    REQUIRE(diagnostics.size() == 1);
    CHECK(diagnostics[0].file == "hostile.mlir");
    CHECK(diagnostics[0].line == hostile.line);
    CHECK(diagnostics[0].column == hostile.column);
    CHECK_THAT(diagnostics[0].message, Catch::Contains("nested deeper than 512 levels"));
  }
}

TEST_CASE("text nested just within the bound compiles on the engine's stack, not the caller's",
          "[parse-guard][engine]") {
  // Each parses in well over the caller's 256 KiB; the compile then ends either way, but
  // never with the process.
  std::vector<std::pair<const char *, std::string>> deep = {
      {"regions", repeat("module {", 510) + repeat("}", 510)},
      {"llvm structs",
       "llvm.func @f(" + repeat("!llvm.struct<(", 250) + "i32" + repeat(")>", 250) + ")\n"},
      {"attributes",
       "module attributes {a = " + repeat("{a = ", 500) + "1" + repeat("}", 500) + "} {}\n"},
      {"unary minus", "#m = affine_map<(d0) -> (" + std::string(500, '-') +
                          "d0)>\nfunc.func private @f(memref<4xf32, #m>)\n"},
      {"call site locations", "module {} loc(" + repeat("callsite(", 500) + "\"a\":1:1" +
                                  repeat(" at \"b\":1:1)", 500) + ")\n"},
  };
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (const auto &[what, text] : deep) {
    INFO(what);
    bool returned = false;
    onSmallStack([&, text = text] {
      llvm::Expected<std::shared_ptr<Module>> module = engine.compile(text, "deep.mlir");
      if (!module)
        llvm::consumeError(module.takeError());
      returned = true;
    });
    CHECK(returned);
  }
}

TEST_CASE("the engine refuses what chains of aliases nest too deep, at the op holding it",
          "[parse-guard][engine]") {
  const size_t n = 100000;
  struct Chain {
    const char *what;
    std::string text;
    unsigned line, column;
    const char *message;
  };
  std::vector<Chain> chains = {
      {"tuple types", typeChain(n) + "func.func private @f() -> !t" + std::to_string(n - 1), n + 1,
       1, "attribute 'function_type' of 'func.func' nested deeper than 1024 levels"},
      {"llvm structs", structChain(n), n + 1, 1,
       "attribute 'function_type' of 'llvm.func' nested deeper than 1024 levels"},
      {"a result's type", typeChain(n) + "%0 = ub.poison : !t" + std::to_string(n - 1), n + 1, 6,
       "the type of result #0 of 'ub.poison' nested deeper than 1024 levels"},
      {"array attributes", attributeChain(n), n + 1, 1,
       "attribute 'test.a' of 'builtin.module' nested deeper than 1024 levels"},
      // An op's own place is lost under an explicit location: the error is at the op around
      // it, or where the text starts.
      {"call site locations", locationChain(n), n + 1, 1,
       "the location of 'func.return' nested deeper than 1024 levels"},
      {"the outermost op's location",
       locationAliases(n) + "module {\n} loc(#l" + std::to_string(n - 1) + ")\n", 1, 1,
       "the location of 'builtin.module' nested deeper than 1024 levels"},
  };
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (const Chain &chain : chains) {
    INFO(chain.what);
    Diagnostic diagnostic = onlyDiagnostic(engine.compile(chain.text, "hostile.mlir"));
    CHECK(diagnostic.file == "hostile.mlir");
    CHECK(diagnostic.line == chain.line);
    CHECK(diagnostic.column == chain.column);
    CHECK_THAT(diagnostic.message,
               Catch::Contains(chain.message) && Catch::Contains("(through aliases)"));
  }
}

TEST_CASE("chains of aliases within the bound compile", "[parse-guard][engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  // The llvm.func's type attribute, its function type and the innermost i32 are three
  // levels more than the chain.
  CHECK(ok(engine.compile(structChain(kMaxIRDepth - 3), "deep.mlir")));
  CHECK_THAT(onlyDiagnostic(engine.compile(structChain(kMaxIRDepth - 2), "deep.mlir")).message,
             Catch::Contains("nested deeper than 1024 levels"));
  CHECK(ok(engine.compile(attributeChain(1000), "deep.mlir")));
  CHECK(ok(engine.compile(locationChain(1000), "deep.mlir")));
  // Shared subtrees within the bound on their expanded size: 2^11 structs.
  CHECK(ok(engine.compile(structChain(11, 2), "wide.mlir")));
}

TEST_CASE("aliases that double what they expand to are refused before anything expands them",
          "[parse-guard][engine]") {
  // 2^60 tuples as an operand type, which the verifier's error would print in full.
  std::string text = typeChain(61, 2) + "func.func @g(%a: !t60) -> !t60 {\n"
                                        "  %0 = arith.addi %a, %a : !t60\n"
                                        "  return %0 : !t60\n"
                                        "}\n";
  TempDir dir;
  Engine engine(optionsIn(dir));
  Diagnostic diagnostic = onlyDiagnostic(engine.compile(text, "wide.mlir"));
  CHECK(diagnostic.line == 62);
  CHECK_THAT(diagnostic.message, Catch::Contains("attribute 'function_type' of 'func.func' "
                                                 "expands to more than 1048576 types and "
                                                 "attributes (through aliases)"));
  CHECK_THAT(onlyDiagnostic(engine.compile(structChain(61, 2), "wide.mlir")).message,
             Catch::Contains("expands to more than"));
}

TEST_CASE("every sample and test program passes the nesting check", "[parse-guard]") {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  registerCourierDialects(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.allowUnregisteredDialects();
  // Invalid inputs of the lit tests are refused by the parser, not by the check.
  ctx.getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
  std::error_code error;
  size_t checked = 0;
  for (const char *folder : {"samples", "tests"}) {
    std::string root = std::string(COURIER_SOURCE_DIR) + "/" + folder;
    for (llvm::sys::fs::recursive_directory_iterator it(root, error), end; it != end && !error;
         it.increment(error)) {
      if (llvm::sys::path::extension(it->path()) != ".mlir")
        continue;
      INFO(it->path());
      std::string text = readFile(it->path());
      llvm::SmallVector<llvm::StringRef> cases;
      llvm::StringRef(text).split(cases, "// -----");
      for (llvm::StringRef piece : cases) {
        mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/false);
        mlir::OwningOpRef<mlir::ModuleOp> module =
            mlir::parseSourceString<mlir::ModuleOp>(piece, config, it->path());
        if (!module)
          continue;
        CHECK(mlir::succeeded(checkIRNesting(*module, it->path(), piece.size())));
        ++checked;
      }
    }
  }
  CHECK(!error);
  CHECK(checked > 20);
}
