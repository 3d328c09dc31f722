// RUN: courier-opt %s -split-input-file -courier-lower-math | FileCheck %s

// A function libm has becomes a call of it, declared once.
// CHECK-LABEL: func.func @sin_f32
// CHECK: call @sinf(%{{.*}}) : (f32) -> f32
func.func @sin_f32(%x: f32) -> f32 {
  %y = math.sin %x : f32
  return %y : f32
}

// -----

// rsqrt, which libm lacks, is one over the square root.
// CHECK-LABEL: func.func @rsqrt_f32
// CHECK-NOT: rsqrtf
// CHECK: %[[S:.*]] = call @sqrtf(%{{.*}}) : (f32) -> f32
// CHECK: arith.divf %{{.*}}, %[[S]] : f32
func.func @rsqrt_f32(%x: f32) -> f32 {
  %y = math.rsqrt %x : f32
  return %y : f32
}

// -----

// isinf and isnormal compare the magnitude.
// CHECK-LABEL: func.func @classify
// CHECK: %[[A:.*]] = llvm.intr.fabs(%{{.*}}) : (vector<4xf32>) -> vector<4xf32>
// CHECK: arith.cmpf oeq, %[[A]], %{{.*}} : vector<4xf32>
// CHECK: arith.cmpf oge
// CHECK: arith.cmpf olt
// CHECK: arith.andi
// CHECK-NOT: math.
func.func @classify(%x: vector<4xf32>) -> (vector<4xi1>, vector<4xi1>) {
  %i = math.isinf %x : vector<4xf32>
  %n = math.isnormal %x : vector<4xf32>
  return %i, %n : vector<4xi1>, vector<4xi1>
}

// -----

// What libm has no function for and convert-math-to-llvm takes is left alone, not refused.
// CHECK-LABEL: func.func @left_for_llvm
// CHECK: math.ctpop
// CHECK: math.isnan
func.func @left_for_llvm(%x: i32, %f: f64) -> (i32, i1) {
  %c = math.ctpop %x : i32
  %n = math.isnan %f : f64
  return %c, %n : i32, i1
}
