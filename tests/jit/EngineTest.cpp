// The engine end to end: MLIR text in, results out, on the in-process executor and on a
// real courier-executor process.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/transport/ExecutorProcess.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

std::string readSample(const std::string &relative) {
  return readFile(std::string(COURIER_SOURCE_DIR) + "/" + relative);
}

std::string message(llvm::Error error) { return llvm::toString(std::move(error)); }

/// The kind of an EngineError; fails the test for any other error.
ErrorCode kindOf(llvm::Error error) {
  ErrorCode kind = ErrorCode::InvalidInput;
  llvm::handleAllErrors(
      std::move(error), [&](const EngineError &e) { kind = e.kind; },
      [](const llvm::ErrorInfoBase &e) { FAIL("not an engine error: " << e.message()); });
  return kind;
}

std::vector<Diagnostic> diagnosticsOf(llvm::Error error) {
  std::vector<Diagnostic> found;
  llvm::handleAllErrors(
      std::move(error), [&](const CompileError &e) { found = e.diagnostics; },
      [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
  return found;
}

} // namespace

// Called by JIT'd code in the setup/teardown test; resolved from this process.
extern "C" void courier_test_record(int64_t event);
static std::mutex recordedMutex;
static std::vector<int64_t> recorded;
extern "C" void courier_test_record(int64_t event) {
  std::lock_guard<std::mutex> lock(recordedMutex);
  recorded.push_back(event);
}

TEST_CASE("a host-only module computes its result", "[engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(readSample("samples/01-host-only/app.mlir"), "host-only");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4}),
                                        Tensor::fromDoubles(DType::F32, {4}, {1, 1, 1, 1})});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  CHECK((*out)[0].dtype == DType::F32);
  CHECK((*out)[0].shape == std::vector<int64_t>{4});
  CHECK(values((*out)[0]) == std::vector<double>{4, 9, 16, 25});
}

TEST_CASE("a kernel dispatched to the in-process executor runs without a server", "[engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(readSample("samples/02-local-kernel/app.mlir"), "local");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{3, 5, 7, 9});
  CHECK((*module)->rawEntry("main") != nullptr);
}

TEST_CASE("a shape whose size overflows is refused before any call", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(R"mlir(
    func.func public @neg(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %r = arith.negf %x : tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })mlir",
                               "dynamic");
  REQUIRE(ok(module));
  Tensor wrapped{DType::F32, {4294967296, 4294967296}, {}};
  CHECK_THAT(message((*module)->invoke("neg", {wrapped}).takeError()),
             Catch::Contains("has a shape whose size overflows"));
}

TEST_CASE("scalars and tensors of every element type go in and out", "[engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  const char *text = R"mlir(
    func.func public @ints(%a: tensor<2xi8>, %b: tensor<2xi16>, %c: tensor<2xi32>, %d: i64,
                           %e: tensor<2xi1>) -> (tensor<2xi8>, tensor<2xi16>, tensor<2xi32>, i64, tensor<2xi1>) {
      %a2 = arith.addi %a, %a : tensor<2xi8>
      %b2 = arith.addi %b, %b : tensor<2xi16>
      %c2 = arith.addi %c, %c : tensor<2xi32>
      %d2 = arith.addi %d, %d : i64
      %t = arith.constant dense<true> : tensor<2xi1>
      %e2 = arith.xori %e, %t : tensor<2xi1>
      return %a2, %b2, %c2, %d2, %e2 : tensor<2xi8>, tensor<2xi16>, tensor<2xi32>, i64, tensor<2xi1>
    }
    func.func public @floats(%a: tensor<2x2xf16>, %b: f32, %c: tensor<f64>) -> (tensor<2x2xf16>, f32, tensor<f64>) {
      %a2 = arith.addf %a, %a : tensor<2x2xf16>
      %b2 = arith.mulf %b, %b : f32
      %c2 = arith.negf %c : tensor<f64>
      return %a2, %b2, %c2 : tensor<2x2xf16>, f32, tensor<f64>
    }
    func.func public @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
      %r = arith.addf %x, %x : tensor<?xf32>
      return %r : tensor<?xf32>
    }
  )mlir";
  auto module = engine.compile(text, "types");
  REQUIRE(ok(module));

  auto ints = (*module)->invoke("ints", {Tensor::fromDoubles(DType::I8, {2}, {3, -4}),
                                         Tensor::fromDoubles(DType::I16, {2}, {300, -5}),
                                         Tensor::fromDoubles(DType::I32, {2}, {70000, 1}),
                                         Tensor::fromDoubles(DType::I64, {}, {1ll << 40}),
                                         Tensor::fromDoubles(DType::I1, {2}, {1, 0})});
  REQUIRE(ok(ints));
  CHECK(values((*ints)[0]) == std::vector<double>{6, -8});
  CHECK(values((*ints)[1]) == std::vector<double>{600, -10});
  CHECK(values((*ints)[2]) == std::vector<double>{140000, 2});
  CHECK((*ints)[3].shape.empty());
  CHECK(values((*ints)[3]) == std::vector<double>{double(1ll << 41)});
  CHECK(values((*ints)[4]) == std::vector<double>{0, 1});

  auto floats =
      (*module)->invoke("floats", {Tensor::fromDoubles(DType::F16, {2, 2}, {0.5, 1, 2, 4}),
                                   Tensor::fromDoubles(DType::F32, {}, {3}),
                                   Tensor::fromDoubles(DType::F64, {}, {2.5})});
  REQUIRE(ok(floats));
  CHECK(values((*floats)[0]) == std::vector<double>{1, 2, 4, 8});
  CHECK(values((*floats)[1]) == std::vector<double>{9});
  CHECK((*floats)[2].shape.empty());
  CHECK(values((*floats)[2]) == std::vector<double>{-2.5});

  auto dynamic = (*module)->invoke("dynamic", {Tensor::fromDoubles(DType::F32, {3}, {1, 2, 3})});
  REQUIRE(ok(dynamic));
  CHECK((*dynamic)[0].shape == std::vector<int64_t>{3});
  CHECK(values((*dynamic)[0]) == std::vector<double>{2, 4, 6});
}

TEST_CASE("a public function invoke cannot call is named with the reason", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(R"mlir(
    func.func public @cplx(%x: complex<f32>) -> complex<f32> { return %x : complex<f32> }
    func.func public @ok(%x: f32) -> f32 { return %x : f32 }
  )mlir",
                               "complex");
  REQUIRE(ok(module));
  CHECK((*module)->entries().size() == 1);
  CHECK_THAT(message((*module)->invoke("cplx", {}).takeError()),
             Catch::Contains("entry 'cplx' of module 'complex' cannot be invoked: argument 0 has "
                             "type 'complex<f32>'"));
}

TEST_CASE("setup and teardown must take and return nothing", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(R"mlir(
    func.func @teardown(%x: memref<4xf64>) { return }
    func.func public @main() { return }
  )mlir",
                               "lifecycle.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].line == 2);
  CHECK_THAT(diagnostics[0].message,
             Catch::Contains("'teardown' must be a func.func taking and returning nothing"));
}

TEST_CASE("text nested too deep for the parser is refused with its position", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string deep;
  for (int i = 0; i < 5000; ++i)
    deep += "module {";
  deep += std::string(5000, '}');
  auto module = engine.compile(deep, "deep.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(diagnostics.size() == 1);
  CHECK(diagnostics[0].line == 1);
  CHECK_THAT(diagnostics[0].message, Catch::Contains("nested deeper than 512 levels"));
  // Braces in strings and comments do not count.
  std::string quoted = "// " + std::string(1000, '{') +
                       "\nfunc.func public @main() attributes "
                       "{note = \"" +
                       std::string(1000, '[') + "\"} { return }\n";
  CHECK(ok(engine.compile(quoted, "quoted.mlir")));
}

TEST_CASE("a syntax error comes back with its file, line and column", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile("func.func @main() {\n  retrun\n}\n", "broken.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].file == "broken.mlir");
  CHECK(diagnostics[0].line == 2);
  CHECK(diagnostics[0].column == 3);
  CHECK(diagnostics[0].severity == "error");
  CHECK_THAT(diagnostics[0].message, Catch::Contains("retrun"));
}

TEST_CASE("a compile error reads as mlir-opt prints it: location first, then the source line "
          "and a caret",
          "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile("func.func @main() {\n  retrun\n}\n", "broken.mlir");
  REQUIRE(failed(module));
  std::string text = message(module.takeError());
  CHECK_THAT(text, Catch::StartsWith("broken.mlir:2:3: error: custom op 'retrun' is unknown"));
  CHECK_THAT(text, Catch::EndsWith("\n  retrun\n  ^"));
}

TEST_CASE("a diagnostic shows only lines of the compiled text, never another file's",
          "[engine][errors]") {
  TempDir dir;
  std::string secret = dir.sub("secret.mlir");
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(secret, ec);
    REQUIRE(!ec);
    out << "the first line of a file the compile must not read\n";
  }
  Engine engine(optionsIn(dir));
  // The failing op's location names another file: the diagnostic names it, and shows none of
  // that file's text.
  auto module = engine.compile("func.func @main() {\n  %c = arith.constant 1 : i32\n"
                               "  func.return %c : i32 loc(\"" +
                                   secret + "\":1:5)\n}\n",
                               "elsewhere.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].file == secret);
  CHECK_FALSE(diagnostics[0].sourceLine);
  CHECK(diagnostics[0].render() == secret + ":1:5: error: " + diagnostics[0].message + "\n");
}

TEST_CASE("a diagnostic on a line too long to show keeps its location and drops the line",
          "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string padding(Diagnostic::kMaxSourceLineBytes, ' ');
  auto module = engine.compile("func.func @main() {" + padding + "retrun\n}\n", "wide.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK_FALSE(diagnostics[0].sourceLine);
  CHECK_THAT(
      diagnostics[0].render(),
      Catch::StartsWith("wide.mlir:1:" + std::to_string(20 + Diagnostic::kMaxSourceLineBytes) +
                        ": error: custom op 'retrun'"));
}

TEST_CASE("a pass failure comes back as diagnostics, not a crash", "[engine][errors]") {
  TempDir dir;
  std::vector<Diagnostic> streamed;
  EngineOptions options = optionsIn(dir);
  options.diagnosticSink = [&](const Diagnostic &d) { streamed.push_back(d); };
  Engine engine(options);
  std::string text = scaleProgram("local");
  text.replace(text.find("catalyst.target = {}"), 20,
               "catalyst.target = {triple = \"nonsense-triple\"}");
  auto module = engine.compile(text, "bad-triple.mlir");
  REQUIRE(failed(module));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(module.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK_THAT(diagnostics[0].message, Catch::Contains("unknown target triple 'nonsense-triple'"));
  CHECK(diagnostics[0].line == 7);
  CHECK(streamed.size() == diagnostics.size());
}

TEST_CASE("invoke checks the entry, the input count, dtype, rank and shape", "[engine][errors]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(readSample("samples/02-local-kernel/app.mlir"), "local");
  REQUIRE(ok(module));
  Module &m = **module;
  CHECK_THAT(message(m.invoke("nope", {}).takeError()),
             Catch::Contains("has no entry 'nope' (entries: main)"));
  CHECK_THAT(message(m.invoke("main", {}).takeError()),
             Catch::Contains("entry 'main' takes 1 inputs, got 0"));
  CHECK_THAT(
      message(m.invoke("main", {Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4})}).takeError()),
      Catch::Contains("input 0 of 'main' must be f64, got f32"));
  CHECK_THAT(
      message(
          m.invoke("main", {Tensor::fromDoubles(DType::F64, {2, 2}, {1, 2, 3, 4})}).takeError()),
      Catch::Contains("must have rank 1, got rank 2"));
  CHECK_THAT(
      message(m.invoke("main", {Tensor::fromDoubles(DType::F64, {3}, {1, 2, 3})}).takeError()),
      Catch::Contains("must have shape tensor<4xf64>, got dimension 0 of size 3"));
  Tensor huge{DType::F64, {4611686018427387904}, {}};
  CHECK_THAT(message(m.invoke("main", {huge}).takeError()),
             Catch::Contains("must have shape tensor<4xf64>"));
  Tensor torn = Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4});
  torn.bytes.resize(5);
  CHECK_THAT(message(m.invoke("main", {torn}).takeError()), Catch::Contains("holds 5 bytes"));
  CHECK(kindOf(m.invoke("nope", {}).takeError()) == ErrorCode::UnknownEntry);
  CHECK(kindOf(m.invoke("main", {}).takeError()) == ErrorCode::InvalidInput);
  // The module still works after every refusal.
  auto out = m.invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {0, 0, 0, 0})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{1, 1, 1, 1});
}

TEST_CASE("a module whose executor is down fails to load with the executor's address",
          "[engine][errors]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.executors.connectTimeout = std::chrono::milliseconds(500);
  Engine engine(options);
  // Port 1 on loopback refuses connections.
  auto module = engine.compile(scaleProgram("127.0.0.1:1"), "down");
  REQUIRE(failed(module));
  llvm::Error error = module.takeError();
  std::string text = llvm::toString(llvm::handleErrors(std::move(error), [](const EngineError &e) {
    CHECK(e.kind == ErrorCode::ExecutorUnavailable);
    CHECK(e.cause == ErrorCode::Unavailable); // The executor client's own code.
    return llvm::make_error<EngineError>(e.kind, e.message);
  }));
  CHECK_THAT(text, Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("a kernel runs on a real executor, whose failure mid-run surfaces at invoke",
          "[engine][executor]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.executors.requestTimeout = std::chrono::milliseconds(3000);
  Engine engine(options);
  auto executor = std::make_unique<testing::ExecutorProcess>();
  auto module = engine.compile(scaleProgram(executor->address()), "remote");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
  CHECK(executor->metric("courier_sessions") == 1);

  executor->kill();
  auto broken = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(failed(broken));
  std::string text;
  llvm::handleAllErrors(broken.takeError(), [&](const EngineError &e) {
    CHECK(e.kind == ErrorCode::ExecutorUnavailable);
    CHECK((e.cause == ErrorCode::Unavailable || e.cause == ErrorCode::ExecutorLost));
    text = e.message;
  });
  CHECK_THAT(text, Catch::Contains(executor->address()));
}

TEST_CASE("the executor override sends a module's targets elsewhere", "[engine][executor]") {
  TempDir dir;
  testing::ExecutorProcess executor;
  EngineOptions options = optionsIn(dir);
  options.executorOverride = executor.address();
  Engine engine(options);
  // The IR names an address nobody listens on; the override wins.
  auto module = engine.compile(scaleProgram("127.0.0.1:1"), "override");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 1, 1, 1})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{2, 2, 2, 2});
  CHECK(executor.metric("courier_sessions") == 1);
  module->reset();
  // The last module using the session is gone: the session is closed.
  CHECK(executor.metric("courier_sessions") == 0);
}

TEST_CASE("the same text and options hit the memory cache, a change recompiles",
          "[engine][cache]") {
  TempDir dir;
  EngineOptions options = optionsIn(dir);
  options.diskCache = false;
  Engine engine(options);
  std::string text = readSample("samples/01-host-only/app.mlir");
  auto first = engine.compile(text, "a");
  REQUIRE(ok(first));
  CHECK(!(*first)->compileTimes().cacheHit);
  auto second = engine.compile(text, "a");
  REQUIRE(ok(second));
  CHECK(second->get() == first->get());

  auto changed = engine.compile(text + "\n// edited\n", "a");
  REQUIRE(ok(changed));
  CHECK(changed->get() != first->get());

  EngineOptions other = options;
  other.optLevel = 0;
  Engine otherEngine(other);
  auto differentOptions = otherEngine.compile(text, "a");
  REQUIRE(ok(differentOptions));
  CHECK(!(*differentOptions)->compileTimes().cacheHit);
}

TEST_CASE("a new engine reuses compiled objects from the disk cache", "[engine][cache]") {
  TempDir dir;
  std::string text = readSample("samples/02-local-kernel/app.mlir");
  {
    Engine engine(optionsIn(dir));
    auto module = engine.compile(text, "disk");
    REQUIRE(ok(module));
    CHECK(!(*module)->compileTimes().cacheHit);
  }
  Engine engine(optionsIn(dir));
  auto module = engine.compile(text, "disk");
  REQUIRE(ok(module));
  CHECK((*module)->compileTimes().cacheHit);
  CHECK((*module)->compileTimes().passes == 0);
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{3, 5, 7, 9});

  // A torn cache entry is detected and recompiled, never loaded.
  llvm::SmallString<256> hostDir(dir.path);
  llvm::sys::path::append(hostDir, "host");
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(hostDir, ec), end; it != end && !ec; it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(".o"))
      REQUIRE(::truncate(it->path().c_str(), 100) == 0);
  Engine fresh(optionsIn(dir));
  auto recompiled = fresh.compile(text, "disk");
  REQUIRE(ok(recompiled));
  CHECK(!(*recompiled)->compileTimes().cacheHit);
}

TEST_CASE("several threads may invoke one module at once", "[engine][threads]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(readSample("samples/02-local-kernel/app.mlir"), "threads");
  REQUIRE(ok(module));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        double x = t * 1000 + i;
        auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {x, x, x, x})});
        if (!out) {
          llvm::consumeError(out.takeError());
          ++wrong;
        } else if (values((*out)[0]) != std::vector<double>(4, 2 * x + 1)) {
          ++wrong;
        }
      }
    });
  for (std::thread &t : threads)
    t.join();
  CHECK(wrong == 0);
}

TEST_CASE("several threads may compile different modules at once", "[engine][threads]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // Each thread's kernel adds its own constant, so every module is different.
      std::string text = scaleProgram("local");
      text.replace(text.find("arith.addf %x, %x"), 17,
                   "arith.addf %x, %x : tensor<4xf64>\n      %k = arith.constant dense<" +
                       std::to_string(t) + ".0> : tensor<4xf64>\n      %r2 = arith.addf %r, %k");
      text.replace(text.find("return %r : tensor<4xf64>\n    }\n  }\n}"), 25,
                   "return %r2 : tensor<4xf64>");
      auto module = engine.compile(text, "thread" + std::to_string(t));
      if (!module) {
        UNSCOPED_INFO(llvm::toString(module.takeError()));
        ++wrong;
        return;
      }
      auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 1, 1, 1})});
      if (!out || values((*out)[0]) != std::vector<double>(4, 2 + t)) {
        if (!out)
          UNSCOPED_INFO(llvm::toString(out.takeError()));
        ++wrong;
      }
    });
  for (std::thread &t : threads)
    t.join();
  CHECK(wrong == 0);
}

TEST_CASE("setup runs once after linking and teardown when the module goes", "[engine]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  const char *text = R"mlir(
    func.func private @courier_test_record(i64)
    func.func @setup() {
      %c = arith.constant 1 : i64
      func.call @courier_test_record(%c) : (i64) -> ()
      return
    }
    func.func @teardown() {
      %c = arith.constant 3 : i64
      func.call @courier_test_record(%c) : (i64) -> ()
      return
    }
    func.func public @main() {
      %c = arith.constant 2 : i64
      func.call @courier_test_record(%c) : (i64) -> ()
      return
    }
  )mlir";
  recorded.clear();
  {
    auto module = engine.compile(text, "lifecycle");
    REQUIRE(ok(module));
    CHECK(recorded == std::vector<int64_t>{1});
    REQUIRE(ok((*module)->invoke("main", {})));
    REQUIRE(ok((*module)->invoke("main", {})));
    CHECK(recorded == std::vector<int64_t>{1, 2, 2});
  }
  CHECK(recorded == std::vector<int64_t>{1, 2, 2, 3});
}

TEST_CASE("engines made one after another in a process each run their module's own setup",
          "[engine]") {
  // A module worker compiles its warm-up module with one engine and then the module with
  // another: the second engine's setup() must run as the first one's did.
  const char *text = R"mlir(
    func.func private @courier_test_record(i64)
    func.func public @setup() {
      %c = arith.constant 5 : i64
      func.call @courier_test_record(%c) : (i64) -> ()
      return
    }
    func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
      %y = arith.addf %x, %x : tensor<4xf64>
      return %y : tensor<4xf64>
    }
  )mlir";
  recorded.clear();
  for (int i = 0; i < 3; ++i) {
    TempDir dir;
    EngineOptions options = optionsIn(dir);
    options.diskCache = false;
    Engine engine(options);
    auto module = engine.compile(text, "own-setup-" + std::to_string(i));
    REQUIRE(ok(module));
    auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4})});
    REQUIRE(ok(out));
    CHECK(values((*out)[0]) == std::vector<double>{2, 4, 6, 8});
  }
  CHECK(recorded == std::vector<int64_t>{5, 5, 5});
}

TEST_CASE("a kernel that computes in place leaves its caller's input as it was", "[engine]") {
  // On the in-process executor the kernel's argument is the caller's own buffer.
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = engine.compile(R"mlir(
    module @app {
      func.func public @main(%x: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
        %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
        return %x, %y : tensor<4xf64>, tensor<4xf64>
      }
      module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
        func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
          %y = arith.addf %x, %x : tensor<4xf64>
          return %y : tensor<4xf64>
        }
      }
    })mlir",
                               "in-place");
  REQUIRE(ok(module));
  Tensor x = Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4});
  auto out = (*module)->invoke("main", {x});
  REQUIRE(ok(out));
  CHECK(values((*out)[0]) == std::vector<double>{1, 2, 3, 4});
  CHECK(values((*out)[1]) == std::vector<double>{2, 4, 6, 8});
  CHECK(values(x) == std::vector<double>{1, 2, 3, 4});
}
