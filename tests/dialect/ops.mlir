// RUN: courier-opt %s | courier-opt | FileCheck %s
// RUN: courier-opt %s --mlir-print-op-generic | courier-opt | FileCheck %s

// CHECK-LABEL: func @executor_ops
func.func @executor_ops(%x: memref<4xf32>, %in: memref<8xi8>, %out: memref<4xf32>) -> memref<4xf32> {
  // CHECK: %[[S:.*]] = executor.open("h:7000") : !executor.session
  %s = executor.open("h:7000") : !executor.session
  // CHECK: executor.send_binary %[[S]]("/w/k.o") : !executor.session
  executor.send_binary %s("/w/k.o") : !executor.session
  // CHECK: %[[R:.*]] = executor.launch %[[S]]("scale", "/w/k.o") (%{{.*}}) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  // CHECK: %[[T:.*]] = executor.launch_async %[[S]]("serve", "/w/k.o") : !executor.session -> !executor.token
  %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
  // CHECK: executor.await %[[T]] : !executor.token
  executor.await %t : !executor.token
  // CHECK: executor.call %[[S]]("sym") (%{{.*}}, %{{.*}}) {num_input_args = 1 : i32} : !executor.session, (memref<8xi8>, memref<4xf32>) -> ()
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<8xi8>, memref<4xf32>) -> ()
  // CHECK: executor.close %[[S]] : !executor.session
  executor.close %s : !executor.session
  return %r : memref<4xf32>
}

// CHECK-LABEL: func @tensor_forms
func.func @tensor_forms(%s: !executor.session, %x: tensor<2x3xf64>, %in: tensor<8xi8>) -> (tensor<2x3xf64>, tensor<4xf32>) {
  // CHECK: executor.launch %{{.*}}("k", "/o.o") (%{{.*}}) : !executor.session, (tensor<2x3xf64>) -> tensor<2x3xf64>
  %r = executor.launch %s("k", "/o.o") (%x) : !executor.session, (tensor<2x3xf64>) -> tensor<2x3xf64>
  // CHECK: executor.call %{{.*}}("sym") (%{{.*}}) {num_input_args = 1 : i32} : !executor.session, (tensor<8xi8>) -> tensor<4xf32>
  %o = executor.call %s("sym") (%in) {num_input_args = 1 : i32} : !executor.session, (tensor<8xi8>) -> tensor<4xf32>
  // CHECK: executor.launch %{{.*}}("noargs", "/o.o") () : !executor.session, () -> ()
  executor.launch %s("noargs", "/o.o") () : !executor.session, () -> ()
  return %r, %o : tensor<2x3xf64>, tensor<4xf32>
}

// CHECK-LABEL: module @app
module @app {
  func.func public @main(%x: tensor<4xf64>, %p: i64, %f: f64) -> tensor<4xf64> {
    // CHECK: catalyst.launch_kernel @dev::@scale(%{{.*}}) : (tensor<4xf64>) -> tensor<4xf64>
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
    // CHECK: catalyst.runtime_call fn("norm") (%{{.*}}, %{{.*}}) {c_params = ["f64", "str", "ptr"], c_result = "f64", c_strings = ["l2"], dispatch = ""} : (f64, i64) -> f64 outs(tensor<4xf32>)
    %r, %o = catalyst.runtime_call fn("norm") (%f, %p) {c_params = ["f64", "str", "ptr"], c_result = "f64", c_strings = ["l2"], dispatch = ""} : (f64, i64) -> (f64) outs(tensor<4xf32>)
    // CHECK: catalyst.runtime_call fn("log") () {c_params = []} : () -> ()
    catalyst.runtime_call fn("log") () {c_params = []} : () -> ()
    // CHECK: catalyst.custom_call fn("lib") (%{{.*}}) {backend_config = {dispatch = ""}} : (tensor<4xf64>) -> tensor<2xf32>
    %c = catalyst.custom_call fn("lib") (%y) {backend_config = {dispatch = ""}} : (tensor<4xf64>) -> tensor<2xf32>
    // CHECK: catalyst.launch_kernel @dev::@serve() {catalyst.nonblocking} : () -> ()
    catalyst.launch_kernel @dev::@serve() {catalyst.nonblocking} : () -> ()
    return %y : tensor<4xf64>
  }
  // CHECK: func.func @bringup() attributes {catalyst.backline_bringup}
  func.func @bringup() attributes {catalyst.backline_bringup} {
    return
  }
  // CHECK: func.func @buffers
  func.func @buffers(%s: !executor.session, %in: memref<8xi8>, %out: memref<4xf32>) {
    // CHECK: catalyst.custom_call fn("lib") (%{{.*}}, %{{.*}}) {backend_config = {dispatch = "h:1"}, number_original_arg = 1 : i32} : (memref<8xi8>, memref<4xf32>) -> ()
    catalyst.custom_call fn("lib") (%in, %out) {backend_config = {dispatch = "h:1"}, number_original_arg = 1 : i32} : (memref<8xi8>, memref<4xf32>) -> ()
    // Without num_input_args every operand is an input.
    // CHECK: executor.call %{{.*}}("sym") (%{{.*}}) : !executor.session, (memref<8xi8>) -> ()
    executor.call %s("sym") (%in) : !executor.session, (memref<8xi8>) -> ()
    // CHECK: executor.send_binary %{{.*}}("/w/k.o") {format = 1 : i32} : !executor.session
    executor.send_binary %s("/w/k.o") {format = 1 : i32} : !executor.session
    return
  }
  // CHECK: module @dev attributes {catalyst.dispatch = {address = "127.0.0.1:7000"}, catalyst.object_file = "/w/dev.o", catalyst.target = {triple = "x86_64-unknown-linux-gnu"}}
  module @dev attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu"},
                          catalyst.dispatch = {address = "127.0.0.1:7000"},
                          catalyst.object_file = "/w/dev.o"} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      return %x : tensor<4xf64>
    }
    func.func public @serve() {
      return
    }
  }
}
