// The program samples/05-embedding compiles: the host's `main` hands its input to a kernel
// in a target module, which runs on the in-process executor (no address given).
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
