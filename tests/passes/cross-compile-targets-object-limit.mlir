// RUN: rm -rf %t
// RUN: courier-opt %s -cross-compile-targets="workspace=%t max-object-bytes=1" -verify-diagnostics
// The refused object is not written: the workspace is not even created.
// RUN: test ! -e %t

// An object over max-object-bytes is a diagnostic at the target module that produced it.
module {
  // expected-error-re @+1 {{'builtin.module' @dev compiled to an object of {{[0-9]+}} bytes, more than the limit of 1 (max-object-bytes)}}
  module @dev attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }
  }
}
