// What the kernel tests share, in process and through servers: programs whose entry launches
// one kernel written as a body of MLIR, random inputs, and references to compare against.
#ifndef COURIER_TESTS_SUPPORT_KERNELPROGRAMS_H
#define COURIER_TESTS_SUPPORT_KERNELPROGRAMS_H

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace courier::testing {

/// `tensor<2x?x3xf32>` for shape {2, -1, 3} and element "f32": a negative size is dynamic.
inline std::string tensorType(const std::vector<int64_t> &shape, const std::string &element) {
  std::string text = "tensor<";
  for (int64_t size : shape)
    text += (size < 0 ? std::string("?") : std::to_string(size)) + "x";
  return text + element + ">";
}

/// One kernel: host entry @name launches @dev::@name on arguments of types `args` (%a0, %a1,
/// ...), giving `result`; `body` computes %r, with index constants %c0 and %c1 at hand.
struct Kernel {
  std::string name;
  std::vector<std::string> args;
  std::string result;
  std::string body;
};

/// A module with an entry per kernel, each launching its kernel in one target module @dev with
/// the `catalyst.target` attributes `target`, on the executor at `address` (by default the
/// in-process one).
inline std::string kernelModule(const std::vector<Kernel> &kernels,
                                const std::string &target = "{}",
                                const std::string &address = "local") {
  std::ostringstream host, device;
  for (const Kernel &k : kernels) {
    std::string params, names, types;
    for (size_t i = 0; i < k.args.size(); ++i) {
      std::string sep = i ? ", " : "";
      params += sep + "%a" + std::to_string(i) + ": " + k.args[i];
      names += sep + "%a" + std::to_string(i);
      types += sep + k.args[i];
    }
    host << "  func.func public @" << k.name << "(" << params << ") -> " << k.result << " {\n"
         << "    %r = catalyst.launch_kernel @dev::@" << k.name << "(" << names << ") : (" << types
         << ") -> " << k.result << "\n    return %r : " << k.result << "\n  }\n";
    device << "    func.func public @" << k.name << "(" << params << ") -> " << k.result << " {\n"
           << "      %c0 = arith.constant 0 : index\n      %c1 = arith.constant 1 : index\n"
           << k.body << "      return %r : " << k.result << "\n    }\n";
  }
  return "module @app {\n" + host.str() + "  module @dev attributes {catalyst.target = " + target +
         ", catalyst.dispatch = {address = \"" + address + "\"}} {\n" + device.str() + "  }\n}\n";
}

/// A program whose entry @main launches one kernel: kernelModule of {"main", ...}.
inline std::string kernelProgram(const std::vector<std::string> &args, const std::string &result,
                                 const std::string &body) {
  return kernelModule({{"main", args, result, body}});
}

/// Kernel body lines making %f, a `type` tensor filled with `zero` of `element`, by way of %z
/// and %e; `sizes` are tensor.empty's dynamic sizes ("%m, %n").
inline std::string zeroFilled(const std::string &type, const std::string &sizes = "",
                              const std::string &zero = "0.0", const std::string &element = "f32") {
  return "      %z = arith.constant " + zero + " : " + element + "\n      %e = tensor.empty(" +
         sizes + ") : " + type + "\n      %f = linalg.fill ins(%z : " + element +
         ") outs(%e : " + type + ") -> " + type + "\n";
}

/// A kernel body computing %r = %a0 x %a1 (of types `a` and `b`) with linalg.matmul into a
/// `c` filled with `zero` of `element`; a `c` of dynamic sizes takes %a0's rows and %a1's
/// columns.
inline std::string matmulBody(const std::string &a, const std::string &b, const std::string &c,
                              const std::string &zero, const std::string &element) {
  bool dynamic = c.find('?') != std::string::npos;
  std::string body = dynamic ? "      %m = tensor.dim %a0, %c0 : " + a +
                                   "\n      %n = tensor.dim %a1, %c1 : " + b + "\n"
                             : "";
  return body + zeroFilled(c, dynamic ? "%m, %n" : "", zero, element) +
         "      %r = linalg.matmul ins(%a0, %a1 : " + a + ", " + b + ") outs(%f : " + c + ") -> " +
         c + "\n";
}

/// `tensor<ROWSxCOLSxf32>`.
inline std::string f32Matrix(int64_t rows, int64_t cols) {
  return "tensor<" + std::to_string(rows) + "x" + std::to_string(cols) + "xf32>";
}

/// A program whose @main multiplies A (m x k) by B (k x n), f32, with a linalg.matmul in its
/// target module (`target`, at `address`).
inline std::string matmulProgram(int64_t m, int64_t n, int64_t k, const std::string &target,
                                 const std::string &address) {
  std::string a = f32Matrix(m, k), b = f32Matrix(k, n), c = f32Matrix(m, n);
  return kernelModule({{"main", {a, b}, c, matmulBody(a, b, c, "0.0", "f32")}}, target, address);
}

/// `count` floats drawn uniformly from [low, high), the same for the same seed.
inline std::vector<float> randoms(size_t count, unsigned seed, float low = -1.0f,
                                  float high = 1.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float &v : values)
    v = uniform(generator);
  return values;
}

/// A (m x k) * B (k x n), row-major, in double precision: the exact answer to within f32
/// rounding of the inputs.
inline std::vector<double> matmulExact(const std::vector<float> &a, const std::vector<float> &b,
                                       int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        c[i * n + j] += double(a[i * k + p]) * double(b[p * n + j]);
  return c;
}

/// The largest distance between `got` (anything with size() and [] of numbers) and `want`.
template <typename Values> double worstError(const Values &got, const std::vector<double> &want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  return worst;
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_KERNELPROGRAMS_H
