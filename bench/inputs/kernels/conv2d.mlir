// courier-kernel-bench: a 3x3 convolution, NHWC 1x58x58x64 by HWCF 3x3x64x64, stride 1, no
// padding, on the in-process executor.
module @app {
  func.func public @main(%in: tensor<1x58x58x64xf32>, %w: tensor<3x3x64x64xf32>) -> tensor<1x56x56x64xf32> {
    %r = catalyst.launch_kernel @dev::@conv(%in, %w) : (tensor<1x58x58x64xf32>, tensor<3x3x64x64xf32>) -> tensor<1x56x56x64xf32>
    return %r : tensor<1x56x56x64xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @conv(%in: tensor<1x58x58x64xf32>, %w: tensor<3x3x64x64xf32>) -> tensor<1x56x56x64xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<1x56x56x64xf32>
      %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32>
      %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
        ins(%in, %w : tensor<1x58x58x64xf32>, tensor<3x3x64x64xf32>) outs(%c0 : tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32>
      return %r : tensor<1x56x56x64xf32>
    }
  }
}
