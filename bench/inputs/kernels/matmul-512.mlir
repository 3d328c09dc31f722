// courier-kernel-bench: an f32 matmul 512x512 * 512x512 on the in-process executor.
module @app {
  func.func public @main(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    return %r : tensor<512x512xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @matmul(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<512x512xf32>
      %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x512xf32>) -> tensor<512x512xf32>
      %r = linalg.matmul ins(%a, %b : tensor<512x512xf32>, tensor<512x512xf32>) outs(%c0 : tensor<512x512xf32>) -> tensor<512x512xf32>
      return %r : tensor<512x512xf32>
    }
  }
}
