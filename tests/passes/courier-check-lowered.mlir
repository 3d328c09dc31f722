// RUN: courier-opt %s -courier-check-lowered | FileCheck %s

// A module of the LLVM dialect only passes unchanged.
// CHECK-LABEL: llvm.func @add
// CHECK: llvm.fadd
module {
  llvm.func @add(%a: f32, %b: f32) -> f32 {
    %c = llvm.fadd %a, %b : f32
    llvm.return %c : f32
  }
}
