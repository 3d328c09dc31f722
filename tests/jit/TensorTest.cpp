// JSON tensors: what tensorFromJSON accepts, what it refuses, and exact round trips.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace courier;
using namespace courier::testing;

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

TEST_CASE("whole numbers written as doubles are read across the whole 64-bit range", "[tensor]") {
  // 2^63 written as a double is one past INT64_MAX: an i64 cannot hold it, a ui64 can. The
  // reading of it must be defined (a fuzzer found the conversion that was not).
  CHECK_THAT(errorOf(read("[-93808, 9223372036854775887.]", tensorOf(DType::I64, {2}))),
             Catch::Contains("element 1 (9.2233720368547758e+18) is not a whole number i64 can "
                             "hold (-9223372036854775808 to 9223372036854775807)"));
  CHECK_THAT(errorOf(read("[9223372036854775808.0]", tensorOf(DType::I64, {1}))),
             Catch::Contains("is not a whole number i64 can hold"));
  auto wide =
      read("[9223372036854775808.0, 1.8446744073709550e19, 2.0]", tensorOf(DType::UI64, {3}));
  REQUIRE(ok(wide));
  CHECK(written(*wide) ==
        R"({"data":[9223372036854775808,18446744073709549568,2],"dtype":"ui64","shape":[3]})");
  // 2^64 and beyond, as integers or doubles, fit no integer dtype; -2^63 fits i64 exactly.
  CHECK_THAT(errorOf(read("[18446744073709551616.0]", tensorOf(DType::UI64, {1}))),
             Catch::Contains("is not a whole number ui64 can hold"));
  CHECK_THAT(errorOf(read("[1e300]", tensorOf(DType::UI64, {1}))),
             Catch::Contains("is not a whole number ui64 can hold"));
  auto lowest = read("[-9223372036854775808.0, -1e300]", tensorOf(DType::I64, {2}));
  CHECK_THAT(errorOf(std::move(lowest)), Catch::Contains("element 1 (-1.0000000000000001e+300)"));
  auto min = read("[-9223372036854775808.0]", tensorOf(DType::I64, {1}));
  REQUIRE(ok(min));
  CHECK(written(*min) == R"({"data":[-9223372036854775808],"dtype":"i64","shape":[1]})");
  // The same values as the sizes of a stated shape.
  CHECK_THAT(errorOf(read(R"({"shape": [9223372036854775808.0], "data": []})",
                          tensorOf(DType::F32, {-1}))),
             Catch::Contains("\"shape\" must hold non-negative integers"));
  CHECK_THAT(errorOf(read(R"({"shape": [1e300], "data": []})", tensorOf(DType::F32, {-1}))),
             Catch::Contains("\"shape\" must hold non-negative integers"));
  auto stated = read(R"({"shape": [2.0, -0.0], "data": []})", tensorOf(DType::F32, {-1, -1}));
  REQUIRE(ok(stated));
  CHECK(stated->shape == std::vector<int64_t>{2, 0});
}

TEST_CASE("jsonWholeNumber and jsonCount read integers and whole doubles exactly", "[tensor]") {
  using Whole = std::optional<std::pair<bool, uint64_t>>;
  CHECK(jsonWholeNumber(llvm::json::Value(int64_t(-5))) == Whole({true, 5}));
  CHECK(jsonWholeNumber(llvm::json::Value(UINT64_MAX)) == Whole({false, UINT64_MAX}));
  CHECK(jsonWholeNumber(llvm::json::Value(INT64_MIN)) == Whole({true, uint64_t(1) << 63}));
  CHECK(jsonWholeNumber(llvm::json::Value(9223372036854775808.0)) ==
        Whole({false, uint64_t(1) << 63}));
  CHECK(jsonWholeNumber(llvm::json::Value(0.5)) == std::nullopt);
  CHECK(jsonWholeNumber(llvm::json::Value(std::nan(""))) == std::nullopt);
  CHECK(jsonWholeNumber(llvm::json::Value(INFINITY)) == std::nullopt);
  CHECK(jsonWholeNumber(llvm::json::Value("1")) == std::nullopt);
  CHECK(jsonCount(llvm::json::Value(3.0)) == uint64_t(3));
  CHECK(jsonCount(llvm::json::Value(-0.0)) == uint64_t(0));
  CHECK(jsonCount(llvm::json::Value(int64_t(-1))) == std::nullopt);
  CHECK(jsonCount(llvm::json::Value(-1e300)) == std::nullopt);
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

TEST_CASE("negative zero is written so that it reads back negative", "[tensor]") {
  // llvm::json reads "-0" as the integer 0, which widens to +0: "-0.0" is a double.
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    INFO(dtypeName(dtype).str());
    std::string text;
    writeTensorJSON(text, Tensor::fromDoubles(dtype, {2}, {-0.0, 0.0}));
    CHECK(text.find("[-0.0,0]") != std::string::npos);
    auto again = read(text, tensorOf(dtype, {2}));
    REQUIRE(ok(again));
    CHECK(std::signbit(again->at(0)));
    CHECK_FALSE(std::signbit(again->at(1)));
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

namespace {

/// What writeTensorJSON writes for `values` of `dtype`, checked against std::to_chars's
/// shortest text of each value in its own type.
template <typename T> void checkWrittenAsToChars(DType dtype, const std::vector<T> &values) {
  Tensor tensor{dtype, {static_cast<int64_t>(values.size())}, {}};
  tensor.bytes.resize(values.size() * sizeof(T));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  std::string expected = "{\"data\":[";
  for (size_t i = 0; i < values.size(); ++i) {
    char text[64];
    std::to_chars_result r = std::to_chars(text, text + sizeof(text), values[i]);
    expected += (i ? "," : "") + std::string(text, r.ptr);
  }
  expected += "],\"dtype\":\"" + dtypeName(dtype).str() + "\",\"shape\":[" +
              std::to_string(values.size()) + "]}";
  std::string text;
  writeTensorJSON(text, tensor);
  // One CHECK for the whole tensor; on a mismatch, the first element that differs.
  if (text != expected) {
    size_t at = std::mismatch(text.begin(), text.end(), expected.begin(), expected.end()).first -
                text.begin();
    size_t from = text.rfind(',', at) == std::string::npos ? 0 : text.rfind(',', at);
    FAIL("written " << text.substr(from, 40) << " where std::to_chars gives "
                    << expected.substr(from, 40));
  }
}

template <typename T> bool isFinite(T v) { return std::isfinite(v); }

} // namespace

TEST_CASE("an f32 element is written in float's shortest text, not in the double's it widens to",
          "[tensor]") {
  std::string text;
  writeTensorJSON(text, Tensor::fromDoubles(DType::F32, {3}, {0.6865874f, 0.1f, 1.0f / 3}));
  CHECK(text == R"({"data":[0.6865874,0.1,0.33333334],"dtype":"f32","shape":[3]})");
  text.clear();
  writeTensorJSON(text, Tensor::fromDoubles(DType::F64, {3}, {0.6865874f, 0.1, 1.0 / 3}));
  CHECK(text == R"({"data":[0.686587393283844,0.1,0.3333333333333333],"dtype":"f64","shape":[3]})");
}

TEST_CASE("floats are written in std::to_chars's notation: fixed unless scientific is shorter, "
          "whole numbers exact",
          "[tensor]") {
  // All but negative zero, which is "-0.0" where std::to_chars writes "-0".
  std::string text;
  writeTensorJSON(text, Tensor::fromDoubles(DType::F32, {10},
                                            {99999, 100000, 123456, 0.0001f, 0.00012f, 1e-5f,
                                             123456790528.0f, 3.4028235e38f, 1e-45f, -0.0f}));
  CHECK(text == R"({"data":[99999,1e+05,123456,1e-04,0.00012,1e-05,123456790528,3.4028235e+38,)"
                R"(1e-45,-0.0],"dtype":"f32","shape":[10]})");
  text.clear();
  writeTensorJSON(text, Tensor::fromDoubles(DType::F64, {5},
                                            {18446744073709551616.0, 1e22, 5e-324, 1e-300,
                                             -2.2250738585072014e-308}));
  CHECK(text == R"({"data":[18446744073709551616,1e+22,5e-324,1e-300,-2.2250738585072014e-308],)"
                R"("dtype":"f64","shape":[5]})");
}

TEST_CASE("f32 elements across the whole float range are written as std::to_chars writes them",
          "[tensor]") {
  std::vector<float> values;
  // Every 4099th bit pattern (a prime stride, so every exponent and many significand endings
  // come up), then every float from 2^24 - 2^10 up, where whole numbers stop being exact, and
  // the subnormals' lowest.
  auto add = [&](uint32_t bits) {
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    if (isFinite(v))
      values.push_back(v);
  };
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099)
    add(static_cast<uint32_t>(bits));
  for (uint32_t bits = 0x4b7ffc00; bits < 0x4b800400; ++bits) // around 2^24
    add(bits);
  for (uint32_t bits = 0; bits < 4096; ++bits)
    add(bits);
  for (int64_t whole = 99000; whole < 101000; ++whole)
    values.push_back(static_cast<float>(whole));
  checkWrittenAsToChars(DType::F32, values);
}

TEST_CASE("f64 elements are written as std::to_chars writes them", "[tensor]") {
  std::vector<double> values;
  std::mt19937_64 random(12);
  for (int i = 0; i < 200000; ++i) {
    uint64_t bits = random();
    double v;
    std::memcpy(&v, &bits, sizeof(v));
    if (isFinite(v))
      values.push_back(v);
    // Whole numbers of every size, past 2^53 and 2^64; short decimals.
    values.push_back(std::ldexp(static_cast<double>(bits >> 11), static_cast<int>(bits % 90) - 20));
    values.push_back(static_cast<double>(bits % 100000000) / 1000);
  }
  for (int k = -20; k <= 25; ++k)
    for (double m : {1.0, 3.0, 9.5}) {
      values.push_back(m * std::pow(10.0, k));
      values.push_back(std::nextafter(m * std::pow(10.0, k), 0.0));
    }
  checkWrittenAsToChars(DType::F64, values);
}

TEST_CASE("integers are written exactly, booleans as true and false", "[tensor]") {
  auto writtenAs = [](DType dtype, std::vector<uint8_t> bytes, std::vector<int64_t> shape) {
    std::string text;
    writeTensorJSON(text, Tensor{dtype, std::move(shape), std::move(bytes)});
    return text;
  };
  auto bytesOf = [](auto... v) {
    std::vector<uint8_t> bytes;
    for (auto x : {v...}) {
      const auto *p = reinterpret_cast<const uint8_t *>(&x);
      bytes.insert(bytes.end(), p, p + sizeof(x));
    }
    return bytes;
  };
  CHECK(writtenAs(DType::I64,
                  bytesOf(std::numeric_limits<int64_t>::min(), int64_t(9007199254740993)), {2}) ==
        R"({"data":[-9223372036854775808,9007199254740993],"dtype":"i64","shape":[2]})");
  CHECK(writtenAs(DType::UI64, bytesOf(std::numeric_limits<uint64_t>::max()), {1, 1}) ==
        R"({"data":[18446744073709551615],"dtype":"ui64","shape":[1,1]})");
  CHECK(writtenAs(DType::I8, bytesOf(int8_t(-128), int8_t(127)), {2}) ==
        R"({"data":[-128,127],"dtype":"i8","shape":[2]})");
  CHECK(writtenAs(DType::I1, {1, 0}, {2}) == R"({"data":[true,false],"dtype":"i1","shape":[2]})");
  CHECK(writtenAs(DType::F32, {}, {0, 3}) == R"({"data":[],"dtype":"f32","shape":[0,3]})");
}

TEST_CASE("writing to a stream gives the same text, and writing to a string appends to it",
          "[tensor]") {
  std::vector<double> values;
  for (int i = 0; i < 50000; ++i) // More text than one buffer of the writer holds.
    values.push_back(i * 0.37);
  Tensor tensor = Tensor::fromDoubles(DType::F32, {50000}, values);
  std::string streamed;
  {
    llvm::raw_string_ostream os(streamed);
    writeTensorJSON(os, tensor);
  }
  std::string appended = "[";
  writeTensorJSON(appended, tensor);
  CHECK(appended == "[" + streamed);
  CHECK(streamed.size() > (size_t(1) << 16));
}

TEST_CASE("a tensor large enough to be written on several threads reads as the one thread "
          "writes it, in every dtype",
          "[tensor]") {
  // Past the size at which writeTensorJSON splits the elements into runs, with an odd count
  // so the runs differ in length; a stream is always written on one thread.
  const int64_t n = (int64_t(1) << 21) + 7;
  std::mt19937_64 random(5);
  for (DType dtype :
       {DType::F16, DType::BF16, DType::F32, DType::F64, DType::I1, DType::I8, DType::I16,
        DType::I32, DType::I64, DType::UI8, DType::UI16, DType::UI32, DType::UI64}) {
    INFO(dtypeName(dtype).str());
    Tensor tensor{dtype, {n}, {}};
    tensor.bytes.resize(static_cast<size_t>(n) * dtypeSize(dtype));
    for (uint8_t &byte : tensor.bytes)
      byte = static_cast<uint8_t>(random());
    if (dtype == DType::I1)
      for (uint8_t &byte : tensor.bytes)
        byte &= 1;
    std::string streamed;
    {
      llvm::raw_string_ostream os(streamed);
      writeTensorJSON(os, tensor);
    }
    std::string written = "x";
    writeTensorJSON(written, tensor);
    CHECK(written.size() == streamed.size() + 1);
    CHECK((written == "x" + streamed));
  }
}
