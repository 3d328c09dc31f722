// RUN: courier-opt %s -split-input-file -courier-decompose-linalg-ops | FileCheck %s

// A softmax becomes the maximum of each row, exp(x - max), the sum of each row and the
// quotient.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: arith.maxnumf
// CHECK: %[[EXP:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[MAX]] :
// CHECK: arith.subf
// CHECK: math.exp
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] :
// CHECK: arith.divf
// CHECK-NOT: linalg.softmax
func.func @softmax(%x: tensor<17x301xf32>) -> tensor<17x301xf32> {
  %e = tensor.empty() : tensor<17x301xf32>
  %r = linalg.softmax dimension(1) ins(%x : tensor<17x301xf32>) outs(%e : tensor<17x301xf32>) -> tensor<17x301xf32>
  return %r : tensor<17x301xf32>
}

// -----

// A pack pads to whole tiles, splits each dimension in two and brings the tiles inside.
// CHECK-LABEL: func.func @pack
// CHECK: %[[PADDED:.*]] = tensor.pad %{{.*}} low[0, 0] high[7, 7]
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[PADDED]] {{\[\[}}0, 1], [2, 3]] output_shape [3, 8, 5, 8]
// CHECK: linalg.transpose ins(%[[SPLIT]] : tensor<3x8x5x8xf32>) {{.*}} permutation = [0, 2, 1, 3]
func.func @pack(%a: tensor<17x33xf32>) -> tensor<3x5x8x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x5x8x8xf32>
  %p = linalg.pack %a padding_value(%z : f32) inner_dims_pos = [0, 1] inner_tiles = [8, 8] into %e : tensor<17x33xf32> -> tensor<3x5x8x8xf32>
  return %p : tensor<3x5x8x8xf32>
}

// -----

// An unpack is the reverse: tiles outside, dimensions joined, the padding cut off.
// CHECK-LABEL: func.func @unpack
// CHECK: linalg.transpose {{.*}} permutation = [0, 2, 1, 3]
// CHECK: tensor.collapse_shape
// CHECK: tensor.extract_slice {{.*}} [17, 33] [1, 1] : tensor<24x40xf32> to tensor<17x33xf32>
// CHECK-NOT: linalg.unpack
func.func @unpack(%a: tensor<3x5x8x8xf32>) -> tensor<17x33xf32> {
  %e = tensor.empty() : tensor<17x33xf32>
  %p = linalg.unpack %a inner_dims_pos = [0, 1] inner_tiles = [8, 8] into %e : tensor<3x5x8x8xf32> -> tensor<17x33xf32>
  return %p : tensor<17x33xf32>
}
