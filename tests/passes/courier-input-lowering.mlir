// RUN: courier-opt %s -courier-input-lowering | FileCheck %s

// Stage 1 of the default lowering: TOSA and a softmax in the same function become linalg
// on tensors, which the vectorizer tiles next; nothing of either is left.
// CHECK-LABEL: func.func @matmul_softmax
// CHECK: linalg.batch_matmul
// CHECK: arith.maxnumf
// CHECK: math.exp
// CHECK: arith.divf
// CHECK-NOT: tosa.
// CHECK-NOT: linalg.softmax
func.func @matmul_softmax(%a: tensor<1x17x33xf32>, %b: tensor<1x33x19xf32>) -> tensor<1x17x19xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %m = tosa.matmul %a, %b, %zp, %zp : (tensor<1x17x33xf32>, tensor<1x33x19xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x17x19xf32>
  %e = tensor.empty() : tensor<1x17x19xf32>
  %s = linalg.softmax dimension(2) ins(%m : tensor<1x17x19xf32>) outs(%e : tensor<1x17x19xf32>) -> tensor<1x17x19xf32>
  return %s : tensor<1x17x19xf32>
}
