// RUN: rm -rf %t
// RUN: courier-opt %s --courier-pipeline="workspace=%t" --mlir-print-ir-after=bufferization-lower-deallocations -o /dev/null 2>&1 | FileCheck %s
// RUN: courier-opt %s --courier-pipeline="workspace=%t" | FileCheck %s --check-prefix=LLVM

// Loops that carry a kernel's result into the next iteration, and a branch that yields one:
// each iteration's buffer is a fresh launch result (no copy before the launch), freed after
// its last use; what the entry returns is always its own (cloned when it might be the
// caller's).
module @app {
  // CHECK-LABEL: func.func public @for_steps
  // CHECK-SAME: (%[[X:.*]]: memref<4xf64>, %[[N:.*]]: index)
  // CHECK: %[[FALSE:.*]] = arith.constant false
  // CHECK: %[[R:.*]]:2 = scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[X]], %[[OWNED:.*]] = %[[FALSE]]) -> (memref<4xf64>, i1) {
  // CHECK-NOT: memref.copy
  // CHECK: %[[Y:.*]] = executor.launch %{{.*}}("step", "{{.*}}") (%[[ACC]]) : !executor.session, (memref<4xf64>) -> memref<4xf64>
  // CHECK: %[[BASE:[^,]*]], %{{.*}} = memref.extract_strided_metadata %[[ACC]]
  // CHECK: scf.if %[[OWNED]] {
  // CHECK-NEXT: memref.dealloc %[[BASE]]
  // CHECK: scf.yield %[[Y]], %true
  // CHECK: bufferization.clone %[[R]]#0
  // CHECK: return
  func.func public @for_steps(%x: tensor<4xf64>, %n: index) -> tensor<4xf64> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
      %y = catalyst.launch_kernel @dev::@step(%acc) : (tensor<4xf64>) -> tensor<4xf64>
      scf.yield %y : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }

  // The condition reads the carried tensor; the body launches on it and frees it.
  // CHECK-LABEL: func.func public @while_below
  // CHECK: scf.while (%[[A:.*]] = %{{.*}}, %{{.*}} = %{{.*}}, %[[AOWNED:.*]] = %false)
  // CHECK: memref.load %[[A]]
  // CHECK: scf.condition
  // CHECK: } do {
  // CHECK-NEXT: ^bb0(%[[B:.*]]: memref<4xf64>, %{{.*}}: index, %[[BOWNED:.*]]: i1):
  // CHECK: executor.launch %{{.*}}("step", "{{.*}}") (%[[B]])
  // CHECK: %[[BBASE:[^,]*]], %{{.*}} = memref.extract_strided_metadata %[[B]]
  // CHECK: scf.if %[[BOWNED]] {
  // CHECK-NEXT: memref.dealloc %[[BBASE]]
  // CHECK: return
  func.func public @while_below(%x: tensor<4xf64>, %limit: f64) -> (tensor<4xf64>, index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r:2 = scf.while (%acc = %x, %k = %c0) : (tensor<4xf64>, index) -> (tensor<4xf64>, index) {
      %e = tensor.extract %acc[%c0] : tensor<4xf64>
      %go = arith.cmpf olt, %e, %limit : f64
      scf.condition(%go) %acc, %k : tensor<4xf64>, index
    } do {
    ^bb0(%a: tensor<4xf64>, %j: index):
      %y = catalyst.launch_kernel @dev::@step(%a) : (tensor<4xf64>) -> tensor<4xf64>
      %j1 = arith.addi %j, %c1 : index
      scf.yield %y, %j1 : tensor<4xf64>, index
    }
    return %r#0, %r#1 : tensor<4xf64>, index
  }

  // The launching branch owns its result; the other yields the caller's buffer, which is
  // cloned before it is returned.
  // CHECK-LABEL: func.func public @pick
  // CHECK-SAME: (%[[PX:.*]]: memref<4xf64>, %[[FLAG:.*]]: i1)
  // CHECK: %[[P:.*]]:2 = scf.if %[[FLAG]] -> (memref<4xf64>, i1) {
  // CHECK: %[[PY:.*]] = executor.launch
  // CHECK: scf.yield %[[PY]], %true
  // CHECK: } else {
  // CHECK: scf.yield %[[PX]], %false
  // CHECK: scf.if %[[P]]#1
  // CHECK: bufferization.clone %[[P]]#0
  // CHECK: return
  func.func public @pick(%x: tensor<4xf64>, %launch: i1) -> tensor<4xf64> {
    %r = scf.if %launch -> (tensor<4xf64>) {
      %y = catalyst.launch_kernel @dev::@step(%x) : (tensor<4xf64>) -> tensor<4xf64>
      scf.yield %y : tensor<4xf64>
    } else {
      scf.yield %x : tensor<4xf64>
    }
    return %r : tensor<4xf64>
  }

  module @dev attributes {catalyst.target = {}} {
    func.func public @step(%x: tensor<4xf64>) -> tensor<4xf64> {
      %one = arith.constant dense<1.0> : tensor<4xf64>
      %y = arith.addf %x, %one : tensor<4xf64>
      return %y : tensor<4xf64>
    }
  }
}

// All the way down, each loop frees what it carried.
// LLVM-LABEL: llvm.func @for_steps
// LLVM: llvm.call @__catalyst__executor__launch(
// LLVM: llvm.call @free(
// LLVM-LABEL: llvm.func @while_below
// LLVM: llvm.call @__catalyst__executor__launch(
// LLVM: llvm.call @free(
