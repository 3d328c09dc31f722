// RUN: courier-opt %s -split-input-file -dispatch-executor-targets -verify-diagnostics

// A dispatched module must have been cross-compiled first.
module {
  // expected-error @+1 {{target module has no catalyst.object_file; run cross-compile-targets before dispatch-executor-targets}}
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "h:7000"}} {}
}

// -----

// setup() must be able to hold the set-up code.
module {
  // expected-error @+1 {{'setup' must be a defined func.func taking and returning nothing}}
  func.func @setup(%x: i32) { return }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {}
}

// -----

module {
  // expected-error @+1 {{target module needs a name}}
  module attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {}
}

// -----

// A module with only catalyst.dispatch needs something to ship.
module {
  // expected-error @+1 {{dispatched module has neither catalyst.target (to compile it) nor catalyst.object_file (a prebuilt object to ship)}}
  module @dev attributes {catalyst.dispatch = {address = "h:7000"}} {}
}

// -----

// Launches are dispatched from functions.
module {
  // expected-error @+1 {{must be inside a function to be dispatched}}
  %y = catalyst.launch_kernel @dev::@k() : () -> tensor<4xf64>
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @k() -> tensor<4xf64> {
      %c = arith.constant dense<1.0> : tensor<4xf64>
      return %c : tensor<4xf64>
    }
  }
}

// -----

// An asynchronous launch has nothing to return and nothing to wait on for its inputs.
module {
  func.func @f(%x: memref<4xf64>) {
    // expected-error @+1 {{nonblocking dispatch requires a '()->()' callee: @dev::@k takes 1 arguments and returns 0 results}}
    catalyst.launch_kernel @dev::@k(%x) {catalyst.nonblocking} : (memref<4xf64>) -> ()
    return
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @k(%x: memref<4xf64>) { return }
  }
}

// -----

// The await sits before the function returns; a launch inside a loop has no token there.
module {
  // expected-error @+1 {{async launch must be in the function's entry block: the launch of 'serve' is nested in a region}}
  func.func @f(%n: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %n step %c1 {
      catalyst.launch_kernel @dev::@serve() {catalyst.nonblocking} : () -> ()
    }
    return
  }
  module @dev attributes {catalyst.target = {}, catalyst.object_file = "/w/k.o"} {
    func.func public @serve() { return }
  }
}

// -----

module {
  func.func @f() {
    // expected-error @+1 {{ambiguous executor: its backend_config dispatch is "" but the program uses 'h:1', 'h:2'; name one}}
    catalyst.custom_call fn("log") () {backend_config = {dispatch = ""}} : () -> ()
    return
  }
  module @one attributes {catalyst.dispatch = {address = "h:1"}, catalyst.object_file = "/w/1.o"} {
    func.func public @k() { return }
  }
  module @two attributes {catalyst.dispatch = {address = "h:2"}, catalyst.object_file = "/w/2.o"} {
    func.func public @k() { return }
  }
}

// -----

module {
  func.func @f() {
    // expected-error @+1 {{custom_call dispatch has no executor address: its backend_config dispatch is "" and no nested module carries catalyst.dispatch}}
    catalyst.custom_call fn("log") () {backend_config = {dispatch = ""}} : () -> ()
    return
  }
}
