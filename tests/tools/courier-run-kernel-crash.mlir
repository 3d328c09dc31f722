// A kernel that loads from address 0, run on a real executor: courier-run prints the
// executor's kernel_crashed message, naming the kernel as the IR does (not by its entry
// symbol), exits non-zero without crashing itself, and the executor goes on serving the next
// program.
// RUN: python3 %S/with-executor.py courier-executor -- \
// RUN:   courier-run %s --executor {executor} --arg '[1, 2, 3, 4]' --no-disk-cache --cache-dir %t \
// RUN:   --then courier-run %s --entry healthy --executor {executor} --arg '[1, 2, 3, 4]' --no-disk-cache --cache-dir %t \
// RUN:   | FileCheck %s

// CHECK: courier-run: error: {{.*}}SIGSEGV (address 0x0) in @dev::@null_load; {{.*}}[kernel_crashed]
// CHECK-NEXT: exit status {{[1-9][0-9]*$}}
// CHECK-NEXT: {"data":[2,4,6,8],"dtype":"f64","shape":[4]}
// CHECK-NEXT: exit status 0
// CHECK-NEXT: the executor is still serving
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@null_load(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  func.func public @healthy(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @null_load(%x: tensor<4xf64>) -> tensor<4xf64> {
      %null = llvm.mlir.zero : !llvm.ptr
      %v = llvm.load volatile %null : !llvm.ptr -> f64
      %s = tensor.splat %v : tensor<4xf64>
      %r = arith.addf %x, %s : tensor<4xf64>
      return %r : tensor<4xf64>
    }
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
