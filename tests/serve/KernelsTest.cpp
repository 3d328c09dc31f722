// Kernels of every op class the default lowering vectorizes, compiled and run in a module's
// sandboxed worker of a real courier-serve and called over REST with JSON tensors, against
// references computed here: matmuls of dynamic shape and of sizes tiles do not divide, a 2-D
// convolution, linalg.softmax, a TOSA matmul and tanh, a row sum, and an i8 x i8 matmul
// into i32.
#include "tests/serve/RestClient.h"
#include "tests/serve/ServeProcess.h"
#include "tests/support/KernelPrograms.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace courier::testing;

namespace {

template <typename T>
json tensorJson(const std::string &dtype, const std::vector<int64_t> &shape,
                const std::vector<T> &data) {
  return {{"dtype", dtype}, {"shape", shape}, {"data", data}};
}

/// Invokes `entry` with `inputs` and returns its one output's data, checking its shape.
std::vector<double> invoke(httplib::Client &http, const std::string &entry, json inputs,
                           const std::vector<int64_t> &shape) {
  Reply reply =
      post(http, "/v1/modules/kernels/invoke/" + entry, json{{"inputs", std::move(inputs)}}.dump());
  INFO(entry << ": " << reply.raw.substr(0, 400));
  REQUIRE(reply.status == 200);
  const json &out = reply.body.at("outputs").at(0);
  CHECK(out.at("shape").get<std::vector<int64_t>>() == shape);
  return out.at("data").get<std::vector<double>>();
}

const std::string kDyn = tensorType({-1, -1}, "f32");

const Kernel kMatmul{"matmul", {kDyn, kDyn}, kDyn, matmulBody(kDyn, kDyn, kDyn, "0.0", "f32")};

} // namespace

TEST_CASE("kernels of every op class compute through courier-serve what a reference computes",
          "[serve][kernels]") {
  const std::string image = tensorType({1, 13, 11, 5}, "f32"),
                    filter = tensorType({3, 3, 5, 37}, "f32"),
                    convOut = tensorType({1, 11, 9, 37}, "f32"),
                    rows = tensorType({17, 301}, "f32"), a3 = tensorType({1, 17, 129}, "f32"),
                    b3 = tensorType({1, 129, 33}, "f32"), c3 = tensorType({1, 17, 33}, "f32"),
                    wide = tensorType({3, 1023}, "f32"), sums = tensorType({3}, "f32"),
                    a8 = tensorType({17, 301}, "i8"), b8 = tensorType({301, 19}, "i8"),
                    c32 = tensorType({17, 19}, "i32");
  std::vector<Kernel> kernels = {
      kMatmul,
      {"conv",
       {image, filter},
       convOut,
       zeroFilled(convOut) + "      %r = linalg.conv_2d_nhwc_hwcf ins(%a0, %a1 : " + image + ", " +
           filter + ") outs(%f : " + convOut + ") -> " + convOut + "\n"},
      {"softmax",
       {rows},
       rows,
       "      %e = tensor.empty() : " + rows +
           "\n      %r = linalg.softmax dimension(1) ins(%a0 : " + rows + ") outs(%e : " + rows +
           ") -> " + rows + "\n"},
      {"tosa",
       {a3, b3},
       c3,
       "      %zp = \"tosa.const\"() <{values = dense<0.0> : tensor<1xf32>}> : () -> "
       "tensor<1xf32>\n      %m = tosa.matmul %a0, %a1, %zp, %zp : (" +
           a3 + ", " + b3 + ", tensor<1xf32>, tensor<1xf32>) -> " + c3 +
           "\n      %r = tosa.tanh %m : (" + c3 + ") -> " + c3 + "\n"},
      {"rowsum",
       {wide},
       sums,
       zeroFilled(sums) + "      %r = linalg.reduce ins(%a0 : " + wide + ") outs(%f : " + sums +
           ") dimensions = [1]\n        (%x: f32, %acc: f32) {\n"
           "          %t = arith.addf %x, %acc : f32\n          linalg.yield %t : f32\n"
           "        }\n"},
      {"imatmul", {a8, b8}, c32, matmulBody(a8, b8, c32, "0", "i32")},
  };
  ServeProcess serve;
  auto http = serve.client();
  http->set_read_timeout(std::chrono::seconds(120));
  Reply created = post(*http, "/v1/modules", createBody("kernels", kernelModule(kernels)));
  INFO(created.raw.substr(0, 2000));
  REQUIRE(created.status == 201);

  {
    INFO("matmuls of dynamic shape, at sizes tiles do and do not divide");
    struct Size {
      int64_t m, n, k;
    };
    for (Size s : {Size{1, 1, 1}, Size{17, 17, 17}, Size{301, 257, 129}, Size{64, 64, 64}}) {
      INFO(s.m << " x " << s.n << " x " << s.k);
      std::vector<float> a = randoms(s.m * s.k, 1), b = randoms(s.k * s.n, 2);
      std::vector<double> got =
          invoke(*http, "matmul",
                 {tensorJson("f32", {s.m, s.k}, a), tensorJson("f32", {s.k, s.n}, b)}, {s.m, s.n});
      CHECK(worstError(got, matmulExact(a, b, s.m, s.n, s.k)) <= double(s.k) * 1.2e-7 + 1e-7);
    }
  }
  {
    INFO("a 2-D convolution");
    std::vector<float> x = randoms(13 * 11 * 5, 3), w = randoms(9 * 5 * 37, 4);
    std::vector<double> got = invoke(
        *http, "conv", {tensorJson("f32", {1, 13, 11, 5}, x), tensorJson("f32", {3, 3, 5, 37}, w)},
        {1, 11, 9, 37});
    std::vector<double> want(11 * 9 * 37, 0.0);
    for (int64_t y = 0; y < 11; ++y)
      for (int64_t xx = 0; xx < 9; ++xx)
        for (int64_t f = 0; f < 37; ++f)
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx)
              for (int64_t c = 0; c < 5; ++c)
                want[(y * 9 + xx) * 37 + f] += double(x[((y + ky) * 11 + (xx + kx)) * 5 + c]) *
                                               double(w[((ky * 3 + kx) * 5 + c) * 37 + f]);
    CHECK(worstError(got, want) <= 45 * 1.2e-7 + 1e-6);
  }
  {
    INFO("linalg.softmax");
    std::vector<float> x = randoms(17 * 301, 5, -20.0f, 20.0f);
    std::vector<double> got =
        invoke(*http, "softmax", {tensorJson("f32", {17, 301}, x)}, {17, 301});
    std::vector<double> want(17 * 301);
    for (int64_t i = 0; i < 17; ++i) {
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < 301; ++j)
        max = std::max(max, double(x[i * 301 + j]));
      for (int64_t j = 0; j < 301; ++j)
        sum += std::exp(x[i * 301 + j] - max);
      for (int64_t j = 0; j < 301; ++j)
        want[i * 301 + j] = std::exp(x[i * 301 + j] - max) / sum;
    }
    CHECK(worstError(got, want) <= 1e-6);
  }
  {
    INFO("a TOSA matmul and tanh");
    std::vector<float> a = randoms(17 * 129, 6), b = randoms(129 * 33, 7);
    std::vector<double> got = invoke(
        *http, "tosa", {tensorJson("f32", {1, 17, 129}, a), tensorJson("f32", {1, 129, 33}, b)},
        {1, 17, 33});
    std::vector<double> want = matmulExact(a, b, 17, 33, 129);
    for (double &v : want)
      v = std::tanh(v);
    CHECK(worstError(got, want) <= 129 * 1.2e-7 + 1e-6);
  }
  {
    INFO("a row sum");
    std::vector<float> x = randoms(3 * 1023, 8);
    std::vector<double> got = invoke(*http, "rowsum", {tensorJson("f32", {3, 1023}, x)}, {3});
    std::vector<double> want(3, 0.0);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < 1023; ++i)
        want[r] += x[r * 1023 + i];
    CHECK(worstError(got, want) <= 1023 * 1.2e-7 + 1e-6);
  }
  {
    INFO("an i8 x i8 matmul into i32, exactly");
    std::mt19937 generator(9);
    std::uniform_int_distribution<int> byte(-128, 127);
    std::vector<int> a(17 * 301), b(301 * 19);
    for (int &v : a)
      v = byte(generator);
    for (int &v : b)
      v = byte(generator);
    std::vector<double> got =
        invoke(*http, "imatmul", {tensorJson("i8", {17, 301}, a), tensorJson("i8", {301, 19}, b)},
               {17, 19});
    std::vector<double> want(17 * 19, 0.0);
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t p = 0; p < 301; ++p)
        for (int64_t j = 0; j < 19; ++j)
          want[i * 19 + j] += double(a[i * 301 + p]) * double(b[p * 19 + j]);
    CHECK(got == want);
  }
}
