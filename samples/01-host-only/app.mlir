// A host-only program: no target module, everything runs in the JIT'd host code.
module @app {
  func.func public @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %s = arith.addf %x, %y : tensor<4xf32>
    %p = arith.mulf %s, %s : tensor<4xf32>
    return %p : tensor<4xf32>
  }
}
