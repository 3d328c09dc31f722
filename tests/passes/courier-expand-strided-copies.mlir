// RUN: courier-opt %s -courier-expand-strided-copies | FileCheck %s

// A copy from a strided view becomes linalg.copy; a contiguous copy stays.
// CHECK-LABEL: func @copies
// CHECK-SAME: (%[[V:.*]]: memref<4xf64, strided<[4], offset: 1>>, %[[A:.*]]: memref<4xf64>, %[[B:.*]]: memref<4xf64>)
// CHECK: linalg.copy ins(%[[V]] : memref<4xf64, strided<[4], offset: 1>>) outs(%[[A]] : memref<4xf64>)
// CHECK: memref.copy %[[A]], %[[B]] : memref<4xf64> to memref<4xf64>
func.func @copies(%view: memref<4xf64, strided<[4], offset: 1>>, %a: memref<4xf64>, %b: memref<4xf64>) {
  memref.copy %view, %a : memref<4xf64, strided<[4], offset: 1>> to memref<4xf64>
  memref.copy %a, %b : memref<4xf64> to memref<4xf64>
  return
}
