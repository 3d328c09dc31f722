// RUN: courier-opt %s -split-input-file -convert-executor-to-llvm -verify-diagnostics

// The conversion needs buffers.
func.func @tensor_launch(%s: !executor.session, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has tensor operands or results; run one-shot bufferize before convert-executor-to-llvm}}
  %r = executor.launch %s("k", "/w/k.o") (%x) : !executor.session, (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A declaration that disagrees with the runtime's ABI is reported, not silently reused.
// expected-error @+1 {{'__catalyst__executor__open' is declared as '!llvm.func<i32 (ptr)>' but the executor runtime defines it as '!llvm.func<i64 (ptr)>'}}
llvm.func @__catalyst__executor__open(!llvm.ptr) -> i32
func.func @f() {
  %s = executor.open("h:7000") : !executor.session
  return
}

// -----

// A library call that was not dispatched has no lowering.
func.func @local_library_call(%x: f64) -> f64 {
  // expected-error @+1 {{without a dispatch attribute (an in-process library call) is not supported; add dispatch = "local"}}
  %r = catalyst.runtime_call fn("cos") (%x) {c_params = ["f64"], c_result = "f64"} : (f64) -> f64
  return %r : f64
}

// -----

// A launch into a module that is not a target module cannot run anywhere.
module {
  func.func @main(%x: memref<4xf64>) -> memref<4xf64> {
    // expected-error @+1 {{targets module 'plain', which is not a dispatched target module; give it a catalyst.target attribute}}
    %y = catalyst.launch_kernel @plain::@f(%x) : (memref<4xf64>) -> memref<4xf64>
    return %y : memref<4xf64>
  }
  module @plain {
    func.func public @f(%x: memref<4xf64>) -> memref<4xf64> { return %x : memref<4xf64> }
  }
}

// -----

// Runtime calls need a function to live in.
// expected-error @+1 {{'executor.open' op must be inside a function of the module being converted}}
%s = executor.open("local") : !executor.session

// -----

// A dispatched call outside the host's functions was never lowered; say why.
module {
  module @lib {
    func.func @f() {
      // expected-error @+1 {{is dispatched but was not lowered: lower-runtime-dispatch handles calls in functions of the host module only}}
      catalyst.runtime_call fn("g") () {c_params = [], dispatch = "local"} : () -> ()
      return
    }
  }
}

// -----

func.func @complex_launch(%s: !executor.session, %x: memref<4xcomplex<f64>>) {
  // expected-error @+1 {{has elements of type 'complex<f64>'; executors take integers, floats and index}}
  executor.launch %s("k", "/w/k.o") (%x) : !executor.session, (memref<4xcomplex<f64>>) -> ()
  return
}
