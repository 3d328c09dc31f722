// What stage 1 of the default lowering takes in (TOSA, linalg.softmax, linalg.pack and
// unpack, pooling, transposes, broadcasts, reductions, integer and bf16 matmuls) computes
// what a reference computed here does, at sizes tiles do and do not divide; the math
// functions the lowering approximates stay within a stated number of ulps of libm; and an
// op the pipeline cannot lower is named, where it was written.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/support/KernelPrograms.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace courier;
using namespace courier::testing;

namespace {

std::vector<float> floats(const Tensor &t) {
  llvm::ArrayRef<float> values = t.view<float>();
  return std::vector<float>(values.begin(), values.end());
}

const char *kZeroF32 =
    "      %zp = \"tosa.const\"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>\n";

} // namespace

TEST_CASE("a TOSA matmul followed by tanh matches a reference at sizes tiles do and do not "
          "divide",
          "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Size {
    int64_t m, n, k;
  };
  for (Size s : {Size{17, 19, 301}, Size{64, 64, 64}}) {
    INFO(s.m << " x " << s.n << " x " << s.k);
    std::string a = tensorType({1, s.m, s.k}, "f32"), b = tensorType({1, s.k, s.n}, "f32"),
                c = tensorType({1, s.m, s.n}, "f32");
    std::string body = std::string(kZeroF32) + "      %m = tosa.matmul %a0, %a1, %zp, %zp : (" + a +
                       ", " + b + ", tensor<1xf32>, tensor<1xf32>) -> " + c +
                       "\n      %r = tosa.tanh %m : (" + c + ") -> " + c + "\n";
    std::vector<float> x = randoms(s.m * s.k, 1), y = randoms(s.k * s.n, 2);
    Tensor out =
        runMain(engine, kernelProgram({a, b}, c, body),
                {Tensor::of<float>({1, s.m, s.k}, x), Tensor::of<float>({1, s.k, s.n}, y)});
    std::vector<double> want(s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < s.k; ++p)
          sum += double(x[i * s.k + p]) * double(y[p * s.n + j]);
        want[i * s.n + j] = std::tanh(sum);
      }
    // The sum's reordering (k ulps of terms below 1) shrinks through tanh, whose slope is <= 1.
    CHECK(worstError(floats(out), want) <= double(s.k) * 1.2e-7 + 1e-6);
  }
}

TEST_CASE("TOSA elementwise ops broadcast, and sigmoid, exp and clamp match a reference",
          "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t cols : {301, 64}) {
    INFO("17 x " << cols);
    std::string t = tensorType({17, cols}, "f32"), row = tensorType({1, cols}, "f32");
    std::string body =
        "      %shift = \"tosa.const\"() <{values = dense<0> : tensor<1xi8>}> : () -> "
        "tensor<1xi8>\n"
        "      %s = tosa.add %a0, %a1 : (" +
        t + ", " + row + ") -> " + t + "\n" + "      %p = tosa.mul %s, %a1, %shift : (" + t + ", " +
        row + ", tensor<1xi8>) -> " + t + "\n      %g = tosa.sigmoid %p : (" + t + ") -> " + t +
        "\n" + "      %e = tosa.exp %a0 : (" + t + ") -> " + t + "\n" +
        "      %q = tosa.add %g, %e : (" + t + ", " + t + ") -> " + t + "\n" +
        "      %r = tosa.clamp %q {min_val = 0.75 : f32, max_val = 2.5 : f32} : (" + t + ") -> " +
        t + "\n";
    std::vector<float> x = randoms(17 * cols, 3), y = randoms(cols, 4);
    Tensor out = runMain(engine, kernelProgram({t, row}, t, body),
                         {Tensor::of<float>({17, cols}, x), Tensor::of<float>({1, cols}, y)});
    std::vector<double> want(17 * cols);
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double a = x[i * cols + j], b = y[j];
        double v = 1 / (1 + std::exp(-((a + b) * b))) + std::exp(a);
        want[i * cols + j] = std::min(2.5, std::max(0.75, v));
      }
    CHECK(worstError(floats(out), want) <= 1e-6);
  }
}

TEST_CASE("TOSA reductions over either axis, transposes and reshapes match a reference",
          "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t cols : {301, 64}) {
    INFO("17 x " << cols);
    std::string t = tensorType({17, cols}, "f32"), tt = tensorType({cols, 17}, "f32"),
                sums = tensorType({1, cols}, "f32"), maxes = tensorType({17, 1}, "f32"),
                flat = tensorType({17 * cols}, "f32");
    // Everything lands in one result: the column sums broadcast over the transposed rows,
    // plus each row's maximum, reshaped back.
    std::string body =
        "      %s = tosa.reduce_sum %a0 {axis = 0 : i32} : (" + t + ") -> " + sums + "\n" +
        "      %m = tosa.reduce_max %a0 {axis = 1 : i32} : (" + t + ") -> " + maxes + "\n" +
        "      %x = tosa.add %a0, %s : (" + t + ", " + sums + ") -> " + t + "\n" +
        "      %y = tosa.add %x, %m : (" + t + ", " + maxes + ") -> " + t + "\n" +
        "      %tr = tosa.transpose %y {perms = array<i32: 1, 0>} : (" + t + ") -> " + tt + "\n" +
        "      %shape = tosa.const_shape {values = dense<[" + std::to_string(17 * cols) +
        "]> : tensor<1xindex>} : () -> !tosa.shape<1>\n" +
        "      %r = tosa.reshape %tr, %shape : (" + tt + ", !tosa.shape<1>) -> " + flat + "\n";
    std::vector<float> x = randoms(17 * cols, 5);
    Tensor out =
        runMain(engine, kernelProgram({t}, flat, body), {Tensor::of<float>({17, cols}, x)});
    std::vector<double> colSum(cols, 0), rowMax(17, -INFINITY), want(17 * cols);
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        colSum[j] += x[i * cols + j];
        rowMax[i] = std::max(rowMax[i], double(x[i * cols + j]));
      }
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < 17; ++i)
        want[j * 17 + i] = x[i * cols + j] + colSum[j] + rowMax[i];
    CHECK(worstError(floats(out), want) <= 1e-5);
  }
}

TEST_CASE("a TOSA conv2d with bias matches a reference", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string x = tensorType({1, 17, 17, 3}, "f32"), w = tensorType({8, 3, 3, 3}, "f32"),
              b = tensorType({8}, "f32"), y = tensorType({1, 15, 15, 8}, "f32");
  std::string body = std::string(kZeroF32) + "      %r = tosa.conv2d %a0, %a1, %a2, %zp, %zp " +
                     "{acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, "
                     "stride = array<i64: 1, 1>} : (" +
                     x + ", " + w + ", " + b + ", tensor<1xf32>, tensor<1xf32>) -> " + y + "\n";
  std::vector<float> in = randoms(17 * 17 * 3, 6), filter = randoms(8 * 27, 7),
                     bias = randoms(8, 8);
  Tensor out = runMain(engine, kernelProgram({x, w, b}, y, body),
                       {Tensor::of<float>({1, 17, 17, 3}, in),
                        Tensor::of<float>({8, 3, 3, 3}, filter), Tensor::of<float>({8}, bias)});
  std::vector<double> want(15 * 15 * 8);
  for (int64_t oy = 0; oy < 15; ++oy)
    for (int64_t ox = 0; ox < 15; ++ox)
      for (int64_t f = 0; f < 8; ++f) {
        double sum = bias[f];
        for (int64_t ky = 0; ky < 3; ++ky)
          for (int64_t kx = 0; kx < 3; ++kx)
            for (int64_t c = 0; c < 3; ++c)
              sum += double(in[((oy + ky) * 17 + ox + kx) * 3 + c]) *
                     double(filter[((f * 3 + ky) * 3 + kx) * 3 + c]);
        want[(oy * 15 + ox) * 8 + f] = sum;
      }
  CHECK(worstError(floats(out), want) <= 1e-5);
}

TEST_CASE("TOSA average and max pools match a reference", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string x = tensorType({1, 17, 17, 3}, "f32"), y = tensorType({1, 8, 8, 3}, "f32"),
              both = tensorType({2, 8, 8, 3}, "f32");
  std::string attrs = "kernel = array<i64: 3, 3>, pad = array<i64: 0, 0, 0, 0>, stride = "
                      "array<i64: 2, 2>";
  std::string body = std::string(kZeroF32) + "      %avg = tosa.avg_pool2d %a0, %zp, %zp {" +
                     "acc_type = f32, " + attrs + "} : (" + x +
                     ", tensor<1xf32>, tensor<1xf32>) -> " + y + "\n" +
                     "      %max = tosa.max_pool2d %a0 {" + attrs + "} : (" + x + ") -> " + y +
                     "\n      %r = tosa.concat %avg, %max {axis = 0 : i32} : (" + y + ", " + y +
                     ") -> " + both + "\n";
  std::vector<float> in = randoms(17 * 17 * 3, 9);
  Tensor out =
      runMain(engine, kernelProgram({x}, both, body), {Tensor::of<float>({1, 17, 17, 3}, in)});
  std::vector<double> want(2 * 8 * 8 * 3);
  for (int64_t oy = 0; oy < 8; ++oy)
    for (int64_t ox = 0; ox < 8; ++ox)
      for (int64_t c = 0; c < 3; ++c) {
        double sum = 0, max = -INFINITY;
        for (int64_t ky = 0; ky < 3; ++ky)
          for (int64_t kx = 0; kx < 3; ++kx) {
            double v = in[((2 * oy + ky) * 17 + 2 * ox + kx) * 3 + c];
            sum += v;
            max = std::max(max, v);
          }
        want[(oy * 8 + ox) * 3 + c] = sum / 9;
        want[8 * 8 * 3 + (oy * 8 + ox) * 3 + c] = max;
      }
  CHECK(worstError(floats(out), want) <= 1e-6);
}

TEST_CASE("softmax rows sum to one and match a reference", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t cols : {301, 64}) {
    INFO("17 x " << cols);
    std::string t = tensorType({17, cols}, "f32");
    std::string body = "      %e = tensor.empty() : " + t + "\n" +
                       "      %r = linalg.softmax dimension(1) ins(%a0 : " + t +
                       ") outs(%e : " + t + ") -> " + t + "\n";
    std::vector<float> x = randoms(17 * cols, 10, -20.0f, 20.0f);
    std::vector<float> got =
        floats(runMain(engine, kernelProgram({t}, t, body), {Tensor::of<float>({17, cols}, x)}));
    std::vector<double> want(17 * cols);
    for (int64_t i = 0; i < 17; ++i) {
      double max = -INFINITY, sum = 0, gotSum = 0;
      for (int64_t j = 0; j < cols; ++j)
        max = std::max(max, double(x[i * cols + j]));
      for (int64_t j = 0; j < cols; ++j)
        sum += std::exp(x[i * cols + j] - max);
      for (int64_t j = 0; j < cols; ++j) {
        want[i * cols + j] = std::exp(x[i * cols + j] - max) / sum;
        gotSum += got[i * cols + j];
      }
      CHECK(std::abs(gotSum - 1) <= 1e-5);
    }
    CHECK(worstError(got, want) <= 1e-6);
  }
}

TEST_CASE("linalg.pack and linalg.unpack give the tiles and then the input back", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string in = tensorType({17, 33}, "f32"), packed = tensorType({3, 5, 8, 8}, "f32");
  std::string pack = "      %z = arith.constant 0.0 : f32\n"
                     "      %e = tensor.empty() : " +
                     packed + "\n" +
                     "      %r = linalg.pack %a0 padding_value(%z : f32) inner_dims_pos = [0, 1] "
                     "inner_tiles = [8, 8] into %e : " +
                     in + " -> " + packed + "\n";
  std::string unpack = "      %e = tensor.empty() : " + in + "\n" +
                       "      %r = linalg.unpack %a0 inner_dims_pos = [0, 1] inner_tiles = [8, "
                       "8] into %e : " +
                       packed + " -> " + in + "\n";
  std::vector<float> x = randoms(17 * 33, 11);
  std::vector<float> tiles =
      floats(runMain(engine, kernelProgram({in}, packed, pack), {Tensor::of<float>({17, 33}, x)}));
  REQUIRE(tiles.size() == 3 * 5 * 8 * 8);
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < 40; ++j) {
      float want = i < 17 && j < 33 ? x[i * 33 + j] : 0.0f;
      CHECK(tiles[((i / 8 * 5 + j / 8) * 8 + i % 8) * 8 + j % 8] == want);
    }
  std::vector<float> back = floats(runMain(engine, kernelProgram({packed}, in, unpack),
                                           {Tensor::of<float>({3, 5, 8, 8}, tiles)}));
  CHECK(back == x);
}

TEST_CASE("linalg pooling, broadcasts and reductions over the outer axis match a reference",
          "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t cols : {301, 64}) {
    INFO("17 x " << cols);
    std::string t = tensorType({17, cols}, "f32"), v = tensorType({cols}, "f32");
    // max over windows of 2 rows (stride 1) of the broadcast of the column sums plus x.
    std::string pooled = tensorType({1, 16, cols, 1}, "f32"),
                image = tensorType({1, 17, cols, 1}, "f32");
    std::string body =
        "      %z = arith.constant 0.0 : f32\n"
        "      %ev = tensor.empty() : " +
        v + "\n" + "      %fv = linalg.fill ins(%z : f32) outs(%ev : " + v + ") -> " + v + "\n" +
        "      %sum = linalg.reduce ins(%a0 : " + t + ") outs(%fv : " + v + ") dimensions = [0]\n" +
        "        (%x: f32, %acc: f32) {\n          %s = arith.addf %x, %acc : f32\n"
        "          linalg.yield %s : f32\n        }\n" +
        "      %et = tensor.empty() : " + t + "\n" + "      %b = linalg.broadcast ins(%sum : " + v +
        ") outs(%et : " + t + ") dimensions = [0]\n" + "      %y = arith.addf %a0, %b : " + t +
        "\n" + "      %img = tensor.expand_shape %y [[0, 1], [2, 3]] output_shape [1, 17, " +
        std::to_string(cols) + ", 1] : " + t + " into " + image + "\n" +
        "      %w = tensor.empty() : tensor<2x1xf32>\n"
        "      %low = arith.constant -3.0e38 : f32\n"
        "      %ep = tensor.empty() : " +
        pooled + "\n" + "      %fp = linalg.fill ins(%low : f32) outs(%ep : " + pooled + ") -> " +
        pooled + "\n" +
        "      %r = linalg.pooling_nhwc_max {dilations = dense<1> : tensor<2xi64>, strides = "
        "dense<1> : tensor<2xi64>} ins(%img, %w : " +
        image + ", tensor<2x1xf32>) outs(%fp : " + pooled + ") -> " + pooled + "\n";
    std::vector<float> x = randoms(17 * cols, 12);
    std::vector<float> got = floats(
        runMain(engine, kernelProgram({t}, pooled, body), {Tensor::of<float>({17, cols}, x)}));
    std::vector<double> colSum(cols, 0), want(16 * cols);
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t j = 0; j < cols; ++j)
        colSum[j] += x[i * cols + j];
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t j = 0; j < cols; ++j)
        want[i * cols + j] = std::max(x[i * cols + j], x[(i + 1) * cols + j]) + colSum[j];
    CHECK(worstError(got, want) <= 1e-5);
  }
}

TEST_CASE("an i8 x i8 matmul into i32 is exact", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Size {
    int64_t m, n, k;
  };
  for (Size s : {Size{17, 19, 301}, Size{64, 64, 64}}) {
    INFO(s.m << " x " << s.n << " x " << s.k);
    std::string a = tensorType({s.m, s.k}, "i8"), b = tensorType({s.k, s.n}, "i8"),
                c = tensorType({s.m, s.n}, "i32");
    std::string body = matmulBody(a, b, c, "0", "i32");
    std::mt19937 generator(13);
    std::uniform_int_distribution<int> byte(-128, 127);
    std::vector<int8_t> x(s.m * s.k), y(s.k * s.n);
    for (int8_t &v : x)
      v = int8_t(byte(generator));
    for (int8_t &v : y)
      v = int8_t(byte(generator));
    Tensor out = runMain(engine, kernelProgram({a, b}, c, body),
                         {Tensor::of<int8_t>({s.m, s.k}, x), Tensor::of<int8_t>({s.k, s.n}, y)});
    llvm::ArrayRef<int32_t> got = out.view<int32_t>();
    REQUIRE(got.size() == size_t(s.m * s.n));
    int64_t wrong = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        int32_t want = 0;
        for (int64_t p = 0; p < s.k; ++p)
          want += int32_t(x[i * s.k + p]) * int32_t(y[p * s.n + j]);
        wrong += got[i * s.n + j] != want;
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE("a bf16 matmul into f32 is within bf16's rounding of the inputs", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Size {
    int64_t m, n, k;
  };
  // Values a bf16 holds exactly (8 significant bits), so the reference sees what the kernel does.
  auto toBf16 = [](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits &= 0xffff0000u;
    float r;
    std::memcpy(&r, &bits, 4);
    return double(r);
  };
  for (Size s : {Size{17, 19, 301}, Size{64, 64, 64}}) {
    INFO(s.m << " x " << s.n << " x " << s.k);
    std::string a = tensorType({s.m, s.k}, "bf16"), b = tensorType({s.k, s.n}, "bf16"),
                c = tensorType({s.m, s.n}, "f32");
    std::string body = matmulBody(a, b, c, "0.0", "f32");
    std::vector<double> x, y;
    for (float v : randoms(s.m * s.k, 14))
      x.push_back(toBf16(v));
    for (float v : randoms(s.k * s.n, 15))
      y.push_back(toBf16(v));
    Tensor out = runMain(engine, kernelProgram({a, b}, c, body),
                         {Tensor::fromDoubles(DType::BF16, {s.m, s.k}, x),
                          Tensor::fromDoubles(DType::BF16, {s.k, s.n}, y)});
    std::vector<double> want(s.m * s.n, 0);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t p = 0; p < s.k; ++p)
        for (int64_t j = 0; j < s.n; ++j)
          want[i * s.n + j] += x[i * s.k + p] * y[p * s.n + j];
    // Products of bf16s are exact in f32; the f32 sum of k of them is within k ulps.
    CHECK(worstError(floats(out), want) <= double(s.k) * 1.2e-7 + 1e-6);
  }
}

namespace {

/// The distance from `got` to `exact` in units of the last place of the float nearest
/// `exact`.
double ulps(float got, double exact) {
  float nearest = float(exact);
  if (got == nearest)
    return 0;
  float magnitude = std::abs(nearest);
  double ulp = std::nextafter(magnitude, INFINITY) - magnitude;
  return std::abs(double(got) - exact) / ulp;
}

struct MathCase {
  const char *op;
  double (*exact)(double);
  float low, high;
  double maxUlps; ///< The measured worst case (tanh 3.8, erf 3.1) rounded up; f32 libm: below 1.
};

} // namespace

TEST_CASE("approximated math functions stay within a stated number of ulps of double-precision "
          "libm",
          "[jit][input][math]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  const std::vector<MathCase> cases = {
      {"exp", [](double x) { return std::exp(x); }, -80, 80, 3},
      {"expm1", [](double x) { return std::expm1(x); }, -10, 10, 3},
      {"log", [](double x) { return std::log(x); }, 1e-3f, 1e4f, 3},
      {"log2", [](double x) { return std::log2(x); }, 1e-3f, 1e4f, 3},
      {"log1p", [](double x) { return std::log1p(x); }, -0.9f, 1e4f, 3},
      {"tanh", [](double x) { return std::tanh(x); }, -10, 10, 4},
      {"erf", [](double x) { return std::erf(x); }, -4, 4, 4},
  };
  // 4099 elements: whole vectors and a tail that is not one.
  const int64_t n = 4099;
  std::string t = tensorType({n}, "f32");
  for (const MathCase &c : cases) {
    INFO("math." << c.op);
    std::string body = std::string("      %r = math.") + c.op + " %a0 : " + t + "\n";
    std::vector<float> x = randoms(n, 16, c.low, c.high);
    std::vector<float> got =
        floats(runMain(engine, kernelProgram({t}, t, body), {Tensor::of<float>({n}, x)}));
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      worst = std::max(worst, ulps(got[i], c.exact(x[i])));
    INFO("worst: " << worst << " ulps");
    CHECK(worst <= c.maxUlps);
  }
}

TEST_CASE("a TOSA op no lowering knows is named where it was written", "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string t = tensorType({4}, "f32");
  std::string body = "      %r = tosa.custom %a0 {operator_name = \"frobnicate\", domain_name = "
                     "\"acme\", implementation_attrs = \"\"} : (" +
                     t + ") -> " + t + "\n";
  auto module = engine.compile(kernelProgram({t}, t, body), "custom.mlir");
  REQUIRE(!module);
  std::string message = llvm::toString(module.takeError());
  CHECK(message.find("custom.mlir:10:12") != std::string::npos);
  CHECK(message.find("'tosa.custom'") != std::string::npos);
}

TEST_CASE("an op the default pipeline cannot lower to LLVM is named where it was written, "
          "not by the casts it leaves",
          "[jit][input]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  std::string t = tensorType({4}, "f32");
  // EmitC is for generating C source: nothing lowers it to LLVM.
  std::string body = "      %m = emitc.literal \"1.0\" : f32\n"
                     "      %r = tensor.splat %m : " +
                     t + "\n";
  auto module = engine.compile(kernelProgram({t}, t, body), "emitc.mlir");
  REQUIRE(!module);
  std::string message = llvm::toString(module.takeError());
  INFO(message);
  CHECK(message.find("'emitc.literal'") != std::string::npos);
  CHECK(message.find("at emitc.mlir:10:") != std::string::npos);
  CHECK(message.find("could not be lowered to LLVM by the default pipeline") != std::string::npos);
  CHECK(message.find("unrealized_conversion_cast") == std::string::npos);
}
