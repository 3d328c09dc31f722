// Printing the mlir-runner way: host code calls printMemrefF32 (on a tensor cast to an
// unranked one, as MLIR's own integration tests do) and vector.print; a kernel prints with
// vector.print too, in this process and, on an executor, into the executor's log.
// RUN: courier-run %s --entry main --no-disk-cache | FileCheck %s
// RUN: courier-run %s --entry main --isolate --no-disk-cache 2>&1 | FileCheck %s
// RUN: python3 %S/with-executor.py --show-log courier-executor -- \
// RUN:   courier-run %s --entry main --executor {executor} --no-disk-cache \
// RUN:   | FileCheck %s --check-prefix=EXECUTOR

// CHECK: Unranked Memref base@ = {{.*}} rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data =
// CHECK-NEXT: {{\[}}[1,   2,   3],
// CHECK-NEXT:  [4,   5,   6.5]]
// CHECK-NEXT: ( 1.5, 2, -3, 4.25 )
// CHECK-NEXT: 42
// CHECK-NEXT: kernel sees ( 1, 2, 3, 4 )
// CHECK-NEXT: done

// The executor's standard output is its address; the kernel's line is in its log.
// EXECUTOR: done
// EXECUTOR: exit status 0
// EXECUTOR: the executor is still serving
// EXECUTOR: executor log:
// EXECUTOR: kernel sees ( 1, 2, 3, 4 )
module @app {
  func.func private @printMemrefF32(%ptr : tensor<*xf32>)

  func.func public @main() {
    %a = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]]> : tensor<2x3xf32>
    %u = tensor.cast %a : tensor<2x3xf32> to tensor<*xf32>
    call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
    %v = arith.constant dense<[1.5, 2.0, -3.0, 4.25]> : vector<4xf32>
    vector.print %v : vector<4xf32>
    %i = arith.constant 42 : i64
    vector.print %i : i64
    %x = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %y = catalyst.launch_kernel @dev::@show(%x) : (tensor<4xf32>) -> tensor<4xf32>
    vector.print str "done\n"
    return
  }

  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @show(%x: tensor<4xf32>) -> tensor<4xf32> {
      %c0 = arith.constant 0 : index
      %pad = arith.constant 0.0 : f32
      %v = vector.transfer_read %x[%c0], %pad : tensor<4xf32>, vector<4xf32>
      vector.print str "kernel sees "
      vector.print %v : vector<4xf32>
      return %x : tensor<4xf32>
    }
  }
}
