// RUN: courier-opt %s -split-input-file -verify-diagnostics -courier-check-lowered

// An op of a dialect the default lowering does not handle is named where it was written.
module {
  llvm.func @complex_abs(%re: f32, %im: f32) -> f32 {
    // expected-error-re @+1 {{'complex.create' at {{.*}}courier-check-lowered-invalid.mlir:7:10 could not be lowered to LLVM by the default pipeline}}
    %z = complex.create %re, %im : complex<f32>
    %a = complex.abs %z : complex<f32>
    llvm.return %a : f32
  }
}

// -----

// Where only casts are left, the first names the types no conversion joined.
module {
  llvm.func @cast(%x: i64) -> i64 {
    // expected-error @+1 {{'builtin.unrealized_conversion_cast' at}}
    %i = builtin.unrealized_conversion_cast %x : i64 to index
    %j = builtin.unrealized_conversion_cast %i : index to i64
    llvm.return %j : i64
  }
}
