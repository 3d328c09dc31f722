// RUN: courier-opt %s -split-input-file -courier-lower-tosa | FileCheck %s

// A matmul and a tanh become a batch matmul on a zero-filled accumulator and an elementwise
// generic computing math.tanh.
// CHECK-LABEL: func.func @matmul_tanh
// CHECK: %[[ZERO:.*]] = linalg.fill
// CHECK: %[[M:.*]] = linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<1x17x33xf32>, tensor<1x33x19xf32>) outs(%[[ZERO]] : tensor<1x17x19xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[M]] : tensor<1x17x19xf32>)
// CHECK: math.tanh
// CHECK-NOT: tosa.
func.func @matmul_tanh(%a: tensor<1x17x33xf32>, %b: tensor<1x33x19xf32>) -> tensor<1x17x19xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %m = tosa.matmul %a, %b, %zp, %zp : (tensor<1x17x33xf32>, tensor<1x33x19xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x17x19xf32>
  %t = tosa.tanh %m : (tensor<1x17x19xf32>) -> tensor<1x17x19xf32>
  return %t : tensor<1x17x19xf32>
}

// -----

// Broadcasting operands index their unit dimension with a constant; the reshape's shape
// operand is gone with the reshape, which becomes tensor reshapes.
// CHECK-LABEL: func.func @broadcast_reshape
// CHECK: linalg.generic {indexing_maps = [#[[ID:.*]], #[[ROW:.*]], #[[ID]]]
// CHECK: arith.addf
// CHECK: tensor.collapse_shape
// CHECK: tensor.expand_shape
// CHECK-NOT: tosa.
func.func @broadcast_reshape(%a: tensor<17x301xf32>, %b: tensor<1x301xf32>) -> tensor<301x17xf32> {
  %s = tosa.add %a, %b : (tensor<17x301xf32>, tensor<1x301xf32>) -> tensor<17x301xf32>
  %shape = tosa.const_shape {values = dense<[301, 17]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %r = tosa.reshape %s, %shape : (tensor<17x301xf32>, !tosa.shape<2>) -> tensor<301x17xf32>
  return %r : tensor<301x17xf32>
}

// -----

// A function without TOSA ops is left exactly as it is: its constant addition is not folded.
// CHECK-LABEL: func.func @no_tosa
// CHECK: %[[ONE:.*]] = arith.constant 1.0
// CHECK: arith.addf %[[ONE]], %[[ONE]]
func.func @no_tosa() -> f32 {
  %one = arith.constant 1.0 : f32
  %two = arith.addf %one, %one : f32
  return %two : f32
}

// -----

// Target modules' functions are lowered too.
// CHECK-LABEL: module @dev
// CHECK: linalg.transpose
// CHECK-NOT: tosa.
module @app {
  module @dev attributes {catalyst.target = {}} {
    func.func public @transpose(%a: tensor<17x301xf32>) -> tensor<301x17xf32> {
      %t = tosa.transpose %a {perms = array<i32: 1, 0>} : (tensor<17x301xf32>) -> tensor<301x17xf32>
      return %t : tensor<301x17xf32>
    }
  }
}
