// RUN: courier-opt %s -split-input-file -lower-runtime-dispatch | FileCheck %s

// Scalars and pointers become one-element tensors of their declared width, strings
// 256-byte NUL-padded constants; the declared result comes first, then the out buffers.
// CHECK-LABEL: func @marshal
// CHECK-SAME: (%[[F:.*]]: f64, %[[P:.*]]: i64, %[[I:.*]]: index, %[[N:.*]]: i32)
func.func @marshal(%f: f64, %p: i64, %i: index, %n: i32) -> (f64, tensor<4xf32>) {
  // CHECK: %[[S:.*]] = executor.open("127.0.0.1:7000") : !executor.session
  // CHECK: %[[T0:.*]] = tensor.from_elements %[[F]] : tensor<1xf64>
  // CHECK: %[[STR:.*]] = arith.constant dense<"0x6C32000000{{0+}}"> : tensor<256xi8>
  // CHECK: %[[T1:.*]] = tensor.from_elements %[[P]] : tensor<1xi64>
  // CHECK: %[[IC:.*]] = arith.index_cast %[[I]] : index to i64
  // CHECK: %[[T2:.*]] = tensor.from_elements %[[IC]] : tensor<1xi64>
  // CHECK: %[[T3:.*]] = tensor.from_elements %[[N]] : tensor<1xi32>
  // CHECK: %[[R:.*]]:2 = executor.call %[[S]]("norm") (%[[T0]], %[[STR]], %[[T1]], %[[T2]], %[[T3]]) {num_input_args = 5 : i32} : !executor.session, (tensor<1xf64>, tensor<256xi8>, tensor<1xi64>, tensor<1xi64>, tensor<1xi32>) -> (tensor<1xf64>, tensor<4xf32>)
  // CHECK: %[[X:.*]] = tensor.extract %[[R]]#0[%{{.*}}] : tensor<1xf64>
  // CHECK: return %[[X]], %[[R]]#1
  %r, %o = catalyst.runtime_call fn("norm") (%f, %p, %i, %n) {c_params = ["f64", "str", "ptr", "ptr", "i32"], c_result = "f64", c_strings = ["l2"], dispatch = "127.0.0.1:7000"} : (f64, i64, index, i32) -> (f64) outs(tensor<4xf32>)
  return %r, %o : f64, tensor<4xf32>
}

// -----

// An empty dispatch binds to the program's single executor; calls in one function share
// one open; a call without dispatch is left alone.
module {
  // CHECK-LABEL: func @single_executor
  func.func @single_executor(%x: i8) {
    // CHECK: %[[S:.*]] = executor.open("10.0.0.1:7000")
    // CHECK-NOT: executor.open
    // CHECK: executor.call %[[S]]("log") (%{{.*}}) {num_input_args = 1 : i32} : !executor.session, (tensor<1xi8>) -> ()
    catalyst.runtime_call fn("log") (%x) {c_params = ["i8"], dispatch = ""} : (i8) -> ()
    // CHECK: executor.call %[[S]]("flush") () {num_input_args = 0 : i32} : !executor.session, () -> ()
    catalyst.runtime_call fn("flush") () {c_params = [], dispatch = "10.0.0.1:7000"} : () -> ()
    // CHECK: catalyst.runtime_call fn("here")
    catalyst.runtime_call fn("here") () {c_params = []} : () -> ()
    return
  }
  // Two modules on the same address are one executor.
  module @a attributes {catalyst.target = {}, catalyst.dispatch = {address = "10.0.0.1:7000"}} {}
  module @b attributes {catalyst.target = {}, catalyst.dispatch = {address = "10.0.0.1:7000"}} {}
}

// -----

// A dispatch address of "local" is the in-process executor.
module {
  // CHECK-LABEL: func @local_default
  func.func @local_default() -> i32 {
    // CHECK: executor.open("local")
    // CHECK: executor.call %{{.*}}("answer") () {num_input_args = 0 : i32} : !executor.session, () -> tensor<1xi32>
    %r = catalyst.runtime_call fn("answer") () {c_params = [], c_result = "i32", dispatch = ""} : () -> (i32)
    return %r : i32
  }
  module @k attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {}
  // A target module without catalyst.dispatch names no executor and does not count.
  module @other attributes {catalyst.target = {}} {}
}

// -----

// Without dispatched calls the pass changes nothing.
// CHECK-LABEL: func @untouched
// CHECK-NEXT: catalyst.runtime_call fn("f") () {c_params = []} : () -> ()
// CHECK-NEXT: return
func.func @untouched() {
  catalyst.runtime_call fn("f") () {c_params = []} : () -> ()
  return
}
