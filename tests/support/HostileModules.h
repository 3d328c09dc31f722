// A program whose entries misbehave in every way a module worker must contain, shared by the
// engine's and courier-serve's isolation tests.
#ifndef COURIER_TESTS_SUPPORT_HOSTILEMODULES_H
#define COURIER_TESTS_SUPPORT_HOSTILEMODULES_H

#include "tests/support/SharedPrograms.h"

#include <string>

namespace courier::testing {

/// `main` doubles a 4-vector on the in-process executor; `crash` loads from address 0 in host
/// code and `crashKernel` in the kernel; `at` reads element `i` of a 4-vector, however far
/// out of bounds; `spin` never returns; `spawn` forks and `killParent` signals its parent,
/// which a module worker's sandbox forbids.
inline const std::string kHostileModule = std::string(R"(
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
)") + kSpinFunction + R"(
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

/// Tries to create a file from setup() and from a SIGUSR1 handler it installs and sends to
/// every thread of its worker (from /proc/self/task), as a module escaping a file-write lock
/// that bound some threads only would. @signalsHandled and @filesCreated count what happened.
inline constexpr const char *kBreakoutModule = R"(
module @breakout {
  llvm.mlir.global internal constant @probe("/tmp/courier-breakout-probe\00") {addr_space = 0 : i32}
  llvm.mlir.global internal constant @tasks("/proc/self/task\00") {addr_space = 0 : i32}
  llvm.mlir.global internal constant @rootOnly("/tmp/courier-root-only-probe\00") {addr_space = 0 : i32}
  llvm.func @open(!llvm.ptr, i32) -> i32
  llvm.mlir.global internal @handled(0 : i32) {addr_space = 0 : i32} : i32
  llvm.mlir.global internal @created(0 : i32) {addr_space = 0 : i32} : i32
  llvm.func @creat(!llvm.ptr, i32) -> i32
  llvm.func @close(i32) -> i32
  llvm.func @signal(i32, !llvm.ptr) -> !llvm.ptr
  llvm.func @getpid() -> i32
  llvm.func @tgkill(i32, i32, i32) -> i32
  llvm.func @usleep(i32) -> i32
  llvm.func @opendir(!llvm.ptr) -> !llvm.ptr
  llvm.func @readdir(!llvm.ptr) -> !llvm.ptr
  llvm.func @closedir(!llvm.ptr) -> i32
  llvm.func @atoi(!llvm.ptr) -> i32
  llvm.func @tryCreate() {
    %path = llvm.mlir.addressof @probe : !llvm.ptr
    %mode = llvm.mlir.constant(384 : i32) : i32
    %fd = llvm.call @creat(%path, %mode) : (!llvm.ptr, i32) -> i32
    %zero = llvm.mlir.constant(0 : i32) : i32
    %ok = llvm.icmp "sge" %fd, %zero : i32
    llvm.cond_br %ok, ^made, ^done
  ^made:
    %counter = llvm.mlir.addressof @created : !llvm.ptr
    %n = llvm.load %counter : !llvm.ptr -> i32
    %one = llvm.mlir.constant(1 : i32) : i32
    %m = llvm.add %n, %one : i32
    llvm.store %m, %counter : i32, !llvm.ptr
    %closed = llvm.call @close(%fd) : (i32) -> i32
    llvm.br ^done
  ^done:
    llvm.return
  }
  llvm.func @onSignal(%signal: i32) {
    %counter = llvm.mlir.addressof @handled : !llvm.ptr
    %n = llvm.load volatile %counter : !llvm.ptr -> i32
    %one = llvm.mlir.constant(1 : i32) : i32
    %m = llvm.add %n, %one : i32
    llvm.store volatile %m, %counter : i32, !llvm.ptr
    llvm.call @tryCreate() : () -> ()
    llvm.return
  }
  func.func public @setup() {
    llvm.call @tryCreate() : () -> ()
    %usr1 = arith.constant 10 : i32
    %handler = llvm.mlir.addressof @onSignal : !llvm.ptr
    %old = llvm.call @signal(%usr1, %handler) : (i32, !llvm.ptr) -> !llvm.ptr
    %pid = llvm.call @getpid() : () -> i32
    %path = llvm.mlir.addressof @tasks : !llvm.ptr
    %dir = llvm.call @opendir(%path) : (!llvm.ptr) -> !llvm.ptr
    %null = llvm.mlir.zero : !llvm.ptr
    %last = scf.while (%unused = %null) : (!llvm.ptr) -> !llvm.ptr {
      %entry = llvm.call @readdir(%dir) : (!llvm.ptr) -> !llvm.ptr
      %more = llvm.icmp "ne" %entry, %null : !llvm.ptr
      scf.condition(%more) %entry : !llvm.ptr
    } do {
    ^bb0(%entry: !llvm.ptr):
      // d_name follows d_ino, d_off, d_reclen and d_type.
      %name = llvm.getelementptr %entry[19] : (!llvm.ptr) -> !llvm.ptr, i8
      %tid = llvm.call @atoi(%name) : (!llvm.ptr) -> i32
      %sent = llvm.call @tgkill(%pid, %tid, %usr1) : (i32, i32, i32) -> i32
      scf.yield %entry : !llvm.ptr
    }
    %closed = llvm.call @closedir(%dir) : (!llvm.ptr) -> i32
    %wait = arith.constant 200000 : i32
    %slept = llvm.call @usleep(%wait) : (i32) -> i32
    return
  }
  func.func public @signalsHandled(%n: i64) -> i32 {
    %counter = llvm.mlir.addressof @handled : !llvm.ptr
    %v = llvm.load volatile %counter : !llvm.ptr -> i32
    return %v : i32
  }
  // 1 when a file only its owner may read (mode 0600) opens for reading.
  func.func public @readsOwnersFile(%n: i64) -> i32 {
    %path = llvm.mlir.addressof @rootOnly : !llvm.ptr
    %readOnly = llvm.mlir.constant(0 : i32) : i32
    %fd = llvm.call @open(%path, %readOnly) : (!llvm.ptr, i32) -> i32
    %zero = llvm.mlir.constant(0 : i32) : i32
    %opened = llvm.icmp "sge" %fd, %zero : i32
    %closed = scf.if %opened -> i32 {
      %c = llvm.call @close(%fd) : (i32) -> i32
      scf.yield %c : i32
    } else {
      scf.yield %zero : i32
    }
    %one = arith.extui %opened : i1 to i32
    return %one : i32
  }
  func.func public @filesCreated(%n: i64) -> i32 {
    %counter = llvm.mlir.addressof @created : !llvm.ptr
    %v = llvm.load volatile %counter : !llvm.ptr -> i32
    return %v : i32
  }
}
)";

/// @spawn(n) starts n threads that pause for good and returns how many started: a thread
/// bomb. @hoard(mib) holds that many MiB (a multiple of 64) in memfds it touched through a
/// mapping and unmapped, where RLIMIT_AS no longer counts them, and returns it.
inline constexpr const char *kGreedyModule = R"(
module @greedy {
  llvm.mlir.global internal constant @name("hoard\00") {addr_space = 0 : i32}
  llvm.func @pthread_create(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
  llvm.func @pause() -> i32
  llvm.func @memfd_create(!llvm.ptr, i32) -> i32
  llvm.func @ftruncate(i32, i64) -> i32
  llvm.func @mmap(!llvm.ptr, i64, i32, i32, i32, i64) -> !llvm.ptr
  llvm.func @munmap(!llvm.ptr, i64) -> i32
  llvm.func @sleeper(%arg: !llvm.ptr) -> !llvm.ptr {
    %r = llvm.call @pause() : () -> i32
    %null = llvm.mlir.zero : !llvm.ptr
    llvm.return %null : !llvm.ptr
  }
  func.func public @spawn(%n: i64) -> i64 {
    %one = llvm.mlir.constant(1 : i64) : i64
    %id = llvm.alloca %one x i64 : (i64) -> !llvm.ptr
    %null = llvm.mlir.zero : !llvm.ptr
    %fn = llvm.mlir.addressof @sleeper : !llvm.ptr
    %zero = arith.constant 0 : i64
    %z32 = arith.constant 0 : i32
    %lo = arith.constant 0 : index
    %hi = arith.index_cast %n : i64 to index
    %step = arith.constant 1 : index
    %made = scf.for %i = %lo to %hi step %step iter_args(%count = %zero) -> (i64) {
      %rc = llvm.call @pthread_create(%id, %null, %fn, %null)
          : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
      %ok = arith.cmpi eq, %rc, %z32 : i32
      %inc = arith.extui %ok : i1 to i64
      %next = arith.addi %count, %inc : i64
      scf.yield %next : i64
    }
    return %made : i64
  }
  func.func public @hoard(%mib: i64) -> i64 {
    %name = llvm.mlir.addressof @name : !llvm.ptr
    %z32 = arith.constant 0 : i32
    %z64 = arith.constant 0 : i64
    %chunkMiB = arith.constant 64 : i64
    %chunk = arith.constant 67108864 : i64
    %null = llvm.mlir.zero : !llvm.ptr
    %readWrite = arith.constant 3 : i32
    %shared = arith.constant 1 : i32
    %page = arith.constant 4096 : i64
    %byte = arith.constant 1 : i8
    // In memfds of 64 MiB, each mapped only while it is touched.
    scf.for %held = %z64 to %mib step %chunkMiB : i64 {
      %fd = llvm.call @memfd_create(%name, %z32) : (!llvm.ptr, i32) -> i32
      %grown = llvm.call @ftruncate(%fd, %chunk) : (i32, i64) -> i32
      %p = llvm.call @mmap(%null, %chunk, %readWrite, %shared, %fd, %z64)
          : (!llvm.ptr, i64, i32, i32, i32, i64) -> !llvm.ptr
      scf.for %at = %z64 to %chunk step %page : i64 {
        %q = llvm.getelementptr %p[%at] : (!llvm.ptr, i64) -> !llvm.ptr, i8
        llvm.store volatile %byte, %q : i8, !llvm.ptr
      }
      %unmapped = llvm.call @munmap(%p, %chunk) : (!llvm.ptr, i64) -> i32
    }
    return %mib : i64
  }
}
)";

} // namespace courier::testing

#endif // COURIER_TESTS_SUPPORT_HOSTILEMODULES_H
