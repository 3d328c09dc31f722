// An object records the CPU features its code needs beyond the generic CPU of its triple
// (abi/KernelABI.h): one note in an unallocated section, sorted LLVM names. An object for the
// generic CPU needs nothing and has no record.
// RUN: rm -rf %t && split-file %s %t
// RUN: courier-opt %t/amx.mlir -cross-compile-targets=workspace=%t/amx > /dev/null
// RUN: llvm-readelf -S %t/amx/*.o | FileCheck %s --check-prefix=SECTION
// RUN: llvm-objcopy --dump-section .note.courier.features=%t/amx.note %t/amx/*.o %t/amx.copy
// RUN: tail -c +21 %t/amx.note | tr -d '\000' | FileCheck %s --check-prefix=AMX
// RUN: courier-opt %t/generic.mlir -cross-compile-targets=workspace=%t/generic > /dev/null
// RUN: llvm-readelf -S %t/generic/*.o | FileCheck %s --check-prefix=GENERIC
// RUN: courier-opt %t/arm.mlir -cross-compile-targets=workspace=%t/arm > /dev/null
// RUN: llvm-objcopy --dump-section .note.courier.features=%t/arm.note %t/arm/*.o %t/arm.copy
// RUN: tail -c +21 %t/arm.note | tr -d '\000' | FileCheck %s --check-prefix=ARM

//--- amx.mlir
// The note section is of type NOTE, excluded, not allocated (no A flag), aligned to 4.
// SECTION: .note.courier.features NOTE {{[0-9a-f]+}} {{[0-9a-f]+}} {{[0-9a-f]+}} 00 E 0 0 4
// What the CPU implies beyond x86-64's generic CPU, and the feature asked for.
// AMX: amx-tile,cmov,fxsr,mmx,nopl{{$}}
module @app {
  module @dev attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu", cpu = "x86-64",
                                             features = "+amx-tile"}} {
    func.func public @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
      %r = arith.addf %x, %x : tensor<4xf32>
      return %r : tensor<4xf32>
    }
  }
}

//--- generic.mlir
// GENERIC-NOT: .note.courier.features
module @app {
  module @dev attributes {catalyst.target = {triple = "x86_64-unknown-linux-gnu"},
                          catalyst.dispatch = {address = "127.0.0.1:7000"}} {
    func.func public @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
      %r = arith.addf %x, %x : tensor<4xf32>
      return %r : tensor<4xf32>
    }
  }
}

//--- arm.mlir
// SVE2 implies SVE, which implies half-precision arithmetic.
// ARM: fullfp16,sve,sve2{{$}}
module @app {
  module @dev attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu",
                                             features = "+sve2"}} {
    func.func public @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
      %r = arith.addf %x, %x : tensor<4xf32>
      return %r : tensor<4xf32>
    }
  }
}
