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

// -----

// An unknown CPU would make LLVM abort during code generation: it is refused up front.
module {
  // expected-error @+1 {{unknown CPU 'nonsense' for 'x86_64-unknown-linux-gnu'}}
  module @dev attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu", cpu = "nonsense"}} {
    func.func public @f(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }
  }
}

// -----

module {
  // expected-error @+1 {{unknown feature 'avx2' for 'x86_64-unknown-linux-gnu' (features are +name or -name, comma-separated)}}
  module @dev attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu", features = "+sse4.2,avx2"}} {
    func.func public @f(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }
  }
}

// -----

// A target whose code generator rejects the code reports it instead of exiting.
module {
  // expected-error @+1 {{emitting the object for 'bpf' failed}}
  module @dev attributes {catalyst.target = {triple = "bpf"}} {
    func.func public @f(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}

// -----

// A kernel cannot dispatch further work itself.
module {
  module @dev attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      // expected-error @+1 {{'catalyst.runtime_call' op is not supported inside a target module}}
      catalyst.runtime_call fn("g") () {c_params = [], dispatch = "local"} : () -> ()
      return %x : tensor<4xf32>
    }
  }
}

// -----

// A `pipeline` names the passes that lower the module; one that does not parse says why.
module {
  // expected-error @+1 {{'catalyst.target' pipeline 'no-such-pass' is not a pass pipeline: 'no-such-pass' does not refer to a registered pass or pass pipeline}}
  module @dev attributes {catalyst.target = {pipeline = "no-such-pass"}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}
