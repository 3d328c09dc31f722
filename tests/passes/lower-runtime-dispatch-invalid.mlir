// RUN: courier-opt %s -split-input-file -lower-runtime-dispatch -verify-diagnostics

// An empty dispatch needs exactly one executor in the program: here there is none (a
// target module without catalyst.dispatch names none).
module {
  func.func @no_executor() {
    // expected-error @+1 {{has an empty dispatch but the program has no executor: no nested module carries catalyst.dispatch}}
    catalyst.runtime_call fn("f") () {c_params = [], dispatch = ""} : () -> ()
    return
  }
  module @k attributes {catalyst.target = {}} {}
}

// -----

// Two target modules on different addresses make an empty dispatch ambiguous.
module {
  func.func @ambiguous() {
    // expected-error @+1 {{has an empty dispatch but the program's executor is ambiguous: '10.0.0.1:7000', '10.0.0.2:7000'}}
    catalyst.runtime_call fn("f") () {c_params = [], dispatch = ""} : () -> ()
    return
  }
  module @a attributes {catalyst.target = {}, catalyst.dispatch = {address = "10.0.0.1:7000"}} {}
  module @b attributes {catalyst.target = {}, catalyst.dispatch = {address = "10.0.0.2:7000"}} {}
}
