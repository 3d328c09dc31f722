// An i8 x i8 -> i32 matmul sums its products in pairs: on a CPU with AVX-512 VNNI each
// register-tile step is one vpdpwssd per row and vector of columns (LLVM fuses pmaddwd and
// the add); with AVX-512 BW and no VNNI, vpmaddwd and vpaddd; with AVX2, the same on ymm.
// RUN: rm -rf %t.vnni %t.bw %t.avx2
// RUN: sed 's/@CPU@/znver4/' %s | courier-opt --courier-pipeline="workspace=%t.vnni" > /dev/null
// RUN: llvm-objdump -d %t.vnni/*.o | FileCheck %s --check-prefix=VNNI
// RUN: sed 's/@CPU@/skylake-avx512/' %s | courier-opt --courier-pipeline="workspace=%t.bw" > /dev/null
// RUN: llvm-objdump -d %t.bw/*.o | FileCheck %s --check-prefix=BW
// RUN: sed 's/@CPU@/haswell/' %s | courier-opt --courier-pipeline="workspace=%t.avx2" > /dev/null
// RUN: llvm-objdump -d %t.avx2/*.o | FileCheck %s --check-prefix=AVX2

// VNNI-COUNT-16: vpdpwssd %zmm
// VNNI-NOT: vpmulld
// BW-NOT: vpdpwssd
// BW-COUNT-16: vpmaddwd %zmm
// AVX2-NOT: vpdpwssd
// AVX2-COUNT-16: vpmaddwd %ymm
module @app {
  func.func public @main(%a: tensor<64x256xi8>, %b: tensor<256x64xi8>) -> tensor<64x64xi32> {
    %r = catalyst.launch_kernel @dev::@imatmul(%a, %b) : (tensor<64x256xi8>, tensor<256x64xi8>) -> tensor<64x64xi32>
    return %r : tensor<64x64xi32>
  }
  module @dev attributes {catalyst.target = {cpu = "@CPU@"}, catalyst.dispatch = {address = "local"}} {
    func.func public @imatmul(%a: tensor<64x256xi8>, %b: tensor<256x64xi8>) -> tensor<64x64xi32> {
      %z = arith.constant 0 : i32
      %e = tensor.empty() : tensor<64x64xi32>
      %f = linalg.fill ins(%z : i32) outs(%e : tensor<64x64xi32>) -> tensor<64x64xi32>
      %r = linalg.matmul ins(%a, %b : tensor<64x256xi8>, tensor<256x64xi8>) outs(%f : tensor<64x64xi32>) -> tensor<64x64xi32>
      return %r : tensor<64x64xi32>
    }
  }
}
