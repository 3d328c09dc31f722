// Compiles that cost what changed: each target module's object, and the host code's, found
// again by fingerprint in live modules and in the disk cache, code generation on several
// threads giving the bytes one thread gives, and every failing module reported in order.
#include "jit/Engine.h"

#include "abi/ContentHash.h"
#include "tests/jit/TestSupport.h"
#include "tests/support/ManyKernels.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <map>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

/// Sixteen kernels adding 1, 2, ... 16.
std::vector<double> sixteenOffsets() {
  std::vector<double> offsets;
  for (int i = 1; i <= 16; ++i)
    offsets.push_back(i);
  return offsets;
}

/// What `module`'s main returns for 64 ones, checked to be 64 equal numbers.
double answerOf(const Module &module) {
  auto out =
      module.invoke("main", {Tensor::fromDoubles(DType::F64, {64}, std::vector<double>(64, 1))});
  REQUIRE(ok(out));
  std::vector<double> v = values((*out)[0]);
  REQUIRE(v.size() == 64);
  for (double x : v)
    REQUIRE(x == v[0]);
  return v[0];
}

/// The objects under `cache`/objects, by name, each checked to hash to its name.
std::map<std::string, std::string> objectsIn(const std::string &cache) {
  std::map<std::string, std::string> objects;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(cache + "/objects", ec), end; it != end && !ec;
       it.increment(ec)) {
    std::string bytes = readFile(it->path());
    std::string name = llvm::sys::path::filename(it->path()).str();
    CHECK(name == sha256Hex(bytes) + ".o");
    objects[name] = bytes;
  }
  return objects;
}

std::vector<Diagnostic> errorsOf(llvm::Error error) {
  std::vector<Diagnostic> errors;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) {
        for (const Diagnostic &d : e.diagnostics)
          if (d.severity == "error")
            errors.push_back(d);
      },
      [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
  return errors;
}

} // namespace

TEST_CASE("an edit of one kernel of sixteen compiles that kernel alone, and both versions answer "
          "right",
          "[engine][incremental]") {
  // In memory: the first version, still loaded, holds the objects the second reuses.
  EngineOptions options;
  options.diskCache = false;
  Engine engine(options);
  std::vector<double> offsets = sixteenOffsets();
  auto first = engine.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(first));
  const PhaseTimes &cold = (*first)->compileTimes();
  CHECK(cold.targetsCompiled == 16);
  CHECK(cold.targetsReused == 0);
  CHECK(!cold.hostReused);
  CHECK(answerOf(**first) == manyKernelAnswer(offsets, 1));

  std::vector<double> edited = offsets;
  edited[9] = 40;
  auto second = engine.compile(manyKernelProgram(edited), "many");
  REQUIRE(ok(second));
  const PhaseTimes &warm = (*second)->compileTimes();
  CHECK(warm.targetsCompiled == 1);
  CHECK(warm.targetsReused == 15);
  // The host ships its kernels by names the edit does not change: its object is reused.
  CHECK(warm.hostReused);
  CHECK(!warm.cacheHit);
  CHECK(answerOf(**second) == manyKernelAnswer(edited, 1));
  CHECK(manyKernelAnswer(edited, 1) != manyKernelAnswer(offsets, 1));
  // Both versions are loaded at once and each runs its own kernels.
  CHECK(answerOf(**first) == manyKernelAnswer(offsets, 1));
  CHECK(answerOf(**second) == manyKernelAnswer(edited, 1));

  // Back to the first text while it is loaded: the memory cache returns that module.
  auto again = engine.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(again));
  CHECK(again->get() == first->get());
}

TEST_CASE("a hot reload of one edited kernel compiles that kernel alone", "[reload][incremental]") {
  EngineOptions options;
  options.diskCache = false;
  Engine engine(options);
  ReloadableModule module(engine, "many");
  std::vector<double> offsets = sixteenOffsets();
  REQUIRE(ok(module.reload(manyKernelProgram(offsets))));
  for (int round = 0; round < 3; ++round) {
    offsets[round * 5] += 100;
    REQUIRE(ok(module.reload(manyKernelProgram(offsets))));
    const PhaseTimes &times = module.current()->compileTimes();
    CHECK(times.targetsCompiled == 1);
    CHECK(times.targetsReused == 15);
    CHECK(answerOf(*module.current()) == manyKernelAnswer(offsets, 1));
  }
}

TEST_CASE("moving kernels in their file, or adding comments, compiles nothing again",
          "[engine][incremental]") {
  EngineOptions options;
  options.diskCache = false;
  Engine engine(options);
  std::vector<double> offsets = sixteenOffsets();
  std::string text = manyKernelProgram(offsets);
  auto first = engine.compile(text, "many");
  REQUIRE(ok(first));
  // Every location changes; nothing the compiler sees does.
  std::string moved = "// a comment\n\n\n" + text;
  auto second = engine.compile(moved, "many");
  REQUIRE(ok(second));
  CHECK((*second)->compileTimes().targetsCompiled == 0);
  CHECK((*second)->compileTimes().targetsReused == 16);
  CHECK((*second)->compileTimes().hostReused);
  CHECK(answerOf(**second) == manyKernelAnswer(offsets, 1));
}

TEST_CASE("a new engine finds each module's object in the disk cache", "[cache][incremental]") {
  TempDir dir;
  std::vector<double> offsets = sixteenOffsets();
  {
    Engine engine(optionsIn(dir));
    auto module = engine.compile(manyKernelProgram(offsets), "many");
    REQUIRE(ok(module));
    CHECK((*module)->compileTimes().targetsCompiled == 16);
  }
  offsets[3] = -7;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(module));
  CHECK((*module)->compileTimes().targetsCompiled == 1);
  CHECK((*module)->compileTimes().targetsReused == 15);
  CHECK((*module)->compileTimes().hostReused);
  CHECK(answerOf(**module) == manyKernelAnswer(offsets, 1));

  // Another opt level compiles every module: the level is part of each fingerprint.
  EngineOptions o1 = optionsIn(dir);
  o1.optLevel = 1;
  Engine other(o1);
  auto recompiled = other.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(recompiled));
  CHECK((*recompiled)->compileTimes().targetsCompiled == 16);
  CHECK(!(*recompiled)->compileTimes().hostReused);
  CHECK(answerOf(**recompiled) == manyKernelAnswer(offsets, 1));
}

TEST_CASE("a module's worker reuses the disk cache's objects module by module",
          "[isolation][incremental]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.isolation = Isolation::Process;
  Engine engine(options);
  std::vector<double> offsets = sixteenOffsets();
  auto first = engine.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(first));
  CHECK((*first)->compileTimes().targetsCompiled == 16);
  offsets[15] = 0;
  // A fresh worker compiles the new version: its objects come from the cache directory.
  auto second = engine.compile(manyKernelProgram(offsets), "many");
  REQUIRE(ok(second));
  CHECK((*second)->compileTimes().targetsCompiled == 1);
  CHECK((*second)->compileTimes().targetsReused == 15);
  CHECK((*second)->compileTimes().hostReused);
  CHECK(answerOf(**second) == manyKernelAnswer(offsets, 1));
}

TEST_CASE("code generation on several threads makes the objects one thread makes",
          "[engine][incremental]") {
  TempDir serialDir, parallelDir;
  std::vector<double> offsets = sixteenOffsets();
  std::string text = manyKernelProgram(offsets);
  EngineOptions serial = optionsIn(serialDir), parallel = optionsIn(parallelDir);
  serial.jobs = 1;
  parallel.jobs = 4;
  double answers[2];
  int i = 0;
  for (const EngineOptions &options : {serial, parallel}) {
    Engine engine(options);
    auto module = engine.compile(text, "many");
    REQUIRE(ok(module));
    CHECK((*module)->compileTimes().targetsCompiled == 16);
    answers[i++] = answerOf(**module);
  }
  CHECK(answers[0] == answers[1]);
  std::map<std::string, std::string> one = objectsIn(serialDir.path),
                                     four = objectsIn(parallelDir.path);
  // Sixteen kernels adding different numbers: sixteen objects, the same ones byte for byte.
  CHECK(one.size() == 16);
  CHECK(one == four);
}

TEST_CASE("errors in two target modules are both reported, in the order of the modules",
          "[engine][errors][incremental]") {
  std::vector<double> offsets = sixteenOffsets();
  std::string text = manyKernelProgram(offsets);
  // Kernel 4 gets a CPU no target has (refused before lowering), kernel 11 a kernel whose code
  // generator fails (found on another thread, after kernel 4's lowering).
  auto replaceIn = [&](const std::string &module, const std::string &from, const std::string &to) {
    size_t at = text.find("module " + module + " ");
    REQUIRE(at != std::string::npos);
    at = text.find(from, at);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  };
  replaceIn("@k11", "catalyst.target = {}", "catalyst.target = {cpu = \"no-such-cpu\"}");
  replaceIn("@k4", "catalyst.target = {}", "catalyst.target = {triple = \"bpf\"}");
  for (unsigned jobs : {1u, 4u}) {
    EngineOptions options;
    options.diskCache = false;
    options.jobs = jobs;
    Engine engine(options);
    auto module = engine.compile(text, "broken.mlir");
    REQUIRE(!module);
    std::vector<Diagnostic> errors = errorsOf(module.takeError());
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].file == "broken.mlir");
    CHECK_THAT(errors[0].message, Catch::Contains("emitting the object for 'bpf' failed"));
    CHECK_THAT(errors[1].message, Catch::Contains("unknown CPU 'no-such-cpu'"));
    CHECK(errors[0].line < errors[1].line);
    CHECK(errors[0].sourceLine.value_or("").find("module @k4 ") != std::string::npos);
    CHECK(errors[1].sourceLine.value_or("").find("module @k11 ") != std::string::npos);
  }
}
