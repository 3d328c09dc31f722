// A host program whose kernel runs on the in-process executor: `scale` doubles a vector
// and adds one, compiled on its own and shipped to "local" with no server.
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      %two = arith.constant dense<2.0> : tensor<4xf64>
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %d = arith.mulf %x, %two : tensor<4xf64>
      %r = arith.addf %d, %one : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
