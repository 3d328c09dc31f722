// A program whose target module names an executor on a unix socket, in its IR and with
// --executor: courier-run ships the kernel there and prints its result.
// RUN: rm -rf %t && mkdir -p %t
// RUN: sed 's|@SOCKET@|%t/executor.sock|' %s > %t/app.mlir
// RUN: python3 %S/with-executor.py courier-executor --listen unix:%t/executor.sock -- \
// RUN:   courier-run %t/app.mlir --arg '[1, 2, 3, 4]' --no-disk-cache --cache-dir %t/cache \
// RUN:   --then courier-run %t/app.mlir --executor {executor} --arg '[5, 6, 7, 8]' --no-disk-cache --cache-dir %t/cache \
// RUN:   | FileCheck %s

// CHECK: {"data":[2,4,6,8],"dtype":"f64","shape":[4]}
// CHECK-NEXT: exit status 0
// CHECK-NEXT: {"data":[10,12,14,16],"dtype":"f64","shape":[4]}
// CHECK-NEXT: exit status 0
// CHECK-NEXT: the executor is still serving
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {},
                          catalyst.dispatch = {address = "unix:@SOCKET@"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
