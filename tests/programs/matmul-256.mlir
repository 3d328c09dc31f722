// @main launches a 256 x 256 f32 matmul: 16.7M iterations, past the size whose outer loop
// runs parallel. Shared by the C++ tests (tests/support/SharedPrograms.h.in) and the Python
// tests (python/programs.py).
module @app {
  func.func public @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @matmul(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<256x256xf32>
      %c = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x256xf32>) -> tensor<256x256xf32>
      %r = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%c : tensor<256x256xf32>) -> tensor<256x256xf32>
      return %r : tensor<256x256xf32>
    }
  }
}
