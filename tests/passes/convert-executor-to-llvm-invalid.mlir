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
