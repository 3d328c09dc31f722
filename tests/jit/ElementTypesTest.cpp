// Unsigned integers and bfloat16 end to end in the engine: signatures, kernels on their bytes,
// boundary values, JSON in and out, and modules in worker processes.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/transport/ExecutorProcess.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

// Host entries declare what callers see (ui8, ui64, bf16); the kernels compute on the same
// bytes, the integers as signless ones with the op choosing signedness (addi, maxui).
const char *kElementTypes = R"mlir(
module @app {
  func.func public @inc_ui8(%x: tensor<4xui8>) -> tensor<4xui8> {
    %y = catalyst.launch_kernel @dev::@inc8(%x) : (tensor<4xui8>) -> tensor<4xui8>
    return %y : tensor<4xui8>
  }
  func.func public @max_ui8(%x: tensor<4xui8>) -> tensor<4xui8> {
    %y = catalyst.launch_kernel @dev::@max8(%x) : (tensor<4xui8>) -> tensor<4xui8>
    return %y : tensor<4xui8>
  }
  func.func public @inc_ui64(%x: tensor<2xui64>) -> tensor<2xui64> {
    %y = catalyst.launch_kernel @dev::@inc64(%x) : (tensor<2xui64>) -> tensor<2xui64>
    return %y : tensor<2xui64>
  }
  func.func public @add_bf16(%x: tensor<4xbf16>, %y: tensor<4xbf16>) -> tensor<4xbf16> {
    %z = catalyst.launch_kernel @dev::@addbf(%x, %y)
        : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
    return %z : tensor<4xbf16>
  }
  func.func public @echo_ui16(%x: tensor<3xui16>, %s: ui32) -> (tensor<3xui16>, ui32) {
    return %x, %s : tensor<3xui16>, ui32
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @inc8(%x: tensor<4xi8>) -> tensor<4xi8> {
      %one = arith.constant dense<1> : tensor<4xi8>
      %y = arith.addi %x, %one : tensor<4xi8>
      return %y : tensor<4xi8>
    }
    func.func public @max8(%x: tensor<4xi8>) -> tensor<4xi8> {
      %half = arith.constant dense<-128> : tensor<4xi8>
      %y = arith.maxui %x, %half : tensor<4xi8>
      return %y : tensor<4xi8>
    }
    func.func public @inc64(%x: tensor<2xi64>) -> tensor<2xi64> {
      %one = arith.constant dense<1> : tensor<2xi64>
      %y = arith.addi %x, %one : tensor<2xi64>
      return %y : tensor<2xi64>
    }
    func.func public @addbf(%x: tensor<4xbf16>, %y: tensor<4xbf16>) -> tensor<4xbf16> {
      %z = arith.addf %x, %y : tensor<4xbf16>
      return %z : tensor<4xbf16>
    }
  }
}
)mlir";

std::string written(const Tensor &t) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << tensorToJSON(t);
  return text;
}

/// Reads `json` as input `index` of `entry`.
Tensor input(const Module &module, llvm::StringRef entry, size_t index, llvm::StringRef json) {
  const EntrySignature *signature = module.findEntry(entry);
  REQUIRE(signature);
  llvm::Expected<llvm::json::Value> value = parseJSON(json);
  REQUIRE(ok(value));
  llvm::Expected<Tensor> tensor = tensorFromJSON(*value, signature->inputs.at(index));
  REQUIRE(ok(tensor));
  return std::move(*tensor);
}

/// The results of `entry` on `inputs`, each as JSON text.
std::vector<std::string> invokeJSON(const Module &module, llvm::StringRef entry,
                                    std::vector<Tensor> inputs) {
  auto out = module.invoke(entry, inputs);
  REQUIRE(ok(out));
  std::vector<std::string> texts;
  for (const Tensor &t : *out)
    texts.push_back(written(t));
  return texts;
}

/// `source` compiled as `name`; fails the test if it does not compile.
std::shared_ptr<Module> compiled(Engine &engine, llvm::StringRef source, llvm::StringRef name) {
  auto module = engine.compile(source, name);
  REQUIRE(ok(module));
  return *module;
}

std::shared_ptr<Module> compileElementTypes(Engine &engine) {
  return compiled(engine, kElementTypes, "element-types.mlir");
}

/// Checks the entries' answers at the types' boundaries, in whatever process runs them.
void checkBoundaries(const Module &module) {
  // 255 + 1 wraps to 0 in eight unsigned bits; 200 is no negative number.
  CHECK(invokeJSON(module, "inc_ui8", {input(module, "inc_ui8", 0, "[0, 200, 254, 255]")}) ==
        std::vector<std::string>{R"({"data":[1,201,255,0],"dtype":"ui8","shape":[4]})"});
  // maxui compares as unsigned: 200 and 255 are above 128.
  CHECK(invokeJSON(module, "max_ui8", {input(module, "max_ui8", 0, "[0, 127, 200, 255]")}) ==
        std::vector<std::string>{R"({"data":[128,128,200,255],"dtype":"ui8","shape":[4]})"});
  // 2^64 - 2 and 2^64 - 1 are exact both ways; the second wraps to 0.
  CHECK(
      invokeJSON(module, "inc_ui64",
                 {input(module, "inc_ui64", 0, "[18446744073709551614, 18446744073709551615]")}) ==
      std::vector<std::string>{R"({"data":[18446744073709551615,0],"dtype":"ui64","shape":[2]})"});
  // JSON numbers round to the nearest bf16, ties to even: 1 + 2^-8 lies halfway between 1 and
  // 1 + 2^-7 and goes to 1; 1 + 3 * 2^-8 goes to 1 + 2^-6. The kernel's sums round too:
  // 256 + 1 needs nine significant bits and rounds (to even) back to 256.
  CHECK(invokeJSON(module, "add_bf16",
                   {input(module, "add_bf16", 0, "[1.00390625, 1.01171875, 256, 0.5]"),
                    input(module, "add_bf16", 1, "[1, 1, 1, 0.25]")}) ==
        std::vector<std::string>{R"({"data":[2,2.015625,256,0.75],"dtype":"bf16","shape":[4]})"});
  CHECK(invokeJSON(module, "echo_ui16",
                   {input(module, "echo_ui16", 0, "[0, 40000, 65535]"),
                    input(module, "echo_ui16", 1, "4294967295")}) ==
        std::vector<std::string>{R"({"data":[0,40000,65535],"dtype":"ui16","shape":[3]})",
                                 R"({"data":[4294967295],"dtype":"ui32","shape":[]})"});
}

} // namespace

TEST_CASE("entries on unsigned integers and bf16 show those types in their signatures",
          "[jit][dtypes]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileElementTypes(engine);
  const EntrySignature *inc = module->findEntry("inc_ui8");
  REQUIRE(inc);
  CHECK(inc->inputs.at(0).dtype == DType::UI8);
  CHECK(inc->outputs.at(0).str() == "tensor<4xui8>");
  const EntrySignature *add = module->findEntry("add_bf16");
  REQUIRE(add);
  CHECK(add->inputs.at(1).dtype == DType::BF16);
  CHECK(add->outputs.at(0).str() == "tensor<4xbf16>");
  const EntrySignature *echo = module->findEntry("echo_ui16");
  REQUIRE(echo);
  CHECK(echo->inputs.at(1).isScalar);
  CHECK(echo->inputs.at(1).str() == "ui32");
}

TEST_CASE("ui8, ui64 and bf16 kernels compute on the in-process executor at their "
          "boundaries",
          "[jit][dtypes]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  checkBoundaries(*compileElementTypes(engine));
}

TEST_CASE("ui8, ui64 and bf16 kernels compute in a module's worker process at their "
          "boundaries",
          "[jit][dtypes][isolation]") {
  EngineOptions options;
  options.isolation = Isolation::Process;
  options.diskCache = false;
  Engine engine(options);
  checkBoundaries(*compileElementTypes(engine));
}

TEST_CASE("ui8, ui64 and bf16 kernels compute on a courier-executor process at their "
          "boundaries",
          "[jit][dtypes][remote]") {
  TempDir dir;
  testing::ExecutorProcess executor;
  EngineOptions options = optionsIn(dir);
  options.executorOverride = executor.address();
  Engine engine(options);
  checkBoundaries(*compileElementTypes(engine));
}

TEST_CASE("a tensor of the signed type of the same width is refused for an unsigned input",
          "[jit][dtypes]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compileElementTypes(engine);
  auto out = module->invoke("inc_ui8", {Tensor::fromDoubles(DType::I8, {4}, {1, 2, 3, 4})});
  REQUIRE(failed(out));
  CHECK_THAT(llvm::toString(out.takeError()),
             Catch::Contains("input 0 of 'inc_ui8' must be ui8, got i8"));
}

TEST_CASE("every dtype is named by MLIR's spelling of a type of its size", "[jit][dtypes]") {
  mlir::MLIRContext context;
  for (uint64_t code = 0; std::optional<DType> dtype = dtypeFromCode(code); ++code) {
    llvm::StringRef name = dtypeName(*dtype);
    INFO(name.str());
    CHECK(parseDType(name) == dtype);
    mlir::Type type = mlir::parseType(name, &context);
    REQUIRE(type);
    CHECK(type.isIntOrFloat());
    // i1 takes a byte.
    CHECK(dtypeSize(*dtype) == (type.getIntOrFloatBitWidth() + 7) / 8);
    CHECK(isFloatDType(*dtype) == mlir::isa<mlir::FloatType>(type));
  }
  CHECK(dtypeFromCode(static_cast<uint64_t>(DType::UI64)) == DType::UI64);
  CHECK(!dtypeFromCode(static_cast<uint64_t>(DType::UI64) + 1));
}

TEST_CASE("an entry on a type outside the table says so at invoke, listing the types there are",
          "[jit][dtypes]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compiled(
      engine,
      "func.func public @nibbles(%x: tensor<4xi4>) -> tensor<4xi4> { return %x : tensor<4xi4> }",
      "nibbles");
  auto out = module->invoke("nibbles", {});
  REQUIRE(failed(out));
  CHECK_THAT(llvm::toString(out.takeError()),
             Catch::Contains("entry 'nibbles' of module 'nibbles' cannot be invoked: argument 0 "
                             "has type 'tensor<4xi4>'; invoke passes ranked tensors, "
                             "identity-layout memrefs and scalars of bf16, f16, f32, f64, i1, i8, "
                             "i16, i32, i64, ui8, ui16, ui32, ui64 and index"));
}

TEST_CASE("an entry on explicitly signed integers takes and returns the signless dtype",
          "[jit][dtypes]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  auto module = compiled(
      engine,
      "func.func public @same(%x: tensor<2xsi8>) -> tensor<2xsi8> { return %x : tensor<2xsi8> }",
      "signed");
  const EntrySignature *same = module->findEntry("same");
  REQUIRE(same);
  CHECK(same->inputs.at(0).dtype == DType::I8);
  CHECK(invokeJSON(*module, "same", {input(*module, "same", 0, "[-128, 127]")}) ==
        std::vector<std::string>{R"({"data":[-128,127],"dtype":"i8","shape":[2]})"});
}
