// A program whose entries misbehave in every way a module worker must contain, shared by the
// engine's and courier-serve's isolation tests.
#ifndef COURIER_TESTS_SUPPORT_HOSTILEMODULES_H
#define COURIER_TESTS_SUPPORT_HOSTILEMODULES_H

namespace courier::testing {

/// `main` doubles a 4-vector on the in-process executor; `crash` loads from address 0 in host
/// code and `crashKernel` in the kernel; `at` reads element `i` of a 4-vector, however far
/// out of bounds; `spin` never returns; `spawn` forks and `killParent` signals its parent,
/// which a module worker's sandbox forbids.
inline constexpr const char *kHostileModule = R"(
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  func.func public @crash(%x: tensor<4xf64>) -> f64 {
    %null = llvm.mlir.zero : !llvm.ptr
    %v = llvm.load volatile %null : !llvm.ptr -> f64
    return %v : f64
  }
  func.func public @crashKernel(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@null_load(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  func.func public @at(%x: tensor<4xf64>, %i: i64) -> f64 {
    %k = arith.index_cast %i : i64 to index
    %v = tensor.extract %x[%k] : tensor<4xf64>
    return %v : f64
  }
  func.func public @spin(%n: i64) -> i64 {
    %r = scf.while (%i = %n) : (i64) -> i64 {
      %true = arith.constant true
      scf.condition(%true) %i : i64
    } do {
    ^bb0(%i: i64):
      %one = arith.constant 1 : i64
      %j = arith.addi %i, %one : i64
      scf.yield %j : i64
    }
    return %r : i64
  }
  func.func private @fork() -> i32
  func.func private @getppid() -> i32
  func.func private @kill(i32, i32) -> i32
  func.func public @spawn(%n: i64) -> i32 {
    %pid = func.call @fork() : () -> i32
    return %pid : i32
  }
  func.func public @killParent(%n: i64) -> i32 {
    %parent = func.call @getppid() : () -> i32
    %nine = arith.constant 9 : i32
    %r = func.call @kill(%parent, %nine) : (i32, i32) -> i32
    return %r : i32
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
    func.func public @null_load(%x: tensor<4xf64>) -> tensor<4xf64> {
      %null = llvm.mlir.zero : !llvm.ptr
      %v = llvm.load volatile %null : !llvm.ptr -> f64
      %s = tensor.splat %v : tensor<4xf64>
      %r = arith.addf %x, %s : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
)";

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_HOSTILEMODULES_H
