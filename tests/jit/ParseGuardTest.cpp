// The parser guard: texts that would make MLIR's parser recurse too deep are refused at their
// place before any parse, and everything within the bound compiles on the engine's own stack.
#include "jit/ParseGuard.h"
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <pthread.h>

using namespace courier;
using courier::testing::failed;

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

std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  REQUIRE(buffer);
  return (*buffer)->getBuffer().str();
}

/// A fresh cache directory per test, removed afterwards.
struct TempDir {
  TempDir() {
    llvm::SmallString<128> dir;
    REQUIRE(!llvm::sys::fs::createUniqueDirectory("courier-parse-guard-test", dir));
    path = std::string(dir);
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string path;
};

EngineOptions optionsIn(const TempDir &dir) {
  EngineOptions options;
  options.cacheDir = dir.path;
  return options;
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
