// RUN: courier-opt %s -courier-vectorize -one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" -buffer-deallocation-pipeline -courier-parallelize-kernels | FileCheck %s
// RUN: courier-opt %s -courier-vectorize -one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" -buffer-deallocation-pipeline -courier-parallelize-kernels=enabled=false | FileCheck %s --check-prefix=OFF

// As in the default pipeline, after bufferization and deallocation (loops then carry nothing).
// The outer tile loop over a large op's independent rows becomes an scf.parallel; the loops
// inside it, and a 4-element op, stay serial; no mark is left behind.
module @dev attributes {catalyst.target = {cpu = "znver4"}} {
  // CHECK-LABEL: func.func public @matmul
  // CHECK: scf.parallel
  // CHECK-NOT: scf.parallel
  // CHECK: scf.for
  // CHECK-NOT: courier.parallel_work
  // OFF-LABEL: func.func public @matmul
  // OFF-NOT: scf.parallel
  // OFF-NOT: courier.parallel_work
  func.func public @matmul(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>, %c: tensor<512x512xf32>) -> tensor<512x512xf32> {
    %r = linalg.matmul ins(%a, %b : tensor<512x512xf32>, tensor<512x512xf32>) outs(%c : tensor<512x512xf32>) -> tensor<512x512xf32>
    return %r : tensor<512x512xf32>
  }

  // CHECK-LABEL: func.func public @small_add
  // CHECK-NOT: scf.parallel
  func.func public @small_add(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %e = tensor.empty() : tensor<4xf32>
    %r = linalg.add ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
