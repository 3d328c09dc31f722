// RUN: courier-opt %s -split-input-file -dispatch-executor-targets | FileCheck %s

// Two modules share one address and a third has its own: setup() gets one open per
// address and one send_binary per module; launches become executor.launch; the modules go.
// CHECK-LABEL: module @app
module @app {
  // CHECK-LABEL: func.func public @main
  // CHECK-SAME: (%[[X:.*]]: memref<4xf64>)
  // CHECK-DAG: %[[S1:.*]] = executor.open("h1:7000") : !executor.session
  // CHECK-DAG: %[[S2:.*]] = executor.open("h2:7000") : !executor.session
  // CHECK: %[[A:.*]] = executor.launch %[[S1]]("scale", "/w/a.o") (%[[X]]) : !executor.session, (memref<4xf64>) -> memref<4xf64>
  // CHECK: %[[B:.*]] = executor.launch %[[S1]]("shift", "/w/b.o") (%[[A]]) : !executor.session, (memref<4xf64>) -> memref<4xf64>
  // CHECK: %[[C:.*]] = executor.launch %[[S2]]("scale", "/w/c.o") (%[[B]]) : !executor.session, (memref<4xf64>) -> memref<4xf64>
  // CHECK: return %[[C]]
  func.func public @main(%x: memref<4xf64>) -> memref<4xf64> {
    %a = catalyst.launch_kernel @a::@scale(%x) : (memref<4xf64>) -> memref<4xf64>
    %b = catalyst.launch_kernel @b::@shift(%a) : (memref<4xf64>) -> memref<4xf64>
    %c = catalyst.launch_kernel @c::@scale(%b) : (memref<4xf64>) -> memref<4xf64>
    return %c : memref<4xf64>
  }
  // CHECK-NOT: module @a
  module @a attributes {catalyst.target = {}, catalyst.dispatch = {address = "h1:7000"}, catalyst.object_file = "/w/a.o"} {
    func.func public @scale(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
  module @b attributes {catalyst.target = {}, catalyst.dispatch = {address = "h1:7000"}, catalyst.object_file = "/w/b.o"} {
    func.func public @shift(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
  module @c attributes {catalyst.target = {}, catalyst.dispatch = {address = "h2:7000"}, catalyst.object_file = "/w/c.o"} {
    func.func public @scale(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
  // CHECK-LABEL: func @setup()
  // CHECK-NEXT: %[[T1:.*]] = executor.open("h1:7000") : !executor.session
  // CHECK-NEXT: %[[T2:.*]] = executor.open("h2:7000") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[T1]]("/w/a.o") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[T1]]("/w/b.o") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[T2]]("/w/c.o") : !executor.session
  // CHECK-NEXT: return
}

// -----

// An existing setup() keeps its code, after the injected set-up; tensor launches are
// rewritten too; a target without catalyst.dispatch runs on "local".
// CHECK-LABEL: module @existing_setup
module @existing_setup {
  // CHECK-LABEL: func @setup()
  // CHECK-NEXT: %[[S:.*]] = executor.open("local") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[S]]("/w/k.o") : !executor.session
  // CHECK-NEXT: call @user_init() : () -> ()
  func.func @setup() {
    func.call @user_init() : () -> ()
    return
  }
  func.func private @user_init()
  // CHECK-LABEL: func @run
  // CHECK: executor.launch %{{.*}}("k", "/w/k.o") (%{{.*}}) : !executor.session, (tensor<2x2xi32>) -> tensor<2x2xi32>
  func.func @run(%x: tensor<2x2xi32>) -> tensor<2x2xi32> {
    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<2x2xi32>) -> tensor<2x2xi32>
    return %y : tensor<2x2xi32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @k(%x: tensor<2x2xi32>) -> tensor<2x2xi32> { return %x : tensor<2x2xi32> }
  }
}

// -----

// Without dispatched modules the pass is a no-op: no setup() appears.
// CHECK-LABEL: module @nothing_to_dispatch
// CHECK-NOT: setup
// CHECK: module @plain
module @nothing_to_dispatch {
  func.func @f() { return }
  module @plain {}
}

// -----

// Session teardown is the runtime's: no executor.close is emitted.
// CHECK-LABEL: module @no_close
// CHECK-NOT: executor.close
module @no_close {
  func.func @f(%x: memref<4xf64>) -> memref<4xf64> {
    %y = catalyst.launch_kernel @dev::@k(%x) : (memref<4xf64>) -> memref<4xf64>
    return %y : memref<4xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @k(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
}
