// courier-kernel-bench: softmax over the rows of a 4096x1024 f32 matrix as linalg.softmax.
module @app {
  func.func public @main(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
    %r = catalyst.launch_kernel @dev::@softmax(%x) : (tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
    return %r : tensor<4096x1024xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @softmax(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
      %empty = tensor.empty() : tensor<4096x1024xf32>
      %r = linalg.softmax dimension(1) ins(%x : tensor<4096x1024xf32>) outs(%empty : tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
      return %r : tensor<4096x1024xf32>
    }
  }
}
