// RUN: rm -rf %t
// RUN: courier-opt %s --courier-pipeline="workspace=%t" | FileCheck %s
// RUN: ls %t/*.o | count 2

// The whole chain, from a tensor-level host with two target modules on two executors and
// a dispatched library call, down to the LLVM dialect.
module @app {
  func.func public @main(%x: tensor<4xf64>, %scale: f64) -> (tensor<4xf64>, f64) {
    %a = catalyst.launch_kernel @dev_a::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    %b = catalyst.launch_kernel @dev_b::@plus_one(%a) : (tensor<4xf64>) -> tensor<4xf64>
    %n, %o = catalyst.runtime_call fn("norm") (%scale) {c_params = ["f64", "str"], c_result = "f64", c_strings = ["l2"], dispatch = "127.0.0.1:7001"} : (f64) -> (f64) outs(tensor<4xf32>)
    return %b, %n : tensor<4xf64>, f64
  }
  module @dev_a attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
  module @dev_b attributes {catalyst.target = {}, catalyst.dispatch = {address = "127.0.0.1:7001"}} {
    func.func public @plus_one(%x: tensor<4xf64>) -> tensor<4xf64> {
      %c = arith.constant dense<1.0> : tensor<4xf64>
      %r = arith.addf %x, %c : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}

// Only LLVM dialect remains: no executor, catalyst, tensor or memref op, no nested module.
// CHECK-NOT: executor.
// CHECK-NOT: catalyst.
// CHECK-NOT: tensor.
// CHECK-NOT: memref.
// CHECK-NOT: module @dev
// CHECK-DAG: llvm.func @__catalyst__executor__launch(
// CHECK-DAG: llvm.func @__catalyst__executor__call_wrapper(
// CHECK-DAG: llvm.mlir.global internal constant @{{.*}}("_catalyst_pyface_twice\00")
// CHECK-DAG: llvm.mlir.global internal constant @{{.*}}("_catalyst_pyface_plus_one\00")
// CHECK-DAG: llvm.mlir.global internal constant @{{.*}}("norm\00")
// CHECK-LABEL: llvm.func @main
// CHECK: llvm.call @__catalyst__executor__open
// CHECK: llvm.call @__catalyst__executor__launch(
// CHECK: llvm.call @__catalyst__executor__launch(
// CHECK: llvm.call @__catalyst__executor__call_wrapper(
// CHECK: llvm.call @__catalyst__executor__free_result(
// CHECK-LABEL: llvm.func @setup()
// CHECK-DAG: llvm.call @__catalyst__executor__open
// CHECK-DAG: llvm.call @__catalyst__executor__send_binary
// CHECK-NOT: executor.
