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

// -----

// Each launching function opens its session and ships the objects it launches at its top,
// once however often it launches them; setup() ships them too, and the second ship is a
// lookup at run time.
// CHECK-LABEL: module @ship_at_entry
module @ship_at_entry {
  // CHECK-LABEL: func.func @step
  // CHECK-NEXT: %[[S:.*]] = executor.open("127.0.0.1:7000") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[S]]("/w/a.o") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[S]]("/w/b.o") : !executor.session
  // CHECK-NOT: executor.send_binary
  // CHECK: scf.for
  // CHECK: executor.launch %[[S]]("f", "/w/a.o")
  // CHECK: executor.launch %[[S]]("g", "/w/b.o")
  // CHECK: executor.launch %[[S]]("f", "/w/a.o")
  func.func @step(%x: memref<4xf64>, %n: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %n step %c1 {
      %a = catalyst.launch_kernel @a::@f(%x) : (memref<4xf64>) -> memref<4xf64>
      %b = catalyst.launch_kernel @b::@g(%a) : (memref<4xf64>) -> memref<4xf64>
      %c = catalyst.launch_kernel @a::@f(%b) : (memref<4xf64>) -> memref<4xf64>
    }
    return
  }
  // CHECK-LABEL: func.func @setup
  // CHECK: executor.send_binary %{{.*}}("/w/a.o")
  // CHECK: executor.send_binary %{{.*}}("/w/b.o")
  module @a attributes {catalyst.dispatch = {address = "127.0.0.1:7000"}, catalyst.object_file = "/w/a.o"} {
    func.func public @f(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
  module @b attributes {catalyst.dispatch = {address = "127.0.0.1:7000"}, catalyst.object_file = "/w/b.o"} {
    func.func public @g(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
}

// -----

// A nonblocking launch starts without waiting and yields a token; the function awaits every
// token just before it returns, in launch order, after its other work.
// CHECK-LABEL: module @async
module @async {
  // CHECK-LABEL: func.func @run
  // CHECK: %[[S:.*]] = executor.open("local")
  // CHECK: %[[T1:.*]] = executor.launch_async %[[S]]("listen", "/w/k.o") : !executor.session -> !executor.token
  // CHECK: %[[T2:.*]] = executor.launch_async %[[S]]("log", "/w/k.o") : !executor.session -> !executor.token
  // CHECK: %[[Y:.*]] = executor.launch %[[S]]("work", "/w/k.o") (%{{.*}})
  // CHECK-NEXT: executor.await %[[T1]] : !executor.token
  // CHECK-NEXT: executor.await %[[T2]] : !executor.token
  // CHECK-NEXT: return %[[Y]]
  func.func @run(%x: memref<2xi32>) -> memref<2xi32> {
    catalyst.launch_kernel @dev::@listen() {catalyst.nonblocking} : () -> ()
    catalyst.launch_kernel @dev::@log() {catalyst.nonblocking} : () -> ()
    %y = catalyst.launch_kernel @dev::@work(%x) : (memref<2xi32>) -> memref<2xi32>
    return %y : memref<2xi32>
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @listen() { return }
    func.func public @log() { return }
    func.func public @work(%x: memref<2xi32>) -> memref<2xi32> { return %x : memref<2xi32> }
  }
}

// -----

// With a bring-up function in the program only it ships; other functions launch on the
// objects it (and setup()) shipped.
// CHECK-LABEL: module @bringup
module @bringup {
  // CHECK-LABEL: func.func @compute
  // CHECK-NEXT: %[[S:.*]] = executor.open("10.0.0.1:7000")
  // CHECK-NEXT: executor.launch %[[S]]("k", "/w/k.o") () : !executor.session, () -> ()
  func.func @compute() {
    catalyst.launch_kernel @dev::@k() : () -> ()
    return
  }
  // CHECK-LABEL: func.func @start
  // CHECK-DAG: %[[C:.*]] = executor.open("10.0.0.2:7000")
  // CHECK-DAG: %[[D:.*]] = executor.open("10.0.0.1:7000")
  // CHECK-DAG: executor.send_binary %[[C]]("/w/co.o")
  // CHECK-DAG: executor.send_binary %[[D]]("/w/k.o")
  // CHECK: %[[T:.*]] = executor.launch_async %[[C]]("serve", "/w/co.o")
  // CHECK: executor.launch %[[D]]("connect", "/w/k.o") ()
  // CHECK: executor.await %[[T]]
  func.func @start() attributes {catalyst.backline_bringup} {
    catalyst.launch_kernel @co::@serve() {catalyst.nonblocking} : () -> ()
    catalyst.launch_kernel @dev::@connect() : () -> ()
    return
  }
  module @dev attributes {catalyst.dispatch = {address = "10.0.0.1:7000"}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() { return }
    func.func public @connect() { return }
  }
  module @co attributes {catalyst.dispatch = {address = "10.0.0.2:7000"}, catalyst.object_file = "/w/co.o"} {
    func.func public @serve() { return }
  }
}

// -----

// A dispatched custom_call becomes executor.call on its executor: a named one, or with
// dispatch = "" the program's single executor. Buffers and tensors alike.
// CHECK-LABEL: module @library_calls
module @library_calls {
  // CHECK-LABEL: func.func @named
  // CHECK: %[[S:.*]] = executor.open("10.0.0.9:7000")
  // CHECK: executor.call %[[S]]("norm") (%{{.*}}, %{{.*}}) {num_input_args = 1 : i32} : !executor.session, (memref<8xf32>, memref<1xf32>) -> ()
  func.func @named(%x: memref<8xf32>, %out: memref<1xf32>) {
    catalyst.custom_call fn("norm") (%x, %out) {backend_config = {dispatch = "10.0.0.9:7000"}, number_original_arg = 1 : i32} : (memref<8xf32>, memref<1xf32>) -> ()
    return
  }
  // CHECK-LABEL: func.func @inherited
  // CHECK: %[[S:.*]] = executor.open("10.0.0.1:7000")
  // CHECK: %[[Y:.*]] = executor.call %[[S]]("norm") (%{{.*}}) : !executor.session, (tensor<8xf32>) -> tensor<1xf32>
  // CHECK: return %[[Y]]
  func.func @inherited(%x: tensor<8xf32>) -> tensor<1xf32> {
    %y = catalyst.custom_call fn("norm") (%x) {backend_config = {dispatch = ""}} : (tensor<8xf32>) -> tensor<1xf32>
    return %y : tensor<1xf32>
  }
  // A custom_call without dispatch is left for another lowering.
  // CHECK-LABEL: func.func @host_side
  // CHECK: catalyst.custom_call fn("lapack_dgesdd")
  func.func @host_side(%x: memref<8xf32>) {
    catalyst.custom_call fn("lapack_dgesdd") (%x) : (memref<8xf32>) -> ()
    return
  }
  module @dev attributes {catalyst.dispatch = {address = "10.0.0.1:7000"}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() { return }
  }
}

// -----

// Library calls alone, with no module to ship, still get their session and no setup().
// CHECK-LABEL: module @calls_only
// CHECK: executor.open("10.0.0.9:7000")
// CHECK: executor.call
// CHECK-NOT: func.func @setup
module @calls_only {
  func.func @f(%x: memref<8xi8>) {
    catalyst.custom_call fn("log") (%x) {backend_config = {dispatch = "10.0.0.9:7000"}, number_original_arg = 1 : i32} : (memref<8xi8>) -> ()
    return
  }
}

// -----

// A function with several blocks awaits before each of its returns, not before the entry
// block's branch: the launch stays asynchronous across the function's control flow.
// CHECK-LABEL: module @branches
module @branches {
  // CHECK-LABEL: func.func @f
  // CHECK: %[[T:.*]] = executor.launch_async
  // CHECK-NEXT: cf.cond_br
  // CHECK: ^bb1:
  // CHECK-NEXT: executor.launch
  // CHECK-NEXT: executor.await %[[T]]
  // CHECK-NEXT: return
  // CHECK: ^bb2:
  // CHECK-NEXT: executor.await %[[T]]
  // CHECK-NEXT: return
  func.func @f(%c: i1) {
    catalyst.launch_kernel @dev::@serve() {catalyst.nonblocking} : () -> ()
    cf.cond_br %c, ^bb1, ^bb2
  ^bb1:
    catalyst.launch_kernel @dev::@connect() : () -> ()
    return
  ^bb2:
    return
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @serve() { return }
    func.func public @connect() { return }
  }
}

// -----

// Asynchronous launches written as executor ops are their writer's to await: the pass
// adds no second await.
// CHECK-LABEL: module @written_async
// CHECK-COUNT-1: executor.await
// CHECK-NOT: executor.await
module @written_async {
  func.func @f(%s: !executor.session) {
    %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
    executor.await %t : !executor.token
    catalyst.launch_kernel @dev::@k() : () -> ()
    return
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() { return }
  }
}

// -----

// One object shipped to two executors is shipped over each session.
// CHECK-LABEL: module @one_object_two_executors
// CHECK-LABEL: func.func @f
// CHECK-DAG: %[[A:.*]] = executor.open("h:1")
// CHECK-DAG: %[[B:.*]] = executor.open("h:2")
// CHECK-DAG: executor.send_binary %[[A]]("/w/k.o")
// CHECK-DAG: executor.send_binary %[[B]]("/w/k.o")
module @one_object_two_executors {
  func.func @f() {
    catalyst.launch_kernel @a::@k() : () -> ()
    catalyst.launch_kernel @b::@k() : () -> ()
    return
  }
  module @a attributes {catalyst.dispatch = {address = "h:1"}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() { return }
  }
  module @b attributes {catalyst.dispatch = {address = "h:2"}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() { return }
  }
}
