// RUN: courier-opt %s -split-input-file -one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s

// executor.call takes its destination-passing form: each result becomes a fresh buffer
// appended after the inputs, and num_input_args marks the boundary.
// CHECK-LABEL: func @call
// CHECK-SAME: (%[[S:.*]]: !executor.session, %[[IN:.*]]: memref<8xi8>) -> (memref<4xf32>, memref<1xi64>)
// CHECK: %[[O1:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// CHECK: %[[O2:.*]] = memref.alloc() {{.*}} : memref<1xi64>
// CHECK: executor.call %[[S]]("sym") (%[[IN]], %[[O1]], %[[O2]]) {num_input_args = 1 : i32} : !executor.session, (memref<8xi8>, memref<4xf32>, memref<1xi64>) -> ()
// CHECK: return %[[O1]], %[[O2]]
func.func @call(%s: !executor.session, %in: tensor<8xi8>) -> (tensor<4xf32>, tensor<1xi64>) {
  %o:2 = executor.call %s("sym") (%in) {num_input_args = 1 : i32} : !executor.session, (tensor<8xi8>) -> (tensor<4xf32>, tensor<1xi64>)
  return %o#0, %o#1 : tensor<4xf32>, tensor<1xi64>
}

// -----

// A strided view is packed into a contiguous buffer before it goes on the wire.
// CHECK-LABEL: func @call_strided_input
// CHECK: %[[V:.*]] = memref.subview
// CHECK: %[[C:.*]] = memref.alloc() {{.*}} : memref<4xi8>
// CHECK: memref.copy %[[V]], %[[C]]
// CHECK: executor.call %{{.*}}("sym") (%[[C]]) {num_input_args = 1 : i32} : !executor.session, (memref<4xi8>) -> ()
func.func @call_strided_input(%s: !executor.session, %in: tensor<8xi8>) {
  %v = tensor.extract_slice %in[0] [4] [2] : tensor<8xi8> to tensor<4xi8>
  executor.call %s("sym") (%v) {num_input_args = 1 : i32} : !executor.session, (tensor<4xi8>) -> ()
  return
}

// -----

// Kernel launches read their operands and return fresh buffers.
module {
  // CHECK-LABEL: func @launches
  // CHECK-SAME: (%[[S:.*]]: !executor.session, %[[X:.*]]: memref<2x2xf64>)
  // CHECK: %[[A:.*]] = catalyst.launch_kernel @dev::@k(%[[X]]) : (memref<2x2xf64>) -> memref<2x2xf64>
  // CHECK: %[[B:.*]] = executor.launch %[[S]]("k", "/w/k.o") (%[[A]]) : !executor.session, (memref<2x2xf64>) -> memref<2x2xf64>
  // CHECK: return %[[B]]
  func.func @launches(%s: !executor.session, %x: tensor<2x2xf64>) -> tensor<2x2xf64> {
    %a = catalyst.launch_kernel @dev::@k(%x) : (tensor<2x2xf64>) -> tensor<2x2xf64>
    %b = executor.launch %s("k", "/w/k.o") (%a) : !executor.session, (tensor<2x2xf64>) -> tensor<2x2xf64>
    return %b : tensor<2x2xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<2x2xf64>) -> tensor<2x2xf64> { return %x : tensor<2x2xf64> }
  }
}

// -----

// A strided view passed to a kernel is copied into a contiguous buffer first: kernels are
// compiled for identity layouts.
module {
  // CHECK-LABEL: func @launch_strided
  // CHECK: %[[V:.*]] = memref.subview
  // CHECK: %[[C:.*]] = memref.alloc() {{.*}} : memref<4xf64>
  // CHECK: memref.copy %[[V]], %[[C]]
  // CHECK: catalyst.launch_kernel @dev::@k(%[[C]]) : (memref<4xf64>) -> memref<4xf64>
  func.func @launch_strided(%x: tensor<8xf64>) -> tensor<4xf64> {
    %v = tensor.extract_slice %x[0] [4] [2] : tensor<8xf64> to tensor<4xf64>
    %y = catalyst.launch_kernel @dev::@k(%v) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}

// -----

// catalyst.custom_call takes the same destination-passing form, marking where its inputs end
// with number_original_arg, and keeps its backend_config.
// CHECK-LABEL: func @custom_call
// CHECK-SAME: (%[[IN:.*]]: memref<8xi8>) -> memref<4xf32>
// CHECK: %[[O:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// CHECK: catalyst.custom_call fn("lib") (%[[IN]], %[[O]]) {backend_config = {dispatch = ""}, number_original_arg = 1 : i32} : (memref<8xi8>, memref<4xf32>) -> ()
// CHECK: return %[[O]]
func.func @custom_call(%in: tensor<8xi8>) -> tensor<4xf32> {
  %o = catalyst.custom_call fn("lib") (%in) {backend_config = {dispatch = ""}} : (tensor<8xi8>) -> tensor<4xf32>
  return %o : tensor<4xf32>
}

// -----

// How a launch runs survives bufferization (dispatch-executor-targets then refuses this one:
// an asynchronous launch has no results).
module {
  // CHECK-LABEL: func @nonblocking
  // CHECK: catalyst.launch_kernel @dev::@k(%{{.*}}) {catalyst.nonblocking} : (memref<4xf64>) -> memref<4xf64>
  func.func @nonblocking(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@k(%x) {catalyst.nonblocking} : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}
