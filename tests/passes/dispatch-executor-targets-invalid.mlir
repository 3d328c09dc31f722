// RUN: courier-opt %s -split-input-file -dispatch-executor-targets -verify-diagnostics

// A dispatched module must have been cross-compiled first.
module {
  // expected-error @+1 {{target module has no catalyst.object_file; run cross-compile-targets before dispatch-executor-targets}}
  module @dev attributes {catalyst.dispatch = {address = "h:7000"}} {}
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
