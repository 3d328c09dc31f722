// Every failing target module is reported, in the order the modules appear, although the
// first one's error (from code generation, on another thread) is found after the second's
// (from checking its CPU, before anything is lowered).
// RUN: not courier-opt %s -cross-compile-targets="workspace=%t jobs=1" 2>&1 | FileCheck %s
// RUN: not courier-opt %s -cross-compile-targets="workspace=%t jobs=4" 2>&1 | FileCheck %s

// CHECK: :[[@LINE+4]]:3: error: emitting the object for 'bpf' failed
// CHECK: :[[@LINE+12]]:3: error: unknown CPU 'nonsense'
// CHECK-NOT: : error:
module {
  module @first attributes {catalyst.target = {triple = "bpf"}} {
    func.func public @f(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
  module @fine attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
  module @second attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu", cpu = "nonsense"}} {
    func.func public @f(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}
