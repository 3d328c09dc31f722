// The engine's size limits: constants refused before any pass, at the op that holds them, and
// objects refused at the module that produced them.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include "llvm/Support/FileSystem.h"

#include <catch2/catch.hpp>

using namespace courier;
using namespace courier::testing;

namespace {

/// The diagnostics of a CompileError; fails the test for any other outcome.
std::vector<Diagnostic> diagnosticsOf(llvm::Expected<std::shared_ptr<Module>> module) {
  REQUIRE(failed(module));
  std::vector<Diagnostic> found;
  llvm::handleAllErrors(
      module.takeError(), [&](const CompileError &e) { found = e.diagnostics; },
      [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
  REQUIRE(!found.empty());
  return found;
}

/// The first diagnostic of a CompileError, as the engine prints it.
std::string firstDiagnostic(llvm::Expected<std::shared_ptr<Module>> module) {
  return diagnosticsOf(std::move(module))[0].str();
}

/// Files in the cache's object directory: a refused module must leave none behind.
size_t objectFiles(const TempDir &dir) {
  std::error_code ec;
  size_t count = 0;
  for (llvm::sys::fs::directory_iterator it(dir.path + "/objects", ec), end; it != end && !ec;
       it.increment(ec))
    ++count;
  return count;
}

/// A function returning a splat constant of `type`, which is on line 2.
std::string splatConstant(llvm::StringRef type) {
  return ("func.func @f() -> " + type + " {\n  %c = arith.constant dense<1.0> : " + type +
          "\n  return %c : " + type + "\n}\n")
      .str();
}

} // namespace

// 400 GB, more than this machine holds: a check that expanded the splat first, or let any
// pass do so, could not answer with this diagnostic.
TEST_CASE("a splat constant of 400 GB is refused before it is built, at the constant", "[limits]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  CHECK(firstDiagnostic(engine.compile(splatConstant("tensor<100000000000xf32>"), "big")) ==
        "big:2:8: error: 'arith.constant' holds a constant of 400000000000 bytes, more than the "
        "limit of 67108864 (maxConstantBytes)");
}

TEST_CASE("a constant in a nested target module is refused at its op", "[limits]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.maxConstantBytes = 1024;
  Engine engine(options);
  const char *source =
      "module @app {\n"
      "  func.func public @main(%x: tensor<512xf32>) -> tensor<512xf32> {\n"
      "    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<512xf32>) -> tensor<512xf32>\n"
      "    return %y : tensor<512xf32>\n"
      "  }\n"
      "  module @dev attributes {catalyst.target = {}} {\n"
      "    func.func public @k(%x: tensor<512xf32>) -> tensor<512xf32> {\n"
      "      %c = arith.constant dense<2.0> : tensor<512xf32>\n"
      "      %y = arith.mulf %x, %c : tensor<512xf32>\n"
      "      return %y : tensor<512xf32>\n"
      "    }\n"
      "  }\n"
      "}\n";
  CHECK(firstDiagnostic(engine.compile(source, "nested")) ==
        "nested:8:12: error: 'arith.constant' holds a constant of 2048 bytes, more than the "
        "limit of 1024 (maxConstantBytes)");
  CHECK(objectFiles(dir) == 0);
}

TEST_CASE("a memref.global's initial value counts as a constant", "[limits]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.maxConstantBytes = 1 << 20;
  Engine engine(options);
  const char *source = "module {\n"
                       "  memref.global \"private\" constant @table : memref<1024x1024xf64> = "
                       "dense<0.5>\n"
                       "}\n";
  CHECK(firstDiagnostic(engine.compile(source, "global")) ==
        "global:2:3: error: 'memref.global' @table holds a constant of 8388608 bytes, more than "
        "the limit of 1048576 (maxConstantBytes)");
}

TEST_CASE("a constant whose size overflows 64 bits is refused, with or without a limit",
          "[limits]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  std::string source = splatConstant("tensor<9223372036854775807x8xf32>");
  for (uint64_t limit : {uint64_t(64) << 20, uint64_t(0)}) {
    INFO("maxConstantBytes " << limit);
    options.maxConstantBytes = limit;
    Engine engine(options);
    CHECK(firstDiagnostic(engine.compile(source, "huge")) ==
          "huge:2:8: error: 'arith.constant' holds a constant of "
          "'tensor<9223372036854775807x8xf32>', whose size in bytes does not fit in 64 bits");
  }
}

TEST_CASE("a constant at the limit compiles and runs, one element more is refused", "[limits]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.maxConstantBytes = 1 << 20; // 262144 f32.
  Engine engine(options);
  auto source = [](int64_t n) {
    std::string type = "tensor<" + std::to_string(n) + "xf32>";
    return "func.func public @f() -> " + type + " {\n  %c = arith.constant dense<1.5> : " + type +
           "\n  return %c : " + type + "\n}\n";
  };
  llvm::Expected<std::shared_ptr<Module>> module = engine.compile(source(262144), "at");
  REQUIRE(ok(module));
  llvm::Expected<std::vector<Tensor>> outputs = (*module)->invoke("f", {});
  REQUIRE(ok(outputs));
  CHECK((*outputs)[0].numElements() == 262144);
  CHECK((*outputs)[0].at(262143) == 1.5);
  std::vector<Diagnostic> diagnostics = diagnosticsOf(engine.compile(source(262145), "over"));
  CHECK(diagnostics[0].message ==
        "'arith.constant' holds a constant of 1048580 bytes, more than the limit of 1048576 "
        "(maxConstantBytes)");
}

TEST_CASE("an object over maxObjectBytes is refused at the module that produced it", "[limits]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.maxObjectBytes = 64 << 10;
  // Unoptimised, so the constant's bytes stay in the object instead of being folded away.
  options.optLevel = 0;
  Engine engine(options);
  // 128 KiB of constant data lands in the object; the constant itself is within its limit.
  // (Added to a tensor, a splat would become one vector register.)
  const char *host = "module @app {\n"
                     "  func.func public @f() -> tensor<32768xf32> {\n"
                     "    %c = arith.constant dense<1.5> : tensor<32768xf32>\n"
                     "    return %c : tensor<32768xf32>\n"
                     "  }\n"
                     "}\n";
  std::vector<Diagnostic> diagnostics = diagnosticsOf(engine.compile(host, "host"));
  CHECK(diagnostics[0].file == "host");
  CHECK(diagnostics[0].line == 1);
  CHECK_THAT(diagnostics[0].message,
             Catch::StartsWith("'builtin.module' @app compiled to a host object of ") &&
                 Catch::EndsWith(" bytes, more than the limit of 65536 (maxObjectBytes)"));

  const char *target =
      "module @app {\n"
      "  func.func public @main(%x: tensor<32768xf32>) -> tensor<32768xf32> {\n"
      "    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<32768xf32>) -> tensor<32768xf32>\n"
      "    return %y : tensor<32768xf32>\n"
      "  }\n"
      // Strict: left as written, the splat is not folded into a vector register.
      "  module @dev attributes {catalyst.target = {fp = \"strict\"}} {\n"
      "    func.func public @k(%x: tensor<32768xf32>) -> tensor<32768xf32> {\n"
      "      %c = arith.constant dense<1.5> : tensor<32768xf32>\n"
      "      %y = arith.addf %x, %c : tensor<32768xf32>\n"
      "      return %y : tensor<32768xf32>\n"
      "    }\n"
      "  }\n"
      "}\n";
  diagnostics = diagnosticsOf(engine.compile(target, "target"));
  CHECK(diagnostics[0].line == 6);
  CHECK_THAT(diagnostics[0].message,
             Catch::StartsWith("'builtin.module' @dev compiled to an object of ") &&
                 Catch::EndsWith(" bytes, more than the limit of 65536 (max-object-bytes)"));
  // Refused before it was written to the cache.
  CHECK(objectFiles(dir) == 0);
}
