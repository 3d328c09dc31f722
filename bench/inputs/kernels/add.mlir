// courier-kernel-bench: the elementwise sum of two 4M-element f32 tensors, in process.
module @app {
  func.func public @main(%a: tensor<4194304xf32>, %b: tensor<4194304xf32>) -> tensor<4194304xf32> {
    %r = catalyst.launch_kernel @dev::@add(%a, %b) : (tensor<4194304xf32>, tensor<4194304xf32>) -> tensor<4194304xf32>
    return %r : tensor<4194304xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @add(%a: tensor<4194304xf32>, %b: tensor<4194304xf32>) -> tensor<4194304xf32> {
      %r = arith.addf %a, %b : tensor<4194304xf32>
      return %r : tensor<4194304xf32>
    }
  }
}
