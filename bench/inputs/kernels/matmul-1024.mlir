// courier-kernel-bench: an f32 matmul 1024x1024 * 1024x1024 on the in-process executor.
module @app {
  func.func public @main(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    return %r : tensor<1024x1024xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @matmul(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<1024x1024xf32>
      %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      %r = linalg.matmul ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%c0 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      return %r : tensor<1024x1024xf32>
    }
  }
}
