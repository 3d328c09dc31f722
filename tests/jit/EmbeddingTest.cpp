// The engine as an application embeds it: tensors built from typed data and read through
// typed views, a caller's buffer passed without a copy, programs compiled from files with
// the file's path in every diagnostic, error kinds by name, and modules that outlive their
// engine.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

const char *kSquare = R"mlir(
module @app {
  func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %y = catalyst.launch_kernel @dev::@square(%x) : (tensor<3xf32>) -> tensor<3xf32>
    return %y : tensor<3xf32>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @square(%x: tensor<3xf32>) -> tensor<3xf32> {
      %r = arith.mulf %x, %x : tensor<3xf32>
      return %r : tensor<3xf32>
    }
  }
}
)mlir";

// The address of the buffer an entry written at the memref level is handed.
const char *kAddress = R"mlir(
func.func public @address(%x: memref<4xi32>) -> index {
  %p = memref.extract_aligned_pointer_as_index %x : memref<4xi32> -> index
  return %p : index
}
)mlir";

EngineOptions noDiskCache() {
  EngineOptions options;
  options.diskCache = false;
  return options;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::vector<Diagnostic> diagnosticsOf(llvm::Error error, std::string *summary = nullptr) {
  std::vector<Diagnostic> found;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) {
        found = e.diagnostics;
        if (summary)
          *summary = e.summary;
      },
      [](const llvm::ErrorInfoBase &e) { FAIL("not a compile error: " << e.message()); });
  return found;
}

const char *kBroken = "module {\n  func.func @main() {\n    retrun\n  }\n}\n";

} // namespace

TEST_CASE("a tensor is built from typed values and read back through a typed view",
          "[embedding][tensor]") {
  Tensor t = Tensor::of<float>({2, 2}, {1.5f, -2, 3, 4});
  CHECK(t.dtype == DType::F32);
  CHECK(t.shape == std::vector<int64_t>{2, 2});
  CHECK(t.bytes.size() == 16);
  CHECK(t.holds<float>());
  CHECK_FALSE(t.holds<double>());
  llvm::ArrayRef<float> view = t.view<float>();
  CHECK(std::vector<float>(view.begin(), view.end()) == std::vector<float>{1.5f, -2, 3, 4});
  // A mutable tensor's view writes its bytes.
  t.view<float>()[1] = 7;
  CHECK(t.at(1) == 7);

  std::vector<int64_t> wide = {INT64_MIN, -1, INT64_MAX};
  Tensor i = Tensor::of<int64_t>({3}, wide);
  CHECK(i.dtype == DType::I64);
  CHECK(i.view<int64_t>()[0] == INT64_MIN);
  CHECK(i.view<int64_t>()[2] == INT64_MAX);

  CHECK(dtypeOf<bool> == DType::I1);
  CHECK(dtypeOf<uint16_t> == DType::UI16);
  CHECK(dtypeOf<const double> == DType::F64);
  Tensor flags = Tensor::of<bool>({2}, {true, false});
  CHECK(flags.dtype == DType::I1);
  CHECK(flags.at(0) == 1);
  CHECK(flags.at(1) == 0);
}

TEST_CASE("a tensor ref borrows a caller's buffer, and a copy of it owns its bytes",
          "[embedding][tensor]") {
  std::vector<double> buffer = {1, 2, 3, 4, 5, 6};
  TensorRef ref = TensorRef::of<double>({2, 3}, buffer);
  CHECK(ref.dtype == DType::F64);
  CHECK(ref.numElements() == 6);
  CHECK(ref.data == reinterpret_cast<const uint8_t *>(buffer.data()));
  CHECK(ref.view<double>().data() == buffer.data());
  buffer[0] = 10;
  CHECK(ref.view<double>()[0] == 10);

  Tensor owned = ref.copy();
  buffer[0] = 20;
  CHECK(owned.view<double>()[0] == 10);
  CHECK(owned.shape == std::vector<int64_t>{2, 3});

  TensorRef back = owned.ref();
  CHECK(back.data == owned.bytes.data());
  CHECK(back.size == 48);
  TensorRef raw = TensorRef::of(DType::BF16, {2}, buffer.data(), 4);
  CHECK(raw.dtype == DType::BF16);
  CHECK(raw.size == 4);
}

TEST_CASE("invoke reads a caller's buffer in place and returns typed results",
          "[embedding][engine]") {
  Engine engine(noDiskCache());
  auto module = engine.compile(kSquare, "square");
  REQUIRE(ok(module));
  std::vector<float> input = {1.5f, 2, 3};
  auto out = (*module)->invoke("main", {TensorRef::of<float>({3}, input)});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  llvm::ArrayRef<float> y = (*out)[0].view<float>();
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{2.25f, 4, 9});

  // No copy: the entry sees the caller's own buffer.
  auto addressModule = engine.compile(kAddress, "address");
  REQUIRE(ok(addressModule));
  std::vector<int32_t> values = {1, 2, 3, 4};
  auto address = (*addressModule)->invoke("address", {TensorRef::of<int32_t>({4}, values)});
  REQUIRE(ok(address));
  REQUIRE(address->size() == 1);
  CHECK((*address)[0].view<int64_t>()[0] == reinterpret_cast<int64_t>(values.data()));

  // A borrowed buffer that does not fit the entry is refused like an owned one.
  std::vector<float> short_ = {1, 2};
  auto refused = (*module)->invoke("main", {TensorRef::of<float>({3}, short_)});
  REQUIRE(failed(refused));
  CHECK_THAT(llvm::toString(refused.takeError()), Catch::Contains("holds 8 bytes"));
}

TEST_CASE("an isolated module reads borrowed inputs as it reads owned ones",
          "[embedding][isolation]") {
  EngineOptions options = noDiskCache();
  options.isolation = Isolation::Process;
  Engine engine(options);
  auto module = engine.compile(kSquare, "square");
  REQUIRE(ok(module));
  std::vector<float> input = {-1, 0.5f, 4};
  auto out = (*module)->invoke("main", {TensorRef::of<float>({3}, input)});
  REQUIRE(ok(out));
  llvm::ArrayRef<float> y = (*out)[0].view<float>();
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{1, 0.25f, 16});
}

TEST_CASE("compileFile names the module after the file and its diagnostics after the path",
          "[embedding][engine][errors]") {
  TempDir dir;
  Engine engine(noDiskCache());
  std::string good = dir.sub("square.mlir");
  writeFile(good, kSquare);
  auto module = engine.compileFile(good);
  REQUIRE(ok(module));
  CHECK((*module)->name() == "square");
  auto named = engine.compileFile(good, "other");
  REQUIRE(ok(named));
  CHECK((*named)->name() == "other");

  std::string bad = dir.sub("axpb.mlir");
  writeFile(bad, kBroken);
  auto broken = engine.compileFile(bad);
  REQUIRE(failed(broken));
  std::string summary;
  std::vector<Diagnostic> diagnostics = diagnosticsOf(broken.takeError(), &summary);
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].file == bad);
  CHECK(diagnostics[0].line == 3);
  CHECK(diagnostics[0].sourceLine == std::string("    retrun"));
  CHECK(summary == "parsing '" + bad + "' failed");
  CHECK_THAT(diagnostics[0].render(), Catch::StartsWith(bad + ":3:5: error:"));

  auto missing = engine.compileFile(dir.sub("absent.mlir"));
  REQUIRE(failed(missing));
  std::string why;
  CHECK(diagnosticsOf(missing.takeError(), &why).empty());
  CHECK(why == "cannot read '" + dir.sub("absent.mlir") + "': No such file or directory");
}

TEST_CASE("an isolated module's diagnostics name the file too", "[embedding][isolation][errors]") {
  TempDir dir;
  EngineOptions options = noDiskCache();
  options.isolation = Isolation::Process;
  Engine engine(options);
  std::string bad = dir.sub("axpb.mlir");
  writeFile(bad, kBroken);
  auto broken = engine.compileFile(bad);
  REQUIRE(failed(broken));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(broken.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].file == bad);
  CHECK(diagnostics[0].line == 3);
}

TEST_CASE("a reloadable module's diagnostics name the file it reloads from",
          "[embedding][reload][errors]") {
  TempDir dir;
  Engine engine(noDiskCache());
  ReloadableModule module(engine, "axpb");
  std::string path = dir.sub("axpb.mlir");
  writeFile(path, kSquare);
  auto first = module.reloadFile(path);
  REQUIRE(ok(first));
  CHECK(*first == 1);

  writeFile(path, kBroken);
  auto broken = module.reloadFile(path);
  REQUIRE(failed(broken));
  std::vector<Diagnostic> diagnostics = diagnosticsOf(broken.takeError());
  REQUIRE(!diagnostics.empty());
  CHECK(diagnostics[0].file == path);
  // Text given directly names the module, or the name the caller gives it.
  auto direct = module.reload(kBroken);
  REQUIRE(failed(direct));
  CHECK(diagnosticsOf(direct.takeError())[0].file == "axpb");
  auto given = module.reload(kBroken, "models/axpb.mlir");
  REQUIRE(failed(given));
  CHECK(diagnosticsOf(given.takeError())[0].file == "models/axpb.mlir");

  auto gone = module.reloadFile(dir.sub("gone.mlir"));
  REQUIRE(failed(gone));
  CHECK_THAT(llvm::toString(gone.takeError()), Catch::StartsWith("cannot read '"));
  CHECK(module.version() == 1);
}

TEST_CASE("an engine error's kind has a name", "[embedding][errors]") {
  CHECK(toString(EngineError::Kind::InvalidInput) == "invalid_input");
  CHECK(courier::toString(ErrorCode::KernelCrashed) == "kernel_crashed");
  Engine engine(noDiskCache());
  auto module = engine.compile(kSquare, "square");
  REQUIRE(ok(module));
  auto wrong = (*module)->invoke("nope", {});
  REQUIRE(failed(wrong));
  std::string name;
  llvm::handleAllErrors(wrong.takeError(),
                        [&](const EngineError &e) { name = toString(e.kind).str(); });
  CHECK(name == "unknown_entry");
}

TEST_CASE("a module keeps working after its engine is gone", "[embedding][engine]") {
  std::shared_ptr<Module> module;
  {
    Engine engine(noDiskCache());
    auto compiled = engine.compile(kSquare, "square");
    REQUIRE(ok(compiled));
    module = std::move(*compiled);
  }
  auto out = module->invoke("main", {Tensor::of<float>({3}, {1, 2, 3})});
  REQUIRE(ok(out));
  CHECK((*out)[0].view<float>()[2] == 9);
}

TEST_CASE("an EngineError's message is read by calling it, as any llvm::Error's",
          "[embedding][engine]") {
  Engine engine(noDiskCache());
  auto module = engine.compile(kSquare, "square");
  REQUIRE(ok(module));
  auto out = (*module)->invoke("main", {Tensor::fromDoubles(DType::F32, {4}, {1, 2, 3, 4})});
  REQUIRE(failed(out));
  std::string called, member;
  llvm::handleAllErrors(out.takeError(), [&](const EngineError &e) {
    called = e.message();
    member = e.message;
  });
  CHECK(called == member);
  CHECK_THAT(called, Catch::Contains("input 0 of 'main' must have shape tensor<3xf32>"));
}

TEST_CASE("a reloadable module takes TensorRefs and invoke options as a Module does",
          "[embedding][reload]") {
  Engine engine(noDiskCache());
  ReloadableModule reloadable(engine, "square");
  REQUIRE(ok(reloadable.reload(kSquare)));
  std::vector<float> input = {1.5f, 2, 3};
  std::vector<float> output(3, -1);
  InvokeOptions options;
  options.outputs.push_back(OutputRef::of<float>({3}, output));
  auto out = reloadable.invoke("main", {TensorRef::of<float>({3}, input)}, options);
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  // Written in place: the result comes back as a Tensor with no bytes of its own.
  CHECK(output == std::vector<float>{2.25f, 4, 9});
  CHECK((*out)[0].shape == std::vector<int64_t>{3});
  auto fromTensors = reloadable.invoke("main", {Tensor::fromDoubles(DType::F32, {3}, {1, 2, 3})});
  REQUIRE(ok(fromTensors));
  llvm::ArrayRef<float> y = (*fromTensors)[0].view<float>();
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{1, 4, 9});
}
