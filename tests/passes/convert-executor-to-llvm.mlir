// RUN: courier-opt %s -split-input-file -convert-executor-to-llvm | FileCheck %s

// Every op becomes a runtime call; the runtime is declared once, with Catalyst's signatures,
// and the constants carry Catalyst's names.
// CHECK-DAG: llvm.func @__catalyst__executor__open(!llvm.ptr) -> i64
// CHECK-DAG: llvm.func @__catalyst__executor__send_binary(i64, !llvm.ptr, i32) -> i64
// CHECK-DAG: llvm.func @__catalyst__executor__launch(i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr){{$}}
// CHECK-DAG: llvm.func @__catalyst__executor__launch_async(i64, !llvm.ptr, !llvm.ptr) -> i64
// CHECK-DAG: llvm.func @__catalyst__executor__await(i64){{$}}
// CHECK-DAG: llvm.func @__catalyst__executor__call_wrapper(i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-DAG: llvm.func @__catalyst__executor__free_result(!llvm.ptr)
// CHECK-DAG: llvm.func @__catalyst__executor__close(i64) -> i64
// CHECK-DAG: llvm.mlir.global internal constant @executor_addr_h_7000("h:7000\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_path_k("/w/k.o\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_sym_scale("_catalyst_pyface_scale\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_obj_scale("/w/k.o\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_in_ranks_scale(dense<2> : tensor<1xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @executor_in_sizes_scale(dense<4> : tensor<1xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @executor_out_ranks_scale(dense<2> : tensor<1xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @executor_out_sizes_scale(dense<4> : tensor<1xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @executor_sym_serve("_catalyst_pyface_serve\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_lib_sym_sym("sym\00")

// CHECK-LABEL: func @all
func.func @all(%x: memref<2x3xf32>, %in: memref<2xi64>, %out: memref<4xf32>) -> memref<?x3xf32> {
  // Every stack slot is in the entry block: the packed call inputs, the reply pointer and
  // size, the launch's two pointer arrays and two descriptors.
  // CHECK-COUNT-7: llvm.alloca
  // CHECK-NOT: llvm.alloca
  // CHECK: %[[A:.*]] = llvm.mlir.addressof @executor_addr_h_7000
  // CHECK: %[[AP:.*]] = llvm.getelementptr inbounds %[[A]][0, 0]
  // CHECK: %[[S:.*]] = llvm.call @__catalyst__executor__open(%[[AP]]) : (!llvm.ptr) -> i64
  %s = executor.open("h:7000") : !executor.session
  // The object format is Catalyst's integer tag, 0 for an object file.
  // CHECK: %[[FMT:.*]] = llvm.mlir.constant(0 : i32) : i32
  // CHECK: llvm.call @__catalyst__executor__send_binary(%[[S]], %{{.*}}, %[[FMT]]) : (i64, !llvm.ptr, i32) -> i64
  executor.send_binary %s("/w/k.o") : !executor.session
  // Result descriptors carry the marker and the static shape, -1 where dynamic.
  // CHECK: %[[MARK:.*]] = llvm.mlir.constant(4859231657211032110 : i64) : i64
  // CHECK: %[[MARKP:.*]] = llvm.inttoptr %[[MARK]] : i64 to !llvm.ptr
  // CHECK: llvm.insertvalue %[[MARKP]], %{{.*}}[1]
  // CHECK: %[[M1:.*]] = llvm.mlir.constant(-1 : i64) : i64
  // CHECK: llvm.insertvalue %[[M1]], %{{.*}}[3, 0]
  // CHECK: %[[THREE:.*]] = llvm.mlir.constant(3 : i64) : i64
  // CHECK: llvm.insertvalue %[[THREE]], %{{.*}}[3, 1]
  // CHECK: llvm.call @__catalyst__executor__launch(%[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
  // CHECK: %[[R:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (memref<2x3xf32>) -> memref<?x3xf32>
  // CHECK: %[[T:.*]] = llvm.call @__catalyst__executor__launch_async(%[[S]], %{{.*}}, %{{.*}}) : (i64, !llvm.ptr, !llvm.ptr) -> i64
  %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
  // CHECK: llvm.call @__catalyst__executor__await(%[[T]]) : (i64) -> ()
  executor.await %t : !executor.token
  // The inputs (2 x i64 = 16 bytes) are packed into a stack slot, the reply (4 x f32 = 16
  // bytes) is expected through the marked reply slot, copied out and released.
  // CHECK: "llvm.intr.memcpy"
  // CHECK: llvm.store %{{.*}}, %[[REPLY:.*]] : !llvm.ptr, !llvm.ptr
  // CHECK: llvm.store %{{.*}}, %[[SIZE:.*]] : i64, !llvm.ptr
  // CHECK: llvm.call @__catalyst__executor__call_wrapper(%[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %[[REPLY]], %[[SIZE]])
  // CHECK: %[[OUT:.*]] = llvm.load %[[REPLY]] : !llvm.ptr -> !llvm.ptr
  // CHECK: "llvm.intr.memcpy"
  // CHECK: llvm.call @__catalyst__executor__free_result(%[[OUT]])
  // CHECK-NOT: @free
  // CHECK: llvm.call @__catalyst__executor__close
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<2xi64>, memref<4xf32>) -> ()
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

// A call without inputs packs nothing: a one-byte slot, no heap.
// CHECK-LABEL: func @no_inputs
// CHECK: llvm.alloca %{{.*}} x !llvm.array<1 x i8>
// CHECK-NOT: @malloc
// CHECK: llvm.call @__catalyst__executor__call_wrapper
// CHECK-NOT: @free
// CHECK: return
func.func @no_inputs(%s: !executor.session, %out: memref<2xf32>) {
  executor.call %s("sym") (%out) {num_input_args = 0 : i32} : !executor.session, (memref<2xf32>) -> ()
  return
}

// -----

// Inputs too big for the stack are packed on the heap and freed after the call.
// CHECK-LABEL: func @big_inputs
// CHECK-NOT: llvm.alloca {{.*}} x !llvm.array<{{[0-9]+}} x i8>
// CHECK: %[[PACK:.*]] = llvm.call @malloc
// CHECK: llvm.call @__catalyst__executor__call_wrapper(%{{.*}}, %{{.*}}, %[[PACK]],
// CHECK: llvm.call @free(%[[PACK]])
func.func @big_inputs(%s: !executor.session, %in: memref<65537xi8>, %out: memref<2xf32>) {
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<65537xi8>, memref<2xf32>) -> ()
  return
}

// -----

// Two callees of one name in different objects get constants of their own.
// CHECK-DAG: llvm.mlir.global internal constant @executor_obj_k("/w/a.o\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_obj_k_1("/w/b.o\00")
// CHECK-DAG: llvm.mlir.global internal constant @executor_in_ranks_k(dense<1> : tensor<1xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @executor_in_ranks_k_1(dense<2> : tensor<1xi64>)
// CHECK-LABEL: func @same_callee
func.func @same_callee(%s: !executor.session, %x: memref<4xf32>, %y: memref<2x2xf32>) {
  %a = executor.launch %s("k", "/w/a.o") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  %b = executor.launch %s("k", "/w/b.o") (%y) : !executor.session, (memref<2x2xf32>) -> memref<2x2xf32>
  return
}

// -----

// Launches without inputs or results pass null arrays; rank-0 and multiple results get one
// descriptor slot each.
// CHECK-LABEL: func @shapes
// CHECK: %[[NULL_IN:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_OUT:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_IN_RANKS:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_IN_SIZES:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_OUT_RANKS:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[NULL_OUT_SIZES:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: llvm.call @__catalyst__executor__launch(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NULL_IN]], %[[NULL_IN_RANKS]], %[[NULL_IN_SIZES]], %{{.*}}, %[[NULL_OUT]], %[[NULL_OUT_RANKS]], %[[NULL_OUT_SIZES]])
// CHECK: llvm.call @__catalyst__executor__launch(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64)>
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
func.func @shapes(%s: !executor.session, %x: memref<f32>) -> (memref<f32>, memref<2x2xi1>) {
  executor.launch %s("noop", "/w/k.o") () : !executor.session, () -> ()
  %a, %b = executor.launch %s("pair", "/w/k.o") (%x) : !executor.session, (memref<f32>) -> (memref<f32>, memref<2x2xi1>)
  return %a, %b : memref<f32>, memref<2x2xi1>
}

// -----

// The stack slots of a function's calls stay within 64 KiB together: a call that would pass
// the budget packs on the heap.
// CHECK-LABEL: func @many_calls
// CHECK-COUNT-1: llvm.alloca %{{.*}} x !llvm.array<40000 x i8>
// CHECK-NOT: llvm.alloca %{{.*}} x !llvm.array<40000 x i8>
// CHECK: llvm.call @__catalyst__executor__call_wrapper
// CHECK: %[[PACK:.*]] = llvm.call @malloc
// CHECK: llvm.call @__catalyst__executor__call_wrapper(%{{.*}}, %{{.*}}, %[[PACK]],
// CHECK: llvm.call @free(%[[PACK]])
func.func @many_calls(%s: !executor.session, %in: memref<40000xi8>, %out: memref<2xf32>) {
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<40000xi8>, memref<2xf32>) -> ()
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<40000xi8>, memref<2xf32>) -> ()
  return
}

// -----

// Without executor ops nothing is declared.
// CHECK-LABEL: func @plain
// CHECK-NOT: __catalyst__executor__
func.func @plain() {
  return
}
