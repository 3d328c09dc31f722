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

/// Ways round a sandbox, each of which a module worker must stop: `signalOwner` makes a pipe
/// signal `target` with SIGKILL when written (F_SETOWN, F_SETSIG, O_ASYNC); `keepAlive`
/// clears the worker's parent-death signal; `openParentMemory` opens /proc/<parent>/mem for
/// writing and returns the descriptor; `shrinkInputs` truncates every descriptor it has
/// (the input arena among them) and returns how many it shrank; `createFile` creates
/// /tmp/courier-module-write-probe and returns the descriptor.
inline constexpr const char *kEscapeModule = R"(
module @escape {
  llvm.mlir.global internal constant @fmt("/proc/%d/mem\00") {addr_space = 0 : i32}
  llvm.mlir.global internal constant @probe("/tmp/courier-module-write-probe\00") {addr_space = 0 : i32}
  func.func private @pipe(!llvm.ptr) -> i32
  func.func private @fcntl(i32, i32, i32) -> i32
  func.func private @write(i32, !llvm.ptr, i64) -> i64
  func.func private @prctl(i32, i64, i64, i64, i64) -> i32
  func.func private @getppid() -> i32
  func.func private @snprintf(!llvm.ptr, i64, !llvm.ptr, i32) -> i32
  func.func private @open(!llvm.ptr, i32) -> i32
  func.func private @ftruncate(i32, i64) -> i32
  func.func public @signalOwner(%target: i32) -> i32 {
    %two = llvm.mlir.constant(2 : i64) : i64
    %fds = llvm.alloca %two x i32 : (i64) -> !llvm.ptr
    %r0 = func.call @pipe(%fds) : (!llvm.ptr) -> i32
    %rd = llvm.load %fds : !llvm.ptr -> i32
    %p1 = llvm.getelementptr %fds[1] : (!llvm.ptr) -> !llvm.ptr, i32
    %wr = llvm.load %p1 : !llvm.ptr -> i32
    %setown = arith.constant 8 : i32
    %setsig = arith.constant 10 : i32
    %setfl = arith.constant 4 : i32
    %async = arith.constant 8192 : i32
    %kill = arith.constant 9 : i32
    %a = func.call @fcntl(%rd, %setown, %target) : (i32, i32, i32) -> i32
    %b = func.call @fcntl(%rd, %setsig, %kill) : (i32, i32, i32) -> i32
    %c = func.call @fcntl(%rd, %setfl, %async) : (i32, i32, i32) -> i32
    %one = arith.constant 1 : i64
    %w = func.call @write(%wr, %fds, %one) : (i32, !llvm.ptr, i64) -> i64
    return %c : i32
  }
  func.func public @keepAlive(%n: i64) -> i32 {
    %option = arith.constant 1 : i32
    %z = arith.constant 0 : i64
    %rc = func.call @prctl(%option, %z, %z, %z, %z) : (i32, i64, i64, i64, i64) -> i32
    return %rc : i32
  }
  func.func public @openParentMemory(%n: i64) -> i32 {
    %size = llvm.mlir.constant(64 : i64) : i64
    %buffer = llvm.alloca %size x i8 : (i64) -> !llvm.ptr
    %format = llvm.mlir.addressof @fmt : !llvm.ptr
    %parent = func.call @getppid() : () -> i32
    %written = func.call @snprintf(%buffer, %size, %format, %parent)
        : (!llvm.ptr, i64, !llvm.ptr, i32) -> i32
    %readWrite = arith.constant 2 : i32
    %fd = func.call @open(%buffer, %readWrite) : (!llvm.ptr, i32) -> i32
    return %fd : i32
  }
  func.func private @creat(!llvm.ptr, i32) -> i32
  func.func public @createFile(%n: i64) -> i32 {
    %path = llvm.mlir.addressof @probe : !llvm.ptr
    %mode = arith.constant 384 : i32
    %fd = func.call @creat(%path, %mode) : (!llvm.ptr, i32) -> i32
    return %fd : i32
  }
  func.func public @shrinkInputs(%x: tensor<8192xf64>) -> i32 {
    %lo = arith.constant 4 : index
    %hi = arith.constant 64 : index
    %step = arith.constant 1 : index
    %zero = arith.constant 0 : i32
    %z64 = arith.constant 0 : i64
    %n = scf.for %i = %lo to %hi step %step iter_args(%count = %zero) -> (i32) {
      %fd = arith.index_cast %i : index to i32
      %r = func.call @ftruncate(%fd, %z64) : (i32, i64) -> i32
      %ok = arith.cmpi eq, %r, %zero : i32
      %inc = arith.extui %ok : i1 to i32
      %next = arith.addi %count, %inc : i32
      scf.yield %next : i32
    }
    return %n : i32
  }
}
)";

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_HOSTILEMODULES_H
