// RUN: courier-opt %s -split-input-file -convert-executor-to-llvm | FileCheck %s

// Every op becomes a runtime call; the runtime is declared once, with the ABI's types.
// CHECK-DAG: llvm.func @__catalyst__executor__open(!llvm.ptr) -> i64
// CHECK-DAG: llvm.func @__catalyst__executor__send_binary(i64, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-DAG: llvm.func @__catalyst__executor__launch(i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-DAG: llvm.func @__catalyst__executor__launch_async(i64, !llvm.ptr, !llvm.ptr) -> i64
// CHECK-DAG: llvm.func @__catalyst__executor__await(i64) -> i32
// CHECK-DAG: llvm.func @__catalyst__executor__call_wrapper(i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-DAG: llvm.func @__catalyst__executor__free_result(!llvm.ptr)
// CHECK-DAG: llvm.func @__catalyst__executor__close(i64) -> i32
// CHECK-DAG: llvm.mlir.global internal constant @[[ADDR:.*]]("h:7000\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[PATH:.*]]("/w/k.o\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[FORMAT:.*]]("object\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[ENTRY:.*]]("_catalyst_pyface_scale\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[ASYNC:.*]]("_catalyst_pyface_serve\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[SYM:.*]]("sym\00")

// CHECK-LABEL: func @all
func.func @all(%x: memref<2x3xf32>, %in: memref<2xi64>, %out: memref<4xf32>) -> memref<?x3xf32> {
  // CHECK: %[[A:.*]] = llvm.mlir.addressof @[[ADDR]]
  // CHECK: %[[S:.*]] = llvm.call @__catalyst__executor__open(%[[A]]) : (!llvm.ptr) -> i64
  %s = executor.open("h:7000") : !executor.session
  // CHECK: llvm.call @__catalyst__executor__send_binary(%[[S]], %{{.*}}, %{{.*}})
  executor.send_binary %s("/w/k.o") : !executor.session
  // Result descriptors carry the static shape, -1 where dynamic.
  // CHECK: %[[M1:.*]] = llvm.mlir.constant(-1 : i64) : i64
  // CHECK: llvm.insertvalue %[[M1]], %{{.*}}[3, 0]
  // CHECK: %[[THREE:.*]] = llvm.mlir.constant(3 : i64) : i64
  // CHECK: llvm.insertvalue %[[THREE]], %{{.*}}[3, 1]
  // CHECK: llvm.call @__catalyst__executor__launch(%[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
  // CHECK: %[[R:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (memref<2x3xf32>) -> memref<?x3xf32>
  // CHECK: %[[T:.*]] = llvm.call @__catalyst__executor__launch_async(%[[S]], %{{.*}}, %{{.*}}) : (i64, !llvm.ptr, !llvm.ptr) -> i64
  %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
  // CHECK: llvm.call @__catalyst__executor__await(%[[T]]) : (i64) -> i32
  executor.await %t : !executor.token
  // The inputs are packed into one buffer (2 x i64 = 16 bytes), the reply (4 x f32 = 16
  // bytes) copied out and released.
  // CHECK: %[[PACK:.*]] = llvm.call @malloc
  // CHECK: "llvm.intr.memcpy"
  // CHECK: llvm.store %{{.*}}, %[[SIZE:.*]] : i64, !llvm.ptr
  // CHECK: llvm.call @__catalyst__executor__call_wrapper(%[[S]], %{{.*}}, %[[PACK]], %{{.*}}, %[[REPLY:.*]], %[[SIZE]])
  // CHECK: %[[OUT:.*]] = llvm.load %[[REPLY]] : !llvm.ptr -> !llvm.ptr
  // CHECK: "llvm.intr.memcpy"
  // CHECK: llvm.call @__catalyst__executor__free_result(%[[OUT]])
  // CHECK: llvm.call @free(%[[PACK]])
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<2xi64>, memref<4xf32>) -> ()
  // CHECK: llvm.call @__catalyst__executor__close(%[[S]]) : (i64) -> i32
  executor.close %s : !executor.session
  return %r : memref<?x3xf32>
}

// -----

// Stack slots for launches sit in the entry block, so a launch in a loop does not grow
// the stack.
// CHECK-LABEL: func @in_loop
// CHECK: llvm.alloca
// CHECK: scf.for
// CHECK-NOT: llvm.alloca
// CHECK: llvm.call @__catalyst__executor__launch
func.func @in_loop(%s: !executor.session, %x: memref<4xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %r = executor.launch %s("k", "/w/k.o") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  }
  return
}

// -----

// A call without inputs packs nothing: no allocation, a null input pointer.
// CHECK-LABEL: func @no_inputs
// CHECK-NOT: @malloc
// CHECK: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: llvm.call @__catalyst__executor__call_wrapper(%{{.*}}, %{{.*}}, %[[NULL]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: @free
func.func @no_inputs(%s: !executor.session, %out: memref<2xf32>) {
  executor.call %s("sym") (%out) {num_input_args = 0 : i32} : !executor.session, (memref<2xf32>) -> ()
  return
}

// -----

// Launches without inputs or results pass null arrays; rank-0 and multiple results get one
// descriptor slot each.
// CHECK-LABEL: func @shapes
// CHECK: %[[NULL_IN:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_OUT:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: llvm.call @__catalyst__executor__launch(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NULL_IN]], %[[NULL_IN]], %[[NULL_IN]], %{{.*}}, %[[NULL_OUT]], %[[NULL_OUT]], %[[NULL_OUT]])
// CHECK: llvm.call @__catalyst__executor__launch(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64)>
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
func.func @shapes(%s: !executor.session, %x: memref<f32>) -> (memref<f32>, memref<2x2xi1>) {
  executor.launch %s("noop", "/w/k.o") () : !executor.session, () -> ()
  %a, %b = executor.launch %s("pair", "/w/k.o") (%x) : !executor.session, (memref<f32>) -> (memref<f32>, memref<2x2xi1>)
  return %a, %b : memref<f32>, memref<2x2xi1>
}

// -----

// Without executor ops nothing is declared.
// CHECK-LABEL: func @plain
// CHECK-NOT: __catalyst__executor__
func.func @plain() {
  return
}
