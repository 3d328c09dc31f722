// RUN: courier-opt %s -split-input-file -cross-compile-targets=workspace=%t -verify-diagnostics

// An unknown triple is a diagnostic, not a crash.
module {
  // expected-error @+1 {{unknown target triple 'bogus-vendor-os'}}
  module @dev attributes {catalyst.target = {triple = "bogus-vendor-os"}} {
    func.func public @f(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }
  }
}

// -----

// Kernel entries pass descriptors only.
module {
  module @dev attributes {catalyst.target = {}} {
    // expected-error @+1 {{kernel 'f' takes or returns 'f32'; kernel arguments and results must be ranked tensors or memrefs}}
    func.func public @f(%x: f32) -> tensor<4xf32> {
      %t = tensor.splat %x : tensor<4xf32>
      return %t : tensor<4xf32>
    }
  }
}

// -----

// A target needs something to launch.
module {
  // expected-error @+1 {{target module has no public function to launch}}
  module @dev attributes {catalyst.target = {}} {
    func.func private @f() { return }
  }
}
