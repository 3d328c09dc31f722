// courier-kernel-bench: an i8 matmul 1024x1024 * 1024x1024 into i32 on the in-process executor
// (pairs of products: vpdpwssd where the CPU has VNNI).
module @app {
  func.func public @main(%a: tensor<1024x1024xi8>, %b: tensor<1024x1024xi8>) -> tensor<1024x1024xi32> {
    %r = catalyst.launch_kernel @dev::@mm(%a, %b) : (tensor<1024x1024xi8>, tensor<1024x1024xi8>) -> tensor<1024x1024xi32>
    return %r : tensor<1024x1024xi32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @mm(%a: tensor<1024x1024xi8>, %b: tensor<1024x1024xi8>) -> tensor<1024x1024xi32> {
      %z = arith.constant 0 : i32
      %e = tensor.empty() : tensor<1024x1024xi32>
      %f = linalg.fill ins(%z : i32) outs(%e : tensor<1024x1024xi32>) -> tensor<1024x1024xi32>
      %r = linalg.matmul ins(%a, %b : tensor<1024x1024xi8>, tensor<1024x1024xi8>) outs(%f : tensor<1024x1024xi32>) -> tensor<1024x1024xi32>
      return %r : tensor<1024x1024xi32>
    }
  }
}
