// RUN: courier-opt %s -split-input-file -courier-approximate-math | FileCheck %s

// f32 exp on a vector becomes arithmetic on that vector, its FMAs and floors LLVM's.
// CHECK-LABEL: func.func @exp_vector
// CHECK-NOT: math.exp
// CHECK: llvm.intr.floor({{.*}}) : (vector<16xf32>) -> vector<16xf32>
// CHECK: llvm.intr.fma({{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
func.func @exp_vector(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.exp %x : vector<16xf32>
  return %y : vector<16xf32>
}

// -----

// A 2-D vector's intrinsics take the 1-D vector of its elements.
// CHECK-LABEL: func.func @tanh_2d
// CHECK-NOT: math.tanh
// CHECK: vector.shape_cast {{.*}} : vector<1x64xf32> to vector<64xf32>
// CHECK: llvm.intr.fma
func.func @tanh_2d(%x: vector<1x64xf32>) -> vector<1x64xf32> {
  %y = math.tanh %x : vector<1x64xf32>
  return %y : vector<1x64xf32>
}

// -----

// f64 and the functions without an accurate approximation stay for libm.
// CHECK-LABEL: func.func @libm
// CHECK: math.exp %{{.*}} : vector<4xf64>
// CHECK: math.sin %{{.*}} : vector<4xf32>
func.func @libm(%x: vector<4xf64>, %y: vector<4xf32>) -> (vector<4xf64>, vector<4xf32>) {
  %a = math.exp %x : vector<4xf64>
  %b = math.sin %y : vector<4xf32>
  return %a, %b : vector<4xf64>, vector<4xf32>
}

// -----

// bf16 is computed in f32 and rounded back.
// CHECK-LABEL: func.func @sin_bf16
// CHECK: %[[WIDE:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK: %[[SIN:.*]] = math.sin %[[WIDE]] : f32
// CHECK: arith.truncf %[[SIN]] : f32 to bf16
func.func @sin_bf16(%x: bf16) -> bf16 {
  %y = math.sin %x : bf16
  return %y : bf16
}
