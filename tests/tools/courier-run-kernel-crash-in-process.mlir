// A kernel that loads from address 0, run in process: courier-run reports the signal, the
// kernel by its MLIR name and how to contain it, and dies of the signal, without LLVM's
// bug-report banner or stack dump (the fault is the program's, not the compiler's). A fault
// in host code names the entry.
// RUN: not --crash courier-run %s --arg '[1, 2, 3, 4]' --no-disk-cache 2> %t.kernel
// RUN: FileCheck %s --check-prefix=KERNEL --implicit-check-not=PLEASE --implicit-check-not='Stack dump' < %t.kernel
// RUN: not --crash courier-run %s --entry host_null_load --arg '[1, 2, 3, 4]' --no-disk-cache 2> %t.host
// RUN: FileCheck %s --check-prefix=HOST --implicit-check-not=PLEASE --implicit-check-not='Stack dump' < %t.host

// KERNEL: courier-run: kernel @dev::@null_load crashed with SIGSEGV (address 0x0) in this process; run with --isolate to contain it
// HOST: courier-run: entry 'host_null_load' crashed with SIGSEGV (address 0x0) in this process; run with --isolate to contain it
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@null_load(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  func.func public @host_null_load(%x: tensor<4xf64>) -> tensor<4xf64> {
    %null = llvm.mlir.zero : !llvm.ptr
    %v = llvm.load volatile %null : !llvm.ptr -> f64
    %s = tensor.splat %v : tensor<4xf64>
    %r = arith.addf %x, %s : tensor<4xf64>
    return %r : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @null_load(%x: tensor<4xf64>) -> tensor<4xf64> {
      %null = llvm.mlir.zero : !llvm.ptr
      %v = llvm.load volatile %null : !llvm.ptr -> f64
      %s = tensor.splat %v : tensor<4xf64>
      %r = arith.addf %x, %s : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
