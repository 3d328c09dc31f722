// Two kernels on two executors, then a library call on the second executor with a string
// argument and an out buffer. run.sh puts the executors' addresses in place of
// EXECUTOR_A and EXECUTOR_B.
module @app {
  func.func public @main(%x: tensor<4xf64>, %scale: f64) -> (tensor<4xf64>, f64, tensor<4xf32>) {
    %a = catalyst.launch_kernel @dev_a::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    %b = catalyst.launch_kernel @dev_b::@plus_one(%a) : (tensor<4xf64>) -> tensor<4xf64>
    %n, %o = catalyst.runtime_call fn("describe") (%scale)
        {c_params = ["f64", "str"], c_result = "f64", c_strings = ["courier"],
         dispatch = "EXECUTOR_B"} : (f64) -> (f64) outs(tensor<4xf32>)
    return %b, %n, %o : tensor<4xf64>, f64, tensor<4xf32>
  }
  module @dev_a attributes {catalyst.target = {}, catalyst.dispatch = {address = "EXECUTOR_A"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
  module @dev_b attributes {catalyst.target = {}, catalyst.dispatch = {address = "EXECUTOR_B"}} {
    func.func public @plus_one(%x: tensor<4xf64>) -> tensor<4xf64> {
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %r = arith.addf %x, %one : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
