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
