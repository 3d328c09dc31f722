// Embeds the engine: compiles a program whose kernel runs on the in-process executor and
// calls it with a vector.
#include "jit/Engine.h"

#include <cstdio>

static const char *kProgram = R"mlir(
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

int main() {
  courier::Engine engine;
  auto module = engine.compile(kProgram, "embedded.mlir");
  if (!module) {
    std::fprintf(stderr, "compile failed: %s\n", llvm::toString(module.takeError()).c_str());
    return 1;
  }
  auto outputs = (*module)->invoke(
      "main", {courier::Tensor::fromDoubles(courier::DType::F32, {3}, {1.5, 2, 3})});
  if (!outputs) {
    std::fprintf(stderr, "invoke failed: %s\n", llvm::toString(outputs.takeError()).c_str());
    return 1;
  }
  const courier::Tensor &y = (*outputs)[0];
  std::printf("square([1.5, 2, 3]) = [%g, %g, %g]\n", y.at(0), y.at(1), y.at(2));
  return 0;
}
