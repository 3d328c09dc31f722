// Sample 1 with a driver that calls it and prints the result, for mlir-runner.
func.func private @printMemrefF32(tensor<*xf32>)
func.func public @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.addf %x, %y : tensor<4xf32>
  %p = arith.mulf %s, %s : tensor<4xf32>
  return %p : tensor<4xf32>
}
func.func @driver() {
  %x = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %y = arith.constant dense<[1.0, 1.0, 1.0, 1.0]> : tensor<4xf32>
  %r = func.call @main(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %u = tensor.cast %r : tensor<4xf32> to tensor<*xf32>
  func.call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
