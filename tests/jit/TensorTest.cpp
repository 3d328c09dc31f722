// JSON tensors: what tensorFromJSON accepts, what it refuses, and exact round trips.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

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

TEST_CASE("integer ranges are named when a value does not fit", "[tensor]") {
  CHECK_THAT(errorOf(read("[1, 128]", tensorOf(DType::I8, {2}))),
             Catch::Contains("element 1 (128) is not a whole number i8 can hold (-128 to 127)"));
  CHECK_THAT(errorOf(read("[-1e19]", tensorOf(DType::I64, {1}))),
             Catch::Contains("i64 can hold (-9223372036854775808 to 9223372036854775807)"));
  CHECK_THAT(errorOf(read("[true, 2]", tensorOf(DType::I1, {2}))),
             Catch::Contains("element 1 (2) is not a whole number i1 can hold (0 to 1)"));
}

TEST_CASE("unsigned integers hold zero to their maximum and no negative number", "[tensor]") {
  auto bytes = read("[0, 200, 255.0, true]", tensorOf(DType::UI8, {4}));
  REQUIRE(ok(bytes));
  CHECK(bytes->bytes == std::vector<uint8_t>{0, 200, 255, 1});
  CHECK(written(*bytes) == R"({"data":[0,200,255,1],"dtype":"ui8","shape":[4]})");
  CHECK_THAT(errorOf(read("[256]", tensorOf(DType::UI8, {1}))),
             Catch::Contains("element 0 (256) is not a whole number ui8 can hold (0 to 255)"));
  CHECK_THAT(errorOf(read("[3, -1]", tensorOf(DType::UI8, {2}))),
             Catch::Contains("element 1 (-1) is not a whole number ui8 can hold (0 to 255)"));
  CHECK_THAT(errorOf(read("[65536]", tensorOf(DType::UI16, {1}))),
             Catch::Contains("ui16 can hold (0 to 65535)"));
  auto words = read("[4294967295]", tensorOf(DType::UI32, {1}));
  REQUIRE(ok(words));
  CHECK(written(*words) == R"({"data":[4294967295],"dtype":"ui32","shape":[1]})");
  CHECK_THAT(errorOf(read("[4294967296]", tensorOf(DType::UI32, {1}))),
             Catch::Contains("ui32 can hold (0 to 4294967295)"));
  CHECK_THAT(errorOf(read("[1.5]", tensorOf(DType::UI32, {1}))),
             Catch::Contains("element 0 (1.5) is not a whole number ui32"));
  CHECK_THAT(errorOf(read(R"(["Infinity"])", tensorOf(DType::UI8, {1}))),
             Catch::Contains("only a float dtype (bf16, f16, f32 or f64) can hold, not ui8"));
}

TEST_CASE("ui64 values are exact up to 2^64 - 1", "[tensor]") {
  auto big = read("[18446744073709551615, 9223372036854775808, 9007199254740993, 0]",
                  tensorOf(DType::UI64, {4}));
  REQUIRE(ok(big));
  uint64_t first;
  std::memcpy(&first, big->bytes.data(), sizeof(first));
  CHECK(first == UINT64_MAX);
  CHECK(written(*big) == R"({"data":[18446744073709551615,9223372036854775808,9007199254740993,)"
                         R"(0],"dtype":"ui64","shape":[4]})");
  CHECK_THAT(errorOf(read("[18446744073709551616]", tensorOf(DType::UI64, {1}))),
             Catch::Contains("ui64 can hold (0 to 18446744073709551615)"));
  CHECK_THAT(errorOf(read("[-1]", tensorOf(DType::UI64, {1}))),
             Catch::Contains("element 0 (-1) is not a whole number ui64 can hold"));
  auto object = read(R"({"dtype": "ui64", "shape": [1], "data": [18446744073709551615]})",
                     tensorOf(DType::UI64, {1}));
  REQUIRE(ok(object));
  CHECK(object->dtype == DType::UI64);
}

TEST_CASE("bf16 reads JSON numbers rounded to the nearest, ties to even", "[tensor]") {
  // bf16 keeps 8 significant bits. 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to
  // the even one, 1; 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6 and goes to
  // 1 + 2^-6; 1 + 2^-8 + 2^-20 is nearer 1 + 2^-7.
  auto rounded = read("[1.00390625, 1.01171875, 1.0039072036743164, -3.140625, 1e39]",
                      tensorOf(DType::BF16, {5}));
  REQUIRE(ok(rounded));
  CHECK(written(*rounded) ==
        R"({"data":[1,1.015625,1.0078125,-3.140625,"Infinity"],"dtype":"bf16","shape":[5]})");
  // The bits are bfloat16's: the top half of the float32 with the same value.
  uint16_t bits;
  std::memcpy(&bits, rounded->bytes.data() + 2, sizeof(bits));
  CHECK(bits == 0x3f82);
}

TEST_CASE("an unknown dtype's refusal lists every dtype", "[tensor]") {
  CHECK_THAT(errorOf(read(R"({"dtype": "u8", "data": [1]})", tensorOf(DType::UI8, {1}))),
             Catch::Contains("unknown dtype 'u8' (expected bf16, f16, f32, f64, i1, i8, i16, "
                             "i32, i64, ui8, ui16, ui32 or ui64)"));
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

TEST_CASE("NaN and the infinities are written as strings a strict JSON parser accepts",
          "[tensor]") {
  double inf = std::numeric_limits<double>::infinity();
  double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtypeName(dtype).str());
    std::string text = written(Tensor::fromDoubles(dtype, {5}, {inf, 3, -nan, -inf, -0.0}));
    CHECK(text == R"({"data":["Infinity",3,"NaN","-Infinity",-0],"dtype":")" +
                      dtypeName(dtype).str() + R"(","shape":[5]})");
    // nlohmann/json takes only RFC 8259 JSON: bare NaN, Infinity or inf are errors.
    CHECK(nlohmann::json::accept(text));
  }
}

TEST_CASE("\"NaN\", \"Infinity\" and \"-Infinity\" are read back for float dtypes", "[tensor]") {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtypeName(dtype).str());
    auto read1 = read(R"(["NaN", "Infinity", "-Infinity", -0.0, 1.5])", tensorOf(dtype, {5}));
    REQUIRE(ok(read1));
    CHECK(std::isnan(read1->at(0)));
    CHECK(read1->at(1) == std::numeric_limits<double>::infinity());
    CHECK(read1->at(2) == -std::numeric_limits<double>::infinity());
    CHECK(read1->at(3) == 0);
    CHECK(std::signbit(read1->at(3)));
    // Written again, the tensor reads the same.
    CHECK(written(*read1) == R"({"data":["NaN","Infinity","-Infinity",-0,1.5],"dtype":")" +
                                 dtypeName(dtype).str() + R"(","shape":[5]})");
  }
  auto scalar = read(R"("-Infinity")", scalarOf(DType::F32));
  REQUIRE(ok(scalar));
  CHECK(scalar->at(0) == -std::numeric_limits<double>::infinity());
  auto object = read(R"({"dtype": "f64", "shape": [1, 2], "data": [["Infinity", "NaN"]]})",
                     tensorOf(DType::F64, {1, 2}));
  REQUIRE(ok(object));
  CHECK(std::isnan(object->at(1)));
}

TEST_CASE("non-finite strings are refused for integer dtypes, other strings for all", "[tensor]") {
  CHECK_THAT(errorOf(read(R"([1, "NaN"])", tensorOf(DType::I32, {2}))),
             Catch::Contains("element 1 is \"NaN\", which only a float dtype (bf16, f16, f32 or "
                             "f64) can hold, not i32"));
  CHECK_THAT(errorOf(read(R"(["Infinity"])", tensorOf(DType::I64, {1}))),
             Catch::Contains("only a float dtype"));
  CHECK_THAT(errorOf(read(R"(["-Infinity"])", tensorOf(DType::I1, {1}))),
             Catch::Contains("only a float dtype"));
  // Only the exact spellings: "nan", "inf" and "+Infinity" are typos, not values.
  for (const char *typo : {R"(["nan"])", R"(["inf"])", R"(["+Infinity"])", R"(["-NaN"])"})
    CHECK_THAT(errorOf(read(typo, tensorOf(DType::F32, {1}))),
               Catch::Contains("expected a number, got") &&
                   Catch::Contains(R"("NaN", "Infinity" and "-Infinity")"));
}
