// courier-kernel-bench: softmax over the rows of a 4096x1024 f32 matrix as a user writes it
// in linalg: the row maxima, exp(x - max), the row sums, the quotients.
module @app {
  func.func public @main(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
    %r = catalyst.launch_kernel @dev::@softmax(%x) : (tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
    return %r : tensor<4096x1024xf32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @softmax(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
      %lowest = arith.constant 0xFF800000 : f32
      %zero = arith.constant 0.0 : f32
      %rows = tensor.empty() : tensor<4096xf32>
      %maxInit = linalg.fill ins(%lowest : f32) outs(%rows : tensor<4096xf32>) -> tensor<4096xf32>
      %max = linalg.reduce ins(%x : tensor<4096x1024xf32>) outs(%maxInit : tensor<4096xf32>) dimensions = [1]
        (%v: f32, %acc: f32) {
          %m = arith.maximumf %v, %acc : f32
          linalg.yield %m : f32
        }
      %empty = tensor.empty() : tensor<4096x1024xf32>
      %exp = linalg.generic {
          indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                           affine_map<(i, j) -> (i, j)>],
          iterator_types = ["parallel", "parallel"]}
        ins(%x, %max : tensor<4096x1024xf32>, tensor<4096xf32>) outs(%empty : tensor<4096x1024xf32>) {
        ^bb0(%v: f32, %m: f32, %out: f32):
          %d = arith.subf %v, %m : f32
          %e = math.exp %d : f32
          linalg.yield %e : f32
        } -> tensor<4096x1024xf32>
      %sumInit = linalg.fill ins(%zero : f32) outs(%rows : tensor<4096xf32>) -> tensor<4096xf32>
      %sum = linalg.reduce ins(%exp : tensor<4096x1024xf32>) outs(%sumInit : tensor<4096xf32>) dimensions = [1]
        (%v: f32, %acc: f32) {
          %s = arith.addf %v, %acc : f32
          linalg.yield %s : f32
        }
      %r = linalg.generic {
          indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                           affine_map<(i, j) -> (i, j)>],
          iterator_types = ["parallel", "parallel"]}
        ins(%exp, %sum : tensor<4096x1024xf32>, tensor<4096xf32>) outs(%empty : tensor<4096x1024xf32>) {
        ^bb0(%e: f32, %s: f32, %out: f32):
          %q = arith.divf %e, %s : f32
          linalg.yield %q : f32
        } -> tensor<4096x1024xf32>
      return %r : tensor<4096x1024xf32>
    }
  }
}
