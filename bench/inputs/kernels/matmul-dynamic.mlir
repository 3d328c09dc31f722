// courier-kernel-bench: an f32 matmul of dynamic shape (512x512 * 512x512 in the benchmark)
// on the in-process executor: one compiled kernel for every size.
module @app {
  func.func public @main(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
    %r = catalyst.launch_kernel @dev::@matmul(%a, %b) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
    return %r : tensor<?x?xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %zero = arith.constant 0.0 : f32
      %i0 = arith.constant 0 : index
      %i1 = arith.constant 1 : index
      %m = tensor.dim %a, %i0 : tensor<?x?xf32>
      %n = tensor.dim %b, %i1 : tensor<?x?xf32>
      %empty = tensor.empty(%m, %n) : tensor<?x?xf32>
      %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c0 : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }
  }
}
