// Kernels the default lowering tiles and vectorizes (courier-vectorize), against references
// computed here: matmuls of sizes that tiles do and do not divide, elementwise ops and
// reductions, in target modules on the in-process executor and in host code; and
// fp = "strict", bit-identical to products and sums taken in source order.
#include "jit/Engine.h"

#include "tests/jit/TestSupport.h"
#include "tests/support/KernelPrograms.h"
#include "tests/transport/ExecutorProcess.h"

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

std::string shape(int64_t rows, int64_t cols) { return f32Matrix(rows, cols); }

/// A target module computing A (m x k) * B (k x n) with linalg.matmul, with `fp` as its
/// floating-point policy ("" for the default), dispatched to `address`.
std::string matmulProgram(int64_t m, int64_t n, int64_t k, const std::string &fp,
                          const std::string &address = "local") {
  return testing::matmulProgram(m, n, k, fp.empty() ? "{}" : "{fp = \"" + fp + "\"}", address);
}

/// C = A * B with every product rounded, then added in order of k: the scalar lowering's
/// arithmetic (volatile keeps the compiler from fusing the two into an FMA).
std::vector<float> matmulInOrder(const std::vector<float> &a, const std::vector<float> &b,
                                 int64_t m, int64_t n, int64_t k) {
  std::vector<float> c(m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p) {
        volatile float product = a[i * k + p] * b[p * n + j];
        sum = sum + product;
      }
      c[i * n + j] = sum;
    }
  return c;
}

std::vector<float> runMatmul(Engine &engine, int64_t m, int64_t n, int64_t k, const std::string &fp,
                             const std::vector<float> &a, const std::vector<float> &b,
                             const std::string &address = "local") {
  auto module = engine.compile(matmulProgram(m, n, k, fp, address), "matmul.mlir");
  REQUIRE(ok(module));
  auto out =
      (*module)->invoke("main", {Tensor::of<float>({m, k}, a), Tensor::of<float>({k, n}, b)});
  REQUIRE(ok(out));
  REQUIRE(out->size() == 1);
  llvm::ArrayRef<float> values = (*out)[0].view<float>();
  return std::vector<float>(values.begin(), values.end());
}

/// A 3 x 3 filter over an image of h x w pixels of c channels, giving f.
struct ConvShape {
  int64_t h, w, c, f;
};

/// A target module computing a linalg.conv_2d_nhwc_hwcf of `s`, dispatched to `address`.
std::string convProgram(const ConvShape &s, const std::string &address = "local") {
  int64_t oh = s.h - 2, ow = s.w - 2;
  auto type = [](std::vector<int64_t> dims) {
    std::string text = "tensor<";
    for (int64_t d : dims)
      text += std::to_string(d) + "x";
    return text + "f32>";
  };
  std::string in = type({1, s.h, s.w, s.c}), filter = type({3, 3, s.c, s.f}),
              out = type({1, oh, ow, s.f});
  std::ostringstream text;
  text << "module @app {\n"
       << "  func.func public @main(%i: " << in << ", %w: " << filter << ") -> " << out << " {\n"
       << "    %r = catalyst.launch_kernel @dev::@conv(%i, %w) : (" << in << ", " << filter
       << ") -> " << out << "\n    return %r : " << out << "\n  }\n"
       << "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
          "\""
       << address << "\"}} {\n"
       << "    func.func public @conv(%i: " << in << ", %w: " << filter << ") -> " << out << " {\n"
       << "      %z = arith.constant 0.0 : f32\n"
       << "      %e = tensor.empty() : " << out << "\n"
       << "      %f = linalg.fill ins(%z : f32) outs(%e : " << out << ") -> " << out << "\n"
       << "      %r = linalg.conv_2d_nhwc_hwcf ins(%i, %w : " << in << ", " << filter
       << ") outs(%f : " << out << ") -> " << out << "\n"
       << "      return %r : " << out << "\n    }\n  }\n}\n";
  return text.str();
}

} // namespace

TEST_CASE("vectorized matmuls match a reference at sizes tiles do and do not divide",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Size {
    int64_t m, n, k;
  };
  for (Size s : {Size{1, 1, 1}, Size{17, 17, 17}, Size{64, 64, 64}, Size{8, 32, 300},
                 Size{301, 257, 129}, Size{128, 512, 256},
                 // B's rows a page apart: its tiles are read from packed copies.
                 Size{128, 1024, 512}}) {
    INFO(s.m << " x " << s.n << " x " << s.k);
    std::vector<float> a = randoms(s.m * s.k, 1), b = randoms(s.k * s.n, 2);
    std::vector<float> c = runMatmul(engine, s.m, s.n, s.k, "", a, b);
    std::vector<double> exact = matmulExact(a, b, s.m, s.n, s.k);
    // Reordered and fused sums of k terms of magnitude below 1: within k ulps of 1.
    double tolerance = double(s.k) * 1.2e-7 + 1e-7;
    double worst = 0;
    for (size_t i = 0; i < c.size(); ++i)
      worst = std::max(worst, std::abs(double(c[i]) - exact[i]));
    CHECK(worst <= tolerance);
  }
}

TEST_CASE("fp = \"strict\" gives the bits of products and sums taken in source order",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  int64_t m = 33, n = 65, k = 129;
  std::vector<float> a = randoms(m * k, 3), b = randoms(k * n, 4);
  std::vector<float> strict = runMatmul(engine, m, n, k, "strict", a, b);
  std::vector<float> inOrder = matmulInOrder(a, b, m, n, k);
  REQUIRE(strict.size() == inOrder.size());
  CHECK(std::memcmp(strict.data(), inOrder.data(), strict.size() * sizeof(float)) == 0);
  // The default reorders and fuses: the bits differ somewhere, within the tolerance.
  std::vector<float> fast = runMatmul(engine, m, n, k, "", a, b);
  CHECK(std::memcmp(fast.data(), inOrder.data(), fast.size() * sizeof(float)) != 0);
}

TEST_CASE("vectorized elementwise ops and reductions match a reference, in a target and in "
          "host code",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t n : {1, 17, 1000, 1023, 4096}) {
    INFO("n = " << n);
    std::string v = "tensor<" + std::to_string(n) + "xf32>";
    std::string m2 = "tensor<3x" + std::to_string(n) + "xf32>";
    std::ostringstream text;
    text << "module @app {\n"
         << "  func.func public @host_add(%a: " << v << ", %b: " << v << ") -> " << v << " {\n"
         << "    %r = arith.addf %a, %b : " << v << "\n    return %r : " << v << "\n  }\n"
         << "  func.func public @main(%a: " << v << ", %b: " << v << ", %m: " << m2 << ") -> (" << v
         << ", tensor<3xf32>) {\n"
         << "    %r:2 = catalyst.launch_kernel @dev::@k(%a, %b, %m) : (" << v << ", " << v << ", "
         << m2 << ") -> (" << v << ", tensor<3xf32>)\n"
         << "    return %r#0, %r#1 : " << v << ", tensor<3xf32>\n  }\n"
         << "  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "
            "\"local\"}} {\n"
         << "    func.func public @k(%a: " << v << ", %b: " << v << ", %m: " << m2 << ") -> (" << v
         << ", tensor<3xf32>) {\n"
         << "      %p = arith.mulf %a, %b : " << v << "\n"
         << "      %z = arith.constant 0.0 : f32\n"
         << "      %e = tensor.empty() : tensor<3xf32>\n"
         << "      %f = linalg.fill ins(%z : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>\n"
         << "      %s = linalg.reduce ins(%m : " << m2
         << ") outs(%f : tensor<3xf32>) dimensions = [1]\n"
         << "        (%x: f32, %acc: f32) {\n"
         << "          %t = arith.addf %x, %acc : f32\n"
         << "          linalg.yield %t : f32\n"
         << "        }\n"
         << "      return %p, %s : " << v << ", tensor<3xf32>\n    }\n  }\n}\n";
    auto module = engine.compile(text.str(), "elementwise.mlir");
    REQUIRE(ok(module));
    std::vector<float> a = randoms(n, 5), b = randoms(n, 6), rows = randoms(3 * n, 7);
    auto sum =
        (*module)->invoke("host_add", {Tensor::of<float>({n}, a), Tensor::of<float>({n}, b)});
    REQUIRE(ok(sum));
    auto out = (*module)->invoke("main", {Tensor::of<float>({n}, a), Tensor::of<float>({n}, b),
                                          Tensor::of<float>({3, n}, rows)});
    REQUIRE(ok(out));
    llvm::ArrayRef<float> added = (*sum)[0].view<float>();
    llvm::ArrayRef<float> product = (*out)[0].view<float>();
    llvm::ArrayRef<float> reduced = (*out)[1].view<float>();
    for (int64_t i = 0; i < n; ++i) {
      // One rounding each: exact whatever the order.
      CHECK(added[i] == a[i] + b[i]);
      CHECK(product[i] == a[i] * b[i]);
    }
    for (int64_t r = 0; r < 3; ++r) {
      double exact = 0;
      for (int64_t i = 0; i < n; ++i)
        exact += rows[r * n + i];
      CHECK(std::abs(reduced[r] - exact) <= double(n) * 1.2e-7 + 1e-6);
    }
  }
}

TEST_CASE("a vectorized 2-D convolution matches a reference, tiles dividing its shape or not",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (ConvShape s : {ConvShape{10, 10, 16, 64}, ConvShape{13, 11, 5, 37}}) {
    int64_t oh = s.h - 2, ow = s.w - 2;
    INFO(s.h << "x" << s.w << "x" << s.c << " * 3x3x" << s.c << "x" << s.f);
    auto module = engine.compile(convProgram(s), "conv.mlir");
    REQUIRE(ok(module));
    std::vector<float> image = randoms(s.h * s.w * s.c, 8), weights = randoms(9 * s.c * s.f, 9);
    auto result = (*module)->invoke("main", {Tensor::of<float>({1, s.h, s.w, s.c}, image),
                                             Tensor::of<float>({3, 3, s.c, s.f}, weights)});
    REQUIRE(ok(result));
    llvm::ArrayRef<float> got = (*result)[0].view<float>();
    double worst = 0;
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x)
        for (int64_t f = 0; f < s.f; ++f) {
          double exact = 0;
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx)
              for (int64_t c = 0; c < s.c; ++c)
                exact += double(image[((y + ky) * s.w + (x + kx)) * s.c + c]) *
                         double(weights[((ky * 3 + kx) * s.c + c) * s.f + f]);
          worst = std::max(worst, std::abs(double(got[(y * ow + x) * s.f + f]) - exact));
        }
    CHECK(worst <= double(9 * s.c) * 1.2e-7 + 1e-6);
  }
}

TEST_CASE("vectorized kernels give a real courier-executor's results the same bits as in process",
          "[jit][vectorize][executor]") {
  testing::ExecutorProcess executor;
  TempDir dir;
  Engine engine(optionsIn(dir));
  // The engine compiles for the CPU the executor reports, this machine's: the same code runs
  // on both sides, so the numbers are the same to the bit.
  struct Size {
    int64_t m, n, k;
  };
  for (Size s : {Size{17, 17, 17}, Size{301, 257, 129}, Size{128, 1024, 512}}) {
    INFO("matmul " << s.m << " x " << s.n << " x " << s.k);
    std::vector<float> a = randoms(s.m * s.k, 11), b = randoms(s.k * s.n, 12);
    std::vector<float> here = runMatmul(engine, s.m, s.n, s.k, "", a, b);
    std::vector<float> there = runMatmul(engine, s.m, s.n, s.k, "", a, b, executor.address());
    REQUIRE(here.size() == there.size());
    CHECK(std::memcmp(here.data(), there.data(), here.size() * sizeof(float)) == 0);
  }
  ConvShape s{13, 11, 5, 37};
  std::vector<float> image = randoms(s.h * s.w * s.c, 13), weights = randoms(9 * s.c * s.f, 14);
  std::vector<std::vector<float>> results;
  for (const std::string &address : {std::string("local"), executor.address()}) {
    INFO("conv on " << address);
    auto module = engine.compile(convProgram(s, address), "conv.mlir");
    REQUIRE(ok(module));
    auto out = (*module)->invoke("main", {Tensor::of<float>({1, s.h, s.w, s.c}, image),
                                          Tensor::of<float>({3, 3, s.c, s.f}, weights)});
    REQUIRE(ok(out));
    llvm::ArrayRef<float> values = (*out)[0].view<float>();
    results.emplace_back(values.begin(), values.end());
  }
  REQUIRE(results[0].size() == results[1].size());
  CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
}

namespace {

/// `values` (rows x cols, row-major) transposed.
std::vector<float> transposed(const std::vector<float> &values, int64_t rows, int64_t cols) {
  std::vector<float> out(values.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[j * rows + i] = values[i * cols + j];
  return out;
}

} // namespace

TEST_CASE("matmuls, elementwise ops and row sums on tensors of dynamic shape match a reference",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  const std::string dyn2 = "tensor<?x?xf32>", dyn1 = "tensor<?xf32>";
  std::string matmul = matmulBody(dyn2, dyn2, dyn2, "0.0", "f32");
  std::string program = kernelProgram({dyn2, dyn2}, dyn2, matmul);
  struct Size {
    int64_t m, n, k;
  };
  // One compiled module serves every size: tiles of 8 x 32 where they fit, scalar strips where
  // they do not.
  for (Size s : {Size{1, 1, 1}, Size{17, 17, 17}, Size{301, 257, 129}, Size{64, 1000, 40},
                 Size{1023, 33, 65}}) {
    INFO("matmul " << s.m << " x " << s.n << " x " << s.k);
    std::vector<float> a = randoms(s.m * s.k, 21), b = randoms(s.k * s.n, 22);
    Tensor c = runMain(engine, program,
                       {Tensor::of<float>({s.m, s.k}, a), Tensor::of<float>({s.k, s.n}, b)});
    CHECK(c.shape == std::vector<int64_t>{s.m, s.n});
    CHECK(worstError(c.view<float>(), matmulExact(a, b, s.m, s.n, s.k)) <=
          double(s.k) * 1.2e-7 + 1e-7);
  }
  std::string add = "      %n = tensor.dim %a0, %c0 : tensor<?xf32>\n"
                    "      %e = tensor.empty(%n) : tensor<?xf32>\n"
                    "      %r = linalg.add ins(%a0, %a1 : tensor<?xf32>, tensor<?xf32>) outs(%e : "
                    "tensor<?xf32>) -> tensor<?xf32>\n";
  std::string rowSum = "      %m = tensor.dim %a0, %c0 : tensor<?x?xf32>\n" +
                       zeroFilled("tensor<?xf32>", "%m") +
                       "      %r = linalg.reduce ins(%a0 : tensor<?x?xf32>) outs(%f : "
                       "tensor<?xf32>) dimensions = [1]\n"
                       "        (%x: f32, %acc: f32) {\n"
                       "          %t = arith.addf %x, %acc : f32\n"
                       "          linalg.yield %t : f32\n"
                       "        }\n";
  std::string addProgram = kernelProgram({dyn1, dyn1}, dyn1, add);
  std::string rowSumProgram = kernelProgram({dyn2}, dyn1, rowSum);
  for (int64_t n : {1, 17, 1000, 1023}) {
    INFO("n = " << n);
    std::vector<float> a = randoms(n, 23), b = randoms(n, 24), rows = randoms(3 * n, 25);
    Tensor sum =
        runMain(engine, addProgram, {Tensor::of<float>({n}, a), Tensor::of<float>({n}, b)});
    llvm::ArrayRef<float> added = sum.view<float>();
    REQUIRE(added.size() == size_t(n));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      wrong += added[i] != a[i] + b[i]; // One rounding: exact whatever the order.
    CHECK(wrong == 0);
    Tensor reduced = runMain(engine, rowSumProgram, {Tensor::of<float>({3, n}, rows)});
    std::vector<double> exact(3, 0.0);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < n; ++i)
        exact[r] += rows[r * n + i];
    CHECK(worstError(reduced.view<float>(), exact) <= double(n) * 1.2e-7 + 1e-6);
  }
}

TEST_CASE("matmuls reading an operand transposed, through their maps or a linalg.transpose, or "
          "a strided slice of it, match a reference",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Size {
    int64_t m, n, k;
  };
  // The last: B's rows a page apart, where a plain matmul reads B from packed copies.
  for (Size s : {Size{17, 17, 17}, Size{301, 257, 129}, Size{128, 1024, 512}}) {
    INFO(s.m << " x " << s.n << " x " << s.k);
    std::string at = shape(s.k, s.m), bt = shape(s.n, s.k), a = shape(s.m, s.k),
                b = shape(s.k, s.n), c = shape(s.m, s.n);
    std::string fill = zeroFilled(c);
    std::vector<float> x = randoms(s.m * s.k, 31), y = randoms(s.k * s.n, 32);
    std::vector<double> exact = matmulExact(x, y, s.m, s.n, s.k);
    double tolerance = double(s.k) * 1.2e-7 + 1e-7;
    // A as k x m, B as n x k, each read through the matmul's indexing maps.
    std::string maps = fill +
                       "      %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (k, m)>, "
                       "affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>] ins(%a0, "
                       "%a1 : " +
                       at + ", " + bt + ") outs(%f : " + c + ") -> " + c + "\n";
    Tensor viaMaps = runMain(engine, kernelProgram({at, bt}, c, maps),
                             {Tensor::of<float>({s.k, s.m}, transposed(x, s.m, s.k)),
                              Tensor::of<float>({s.n, s.k}, transposed(y, s.k, s.n))});
    CHECK(worstError(viaMaps.view<float>(), exact) <= tolerance);
    // B as n x k, transposed by an op of its own first.
    std::string transpose = fill + "      %t = tensor.empty() : " + b +
                            "\n      %bt = linalg.transpose ins(%a1 : " + bt + ") outs(%t : " + b +
                            ") permutation = [1, 0]\n      %r = linalg.matmul ins(%a0, %bt : " + a +
                            ", " + b + ") outs(%f : " + c + ") -> " + c + "\n";
    Tensor viaTranspose = runMain(
        engine, kernelProgram({a, bt}, c, transpose),
        {Tensor::of<float>({s.m, s.k}, x), Tensor::of<float>({s.n, s.k}, transposed(y, s.k, s.n))});
    CHECK(worstError(viaTranspose.view<float>(), exact) <= tolerance);
    // A as every other column of an m x 2k tensor: a strided slice the matmul reads in place.
    std::string wide = shape(s.m, 2 * s.k);
    std::string strided = fill + "      %s = tensor.extract_slice %a0[0, 1] [" +
                          std::to_string(s.m) + ", " + std::to_string(s.k) + "] [1, 2] : " + wide +
                          " to " + a + "\n      %r = linalg.matmul ins(%s, %a1 : " + a + ", " + b +
                          ") outs(%f : " + c + ") -> " + c + "\n";
    std::vector<float> spread(s.m * 2 * s.k, 1e6f); // Read only if the stride is ignored.
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t p = 0; p < s.k; ++p)
        spread[i * 2 * s.k + 2 * p + 1] = x[i * s.k + p];
    Tensor viaSlice =
        runMain(engine, kernelProgram({wide, b}, c, strided),
                {Tensor::of<float>({s.m, 2 * s.k}, spread), Tensor::of<float>({s.k, s.n}, y)});
    CHECK(worstError(viaSlice.view<float>(), exact) <= tolerance);
  }
}

TEST_CASE("an f64 matmul is vectorized to within f64 rounding of a reference", "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  for (int64_t size : {17, 130}) {
    INFO(size << "^3");
    std::string t = "tensor<" + std::to_string(size) + "x" + std::to_string(size) + "xf64>";
    std::string body = matmulBody(t, t, t, "0.0", "f64");
    std::vector<double> a(size * size), b(size * size);
    std::mt19937 generator(33);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (double &v : a)
      v = uniform(generator);
    for (double &v : b)
      v = uniform(generator);
    Tensor c = runMain(engine, kernelProgram({t, t}, t, body),
                       {Tensor::of<double>({size, size}, a), Tensor::of<double>({size, size}, b)});
    llvm::ArrayRef<double> got = c.view<double>();
    REQUIRE(got.size() == size_t(size * size));
    double worst = 0;
    for (int64_t i = 0; i < size; ++i)
      for (int64_t j = 0; j < size; ++j) {
        long double exact = 0;
        for (int64_t p = 0; p < size; ++p)
          exact += (long double)a[i * size + p] * b[p * size + j];
        worst = std::max(worst, double(std::abs((long double)got[i * size + j] - exact)));
      }
    CHECK(worst <= double(size) * 2.3e-16 + 1e-16);
  }
}

TEST_CASE("integer matmuls taken in pairs of products are exact: signed and unsigned i8, and i16 "
          "at its extremes, at sizes tiles and pairs do and do not divide",
          "[jit][vectorize]") {
  TempDir dir;
  Engine engine(optionsIn(dir));
  struct Case {
    const char *element;
    const char *cast; ///< The matmul's cast attribute, "" for the default (signed).
    int low, high;
  };
  struct Size {
    int64_t m, n, k;
  };
  for (Case c : {Case{"i8", "", -128, 127}, Case{"i8", "cast_unsigned", 0, 255},
                 Case{"i16", "", -32768, 32767}}) {
    for (Size s : {Size{1, 1, 1}, Size{17, 19, 301}, Size{70, 96, 130}}) {
      INFO(c.element << " " << c.cast << " " << s.m << " x " << s.n << " x " << s.k);
      std::string e = c.element;
      std::string a = "tensor<" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + e + ">",
                  b = "tensor<" + std::to_string(s.k) + "x" + std::to_string(s.n) + "x" + e + ">",
                  r = "tensor<" + std::to_string(s.m) + "x" + std::to_string(s.n) + "xi32>";
      std::string cast =
          *c.cast ? std::string(" {cast = #linalg.type_fn<") + c.cast + ">}" : std::string();
      std::string body = zeroFilled(r, "", "0", "i32") + "      %r = linalg.matmul" + cast +
                         " ins(%a0, %a1 : " + a + ", " + b + ") outs(%f : " + r + ") -> " + r +
                         "\n";
      std::mt19937 generator(41);
      std::uniform_int_distribution<int> value(c.low, c.high);
      std::vector<int64_t> x(s.m * s.k), y(s.k * s.n);
      // The extremes where they matter most: the first row and column all at the low end.
      for (int64_t i = 0; i < s.m * s.k; ++i)
        x[i] = i < s.k ? c.low : value(generator);
      for (int64_t i = 0; i < s.k * s.n; ++i)
        y[i] = i % s.n == 0 ? c.low : value(generator);
      auto tensorOf = [&](const std::vector<int64_t> &values, std::vector<int64_t> shape) {
        if (e == "i16")
          return Tensor::of<int16_t>(std::move(shape),
                                     std::vector<int16_t>(values.begin(), values.end()));
        // Signless bytes: 0 to 255 as the bit patterns cast_unsigned reads.
        std::vector<int8_t> bytes;
        for (int64_t v : values)
          bytes.push_back(int8_t(uint8_t(v)));
        return Tensor::of<int8_t>(std::move(shape), bytes);
      };
      Tensor out = runMain(engine, kernelProgram({a, b}, r, body),
                           {tensorOf(x, {s.m, s.k}), tensorOf(y, {s.k, s.n})});
      llvm::ArrayRef<int32_t> got = out.view<int32_t>();
      REQUIRE(got.size() == size_t(s.m * s.n));
      int64_t wrong = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          // In 64 bits, then wrapped to 32 as the i32 arithmetic does.
          int64_t want = 0;
          for (int64_t p = 0; p < s.k; ++p)
            want += x[i * s.k + p] * y[p * s.n + j];
          wrong += got[i * s.n + j] != int32_t(uint32_t(uint64_t(want)));
        }
      CHECK(wrong == 0);
    }
  }
}
