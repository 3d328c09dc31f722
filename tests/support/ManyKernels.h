// Programs of many target modules, for the tests and the benchmark of incremental and
// parallel compiles: `main` chains one small linalg kernel per module, and what it returns is
// known exactly, so an edit of one kernel shows in the answer.
#ifndef COURIER_TESTS_SUPPORT_MANYKERNELS_H
#define COURIER_TESTS_SUPPORT_MANYKERNELS_H

#include <cstdio>
#include <string>
#include <vector>

namespace courier::testing {

/// Kernel i's factor: 0.5 or 2, alternately, so every value stays exact in binary.
inline double kernelScale(size_t i) { return i % 2 ? 2.0 : 0.5; }

/// A program named @many whose `main(x: tensor<64xf64>)` launches kernel 0 on x, kernel 1 on
/// its result and so on, one kernel per target module (@k0, @k1, ... on the in-process
/// executor), kernel i computing `y * kernelScale(i) + offsets[i]` elementwise with a
/// linalg.generic. Offsets should be small integers, so that the answer is exact.
inline std::string manyKernelProgram(const std::vector<double> &offsets) {
  auto number = [](double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", value);
    return std::string(text);
  };
  std::string text = "module @many {\n"
                     "  func.func public @main(%x: tensor<64xf64>) -> tensor<64xf64> {\n";
  std::string previous = "%x";
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::string next = "%y" + std::to_string(i);
    text += "    " + next + " = catalyst.launch_kernel @k" + std::to_string(i) + "::@f(" +
            previous + ") : (tensor<64xf64>) -> tensor<64xf64>\n";
    previous = next;
  }
  text += "    return " + previous + " : tensor<64xf64>\n  }\n";
  for (size_t i = 0; i < offsets.size(); ++i)
    text += "  module @k" + std::to_string(i) +
            " attributes {catalyst.target = {}, catalyst.dispatch = {address = \"local\"}} {\n"
            "    func.func public @f(%x: tensor<64xf64>) -> tensor<64xf64> {\n"
            "      %c = arith.constant " +
            number(offsets[i]) +
            " : f64\n"
            "      %s = arith.constant " +
            number(kernelScale(i)) +
            " : f64\n"
            "      %e = tensor.empty() : tensor<64xf64>\n"
            "      %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, "
            "affine_map<(d0) -> (d0)>], iterator_types = [\"parallel\"]}\n"
            "          ins(%x : tensor<64xf64>) outs(%e : tensor<64xf64>) {\n"
            "      ^bb0(%a: f64, %o: f64):\n"
            "        %m = arith.mulf %a, %s : f64\n"
            "        %v = arith.addf %m, %c : f64\n"
            "        linalg.yield %v : f64\n"
            "      } -> tensor<64xf64>\n"
            "      return %r : tensor<64xf64>\n"
            "    }\n"
            "  }\n";
  return text + "}\n";
}

/// What manyKernelProgram(offsets)'s main returns for an input of 64 copies of `x`.
inline double manyKernelAnswer(const std::vector<double> &offsets, double x) {
  for (size_t i = 0; i < offsets.size(); ++i)
    x = x * kernelScale(i) + offsets[i];
  return x;
}

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_MANYKERNELS_H
