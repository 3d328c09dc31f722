// RUN: rm -rf %t && split-file %s %t
// RUN: courier-opt %t/host.mlir -cross-compile-targets=workspace=%t/ws | FileCheck %s --check-prefix=HOST
// RUN: llvm-readelf -h %t/ws/*.o | FileCheck %s --check-prefix=HOST-ELF
// RUN: llvm-nm %t/ws/*.o | FileCheck %s --check-prefix=SYMS
// Compiling the same module again writes the same file name.
// RUN: courier-opt %t/host.mlir -cross-compile-targets=workspace=%t/ws | grep -o 'object_file = "[^"]*"' > %t/first
// RUN: courier-opt %t/host.mlir -cross-compile-targets=workspace=%t/ws | grep -o 'object_file = "[^"]*"' > %t/second
// RUN: diff %t/first %t/second
// RUN: ls %t/ws | count 1
// RUN: courier-opt %t/arm.mlir -cross-compile-targets=workspace=%t/arm-ws | FileCheck %s --check-prefix=ARM
// RUN: llvm-readelf -h %t/arm-ws/*.o | FileCheck %s --check-prefix=ARM-ELF
// Catalyst's `pipeline` key lowers the module with the named passes, and `backend` is kept.
// RUN: courier-opt %t/pipeline.mlir -cross-compile-targets=workspace=%t/pipeline-ws | FileCheck %s --check-prefix=PIPELINE
// RUN: llvm-nm %t/pipeline-ws/*.o | FileCheck %s --check-prefix=PIPELINE-SYMS
// Code generation on four threads makes the bytes one thread makes: each object is named by
// its SHA-256, so equal names are equal objects, module by module.
// RUN: courier-opt %t/many.mlir -cross-compile-targets="workspace=%t/serial jobs=1" | grep -o 'object_file = "[^"]*"' | sed 's|.*/||' > %t/serial.names
// RUN: courier-opt %t/many.mlir -cross-compile-targets="workspace=%t/parallel jobs=4" | grep -o 'object_file = "[^"]*"' | sed 's|.*/||' > %t/parallel.names
// RUN: diff %t/serial.names %t/parallel.names
// RUN: cat %t/serial.names | count 6
// RUN: ls %t/parallel | count 6
// RUN: cd %t/serial && for f in *.o; do cmp $f ../parallel/$f || exit 1; done

//--- host.mlir
// A target without a triple is compiled for the host; the host module keeps the original.
// HOST-LABEL: module @app
// HOST: catalyst.launch_kernel @dev::@scale
// HOST: module @dev attributes {catalyst.object_file = "{{.*}}/ws/{{[0-9a-f]+}}.o", catalyst.target = {}}
// HOST: func.func public @scale(%{{.*}}: tensor<4xf64>) -> tensor<4xf64>
// HOST: module @plain {
module @app {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      %c = arith.constant dense<2.0> : tensor<4xf64>
      %r = arith.mulf %x, %c : tensor<4xf64>
      return %r : tensor<4xf64>
    }
    func.func public @pair(%x: tensor<2x3xi32>, %y: tensor<2x3xi32>) -> (tensor<2x3xi32>, tensor<2x3xi32>) {
      %s = arith.addi %x, %y : tensor<2x3xi32>
      return %s, %x : tensor<2x3xi32>, tensor<2x3xi32>
    }
    func.func private @helper() { return }
  }
  // A module without catalyst.target is not compiled.
  module @plain {}
}
// HOST-ELF: Type: REL (Relocatable file)
// HOST-ELF: Machine: Advanced Micro Devices X86-64
// One entry per public function, none for private ones.
// SYMS-NOT: _catalyst_pyface_helper
// SYMS-DAG: T _catalyst_pyface_pair
// SYMS-DAG: T _catalyst_pyface_scale
// Each entry has a signature table executors check launches against.
// SYMS-DAG: R _catalyst_signature_pair
// SYMS-DAG: R _catalyst_signature_scale
// SYMS-NOT: _catalyst_pyface_helper

//--- arm.mlir
// ARM: module @dev attributes {catalyst.object_file = "{{.*}}/arm-ws/{{[0-9a-f]+}}.o", catalyst.target = {cpu = "cortex-a72", features = "+neon", triple = "aarch64-unknown-linux-gnu"}}
module {
  module @dev attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu", cpu = "cortex-a72", features = "+neon"}} {
    func.func public @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
      %r = arith.addf %x, %x : tensor<4xf32>
      return %r : tensor<4xf32>
    }
  }
}
// ARM-ELF: Type: REL (Relocatable file)
// ARM-ELF: Machine: AArch64

//--- pipeline.mlir
// PIPELINE: module @accel attributes {catalyst.object_file = "{{.*}}/pipeline-ws/{{[0-9a-f]+}}.o", catalyst.target = {backend = "accel", pipeline = "courier-lower-to-llvm"}}
// PIPELINE-SYMS: T _catalyst_pyface_k
module @app {
  module @accel attributes {catalyst.target = {backend = "accel", pipeline = "courier-lower-to-llvm"}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}

//--- many.mlir
// Six modules, each its own object (their constants differ).
module {
  module @k0 attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<64xf64>) -> tensor<64xf64> {
      %c = arith.constant dense<0.5> : tensor<64xf64>
      %r = arith.mulf %x, %c : tensor<64xf64>
      return %r : tensor<64xf64>
    }
  }
  module @k1 attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<64xf64>) -> tensor<64xf64> {
      %c = arith.constant dense<1.5> : tensor<64xf64>
      %r = arith.mulf %x, %c : tensor<64xf64>
      return %r : tensor<64xf64>
    }
  }
  module @k2 attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {
    func.func public @f(%x: tensor<64xf64>) -> tensor<64xf64> {
      %c = arith.constant dense<2.5> : tensor<64xf64>
      %r = arith.addf %x, %c : tensor<64xf64>
      return %r : tensor<64xf64>
    }
  }
  module @k3 attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<64xi32>) -> tensor<64xi32> {
      %c = arith.constant dense<3> : tensor<64xi32>
      %r = arith.muli %x, %c : tensor<64xi32>
      return %r : tensor<64xi32>
    }
  }
  module @k4 attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {
    func.func public @f(%x: tensor<64xf32>) -> tensor<64xf32> {
      %c = arith.constant dense<4.5> : tensor<64xf32>
      %r = arith.mulf %x, %c : tensor<64xf32>
      return %r : tensor<64xf32>
    }
  }
  module @k5 attributes {catalyst.target = {}} {
    func.func public @f(%x: tensor<8x8xf64>) -> tensor<8x8xf64> {
      %r = arith.addf %x, %x : tensor<8x8xf64>
      return %r : tensor<8x8xf64>
    }
  }
}
