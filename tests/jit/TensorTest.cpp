// JSON tensors: what tensorFromJSON accepts, what it refuses, and exact round trips.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include <catch2/catch.hpp>

using namespace courier;
using courier::testing::failed;
using courier::testing::ok;

namespace {

TensorSpec tensorOf(DType dtype, std::vector<int64_t> shape) {
  return {dtype, std::move(shape), false};
}
TensorSpec scalarOf(DType dtype) { return {dtype, {}, true}; }

llvm::Expected<Tensor> read(llvm::StringRef json, const TensorSpec &spec) {
  llvm::Expected<llvm::json::Value> value = parseJSON(json);
  if (!value)
    return value.takeError();
  return tensorFromJSON(*value, spec);
}

std::string errorOf(llvm::Expected<Tensor> tensor) {
  REQUIRE(failed(tensor));
  return llvm::toString(tensor.takeError());
}

std::string written(const Tensor &t) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << tensorToJSON(t);
  return text;
}

} // namespace

TEST_CASE("nested arrays give the shape, objects may state it", "[tensor]") {
  auto nested = read("[[1, 2, 3], [4, 5, 6]]", tensorOf(DType::F32, {2, 3}));
  REQUIRE(ok(nested));
  CHECK(nested->shape == std::vector<int64_t>{2, 3});
  CHECK(nested->at(5) == 6);

  auto object = read(R"({"dtype": "i16", "shape": [3, 1], "data": [7, -8, 9]})",
                     tensorOf(DType::I16, {-1, 1}));
  REQUIRE(ok(object));
  CHECK(object->dtype == DType::I16);
  CHECK(object->shape == std::vector<int64_t>{3, 1});
  CHECK(object->at(1) == -8);

  auto empty = read("[[], []]", tensorOf(DType::F64, {2, -1}));
  REQUIRE(ok(empty));
  CHECK(empty->shape == std::vector<int64_t>{2, 0});
  CHECK(empty->bytes.empty());
}

TEST_CASE("tensor fields of the wrong type or unknown names are refused", "[tensor]") {
  CHECK_THAT(errorOf(read(R"({"dtype": 5, "data": [1]})", tensorOf(DType::F32, {1}))),
             Catch::Contains("\"dtype\" must be a string"));
  CHECK_THAT(errorOf(read(R"({"shape": "x", "data": [1, 2, 3, 4]})", tensorOf(DType::F32, {4}))),
             Catch::Contains("\"shape\" must be a list of sizes"));
  CHECK_THAT(errorOf(read(R"({"dtpye": "f32", "data": [1]})", tensorOf(DType::F32, {1}))),
             Catch::Contains("unknown tensor field \"dtpye\""));
}

TEST_CASE("a lone number fills a scalar or a one-element tensor", "[tensor]") {
  auto scalar = read("2.5", scalarOf(DType::F64));
  REQUIRE(ok(scalar));
  CHECK(scalar->shape.empty());
  auto listed = read("[2.5]", scalarOf(DType::F64));
  REQUIRE(ok(listed));
  CHECK(listed->shape.empty());
  auto single = read("3", tensorOf(DType::I32, {1, 1}));
  REQUIRE(ok(single));
  CHECK(single->shape == std::vector<int64_t>{1, 1});
  auto flag = read("[true, false]", tensorOf(DType::I1, {2}));
  REQUIRE(ok(flag));
  CHECK(written(*flag) == R"({"data":[true,false],"dtype":"i1","shape":[2]})");
}

TEST_CASE("ragged arrays are refused whichever path comes first", "[tensor]") {
  CHECK_THAT(errorOf(read("[[1, 2], [3]]", tensorOf(DType::F32, {2, 2}))),
             Catch::Contains("dimension 1 has sizes 2 and 1"));
  CHECK_THAT(errorOf(read("[1, [2]]", tensorOf(DType::F32, {2}))),
             Catch::Contains("ragged nested array"));
  CHECK_THAT(errorOf(read("[[1], 2]", tensorOf(DType::F32, {2, 1}))),
             Catch::Contains("ragged nested array"));
  CHECK_THAT(errorOf(read(R"([1, "two"])", tensorOf(DType::F32, {2}))),
             Catch::Contains("expected a number, got \"two\""));
}

TEST_CASE("integers must be whole and fit their dtype", "[tensor]") {
  CHECK_THAT(errorOf(read("[1.5]", tensorOf(DType::I32, {1}))),
             Catch::Contains("element 0 (1.5) is not a whole number i32 can hold"));
  CHECK_THAT(errorOf(read("[1, 128]", tensorOf(DType::I8, {2}))),
             Catch::Contains("element 1 (128) is not a whole number i8 can hold"));
  CHECK_THAT(errorOf(read("[18446744073709551615]", tensorOf(DType::I64, {1}))),
             Catch::Contains("is not a whole number i64 can hold"));
  CHECK_THAT(errorOf(read("[2]", tensorOf(DType::I1, {1}))),
             Catch::Contains("is not a whole number i1 can hold"));
}

TEST_CASE("64-bit integers and half floats survive a round trip", "[tensor]") {
  auto big = read("[9007199254740993, -9223372036854775808]", tensorOf(DType::I64, {2}));
  REQUIRE(ok(big));
  CHECK(written(*big) ==
        R"({"data":[9007199254740993,-9223372036854775808],"dtype":"i64","shape":[2]})");
  auto half = read("[0.5, -2, 65504]", tensorOf(DType::F16, {3}));
  REQUIRE(ok(half));
  CHECK(written(*half) == R"({"data":[0.5,-2,65504],"dtype":"f16","shape":[3]})");
}

TEST_CASE("shapes that overflow and input nested too deep are refused", "[tensor]") {
  CHECK_THAT(errorOf(read(R"({"shape": [4611686018427387904, 4], "data": []})",
                          tensorOf(DType::F32, {-1, -1}))),
             Catch::Contains("\"shape\" is too large"));
  CHECK_THAT(errorOf(read(R"({"shape": [2, 2], "data": [1, 2, 3]})", tensorOf(DType::F32, {2, 2}))),
             Catch::Contains("\"shape\" holds 4 elements but \"data\" has 3"));
  CHECK_THAT(errorOf(read(R"({"dtype": "f128", "data": [1]})", tensorOf(DType::F32, {1}))),
             Catch::Contains("unknown dtype 'f128'"));
  std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  CHECK_THAT(errorOf(read(deep, tensorOf(DType::F32, {1}))),
             Catch::Contains("JSON nested deeper than 128 levels"));
  // Brackets inside strings do not count.
  llvm::Expected<llvm::json::Value> quoted = parseJSON(R"({"note": "[[[[[[", "data": [1]})", 2);
  CHECK(ok(quoted));
}
