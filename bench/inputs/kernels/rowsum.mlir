// courier-kernel-bench: the sum of each row of a 4096x1024 f32 matrix, in process.
module @app {
  func.func public @main(%x: tensor<4096x1024xf32>) -> tensor<4096xf32> {
    %r = catalyst.launch_kernel @dev::@rowsum(%x) : (tensor<4096x1024xf32>) -> tensor<4096xf32>
    return %r : tensor<4096xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @rowsum(%x: tensor<4096x1024xf32>) -> tensor<4096xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<4096xf32>
      %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4096xf32>) -> tensor<4096xf32>
      %r = linalg.reduce ins(%x : tensor<4096x1024xf32>) outs(%init : tensor<4096xf32>) dimensions = [1]
        (%v: f32, %acc: f32) {
          %s = arith.addf %v, %acc : f32
          linalg.yield %s : f32
        }
      return %r : tensor<4096xf32>
    }
  }
}
