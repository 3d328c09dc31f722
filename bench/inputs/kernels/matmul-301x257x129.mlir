// courier-kernel-bench: an f32 matmul 301x129 * 129x257 on the in-process executor.
module @app {
  func.func public @main(%a: tensor<301x129xf32>, %b: tensor<129x257xf32>) -> tensor<301x257xf32> {
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<301x129xf32>, tensor<129x257xf32>) -> tensor<301x257xf32>
    return %r : tensor<301x257xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @matmul(%a: tensor<301x129xf32>, %b: tensor<129x257xf32>) -> tensor<301x257xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<301x257xf32>
      %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<301x257xf32>) -> tensor<301x257xf32>
      %r = linalg.matmul ins(%a, %b : tensor<301x129xf32>, tensor<129x257xf32>) outs(%c0 : tensor<301x257xf32>) -> tensor<301x257xf32>
      return %r : tensor<301x257xf32>
    }
  }
}
