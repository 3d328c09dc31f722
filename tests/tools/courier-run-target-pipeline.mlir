// A target module's `pipeline` (Catalyst's key) names the passes that lower it; one that
// stops short of the LLVM dialect is a diagnostic, not a crash.
// RUN: courier-run %s --no-disk-cache --arg '[1, 2, 3, 4]' | FileCheck %s
// RUN: sed 's/"courier-lower-to-llvm"/"canonicalize"/' %s > %t.mlir
// RUN: not courier-run %t.mlir --no-disk-cache --arg '[1, 2, 3, 4]' 2>&1 | FileCheck %s --check-prefix=SHORT
// CHECK: {"data":[2,4,6,8],"dtype":"f64","shape":[4]}
// SHORT: error: lowering by pipeline 'canonicalize' left 'arith.addf' in the module; the pipeline must lower it to the LLVM dialect
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {pipeline = "courier-lower-to-llvm"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %y = arith.addf %x, %x : tensor<4xf64>
      return %y : tensor<4xf64>
    }
  }
}
