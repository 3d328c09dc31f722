// RUN: courier-opt %s -courier-vectorize | FileCheck %s

// Tiles and vectors follow each target module's CPU: the same matmul gets 8 x 32 f32
// accumulators with AVX-512, 8 x 16 with AVX2 and 8 x 8 with NEON; each is carried by the k
// loop in registers and updated with one FMA per row.
module @app {
  // CHECK-LABEL: module @avx512
  module @avx512 attributes {catalyst.target = {cpu = "znver4"}} {
    // CHECK-LABEL: func.func public @matmul
    // CHECK: scf.for {{.*}} step %c8
    // CHECK: scf.for {{.*}} step %c32
    // CHECK: %[[INIT:.*]] = vector.transfer_read {{.*}} : tensor<64x64xf32>, vector<8x32xf32>
    // CHECK: %[[ACC:.*]] = scf.for {{.*}} iter_args(%[[CARRIED:.*]] = %[[INIT]]) -> (vector<8x32xf32>)
    // CHECK-COUNT-8: vector.fma {{.*}} : vector<32xf32>
    // CHECK: scf.yield {{.*}} : vector<8x32xf32>
    // CHECK: vector.transfer_write %[[ACC]]
    // CHECK-NOT: linalg.matmul
    func.func public @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
      return %r : tensor<64x64xf32>
    }

    // Elementwise ops take four vectors a step.
    // CHECK-LABEL: func.func public @add
    // CHECK: scf.for {{.*}} step %c64
    // CHECK: vector.transfer_read {{.*}} : tensor<4096xf32>, vector<64xf32>
    // CHECK: arith.addf {{.*}} : vector<64xf32>
    func.func public @add(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> tensor<4096xf32> {
      %e = tensor.empty() : tensor<4096xf32>
      %r = linalg.add ins(%a, %b : tensor<4096xf32>, tensor<4096xf32>) outs(%e : tensor<4096xf32>) -> tensor<4096xf32>
      return %r : tensor<4096xf32>
    }

    // arith.addf on tensors becomes a linalg op whose result starts empty, not as its first
    // operand (which bufferization would copy into the result first).
    // CHECK-LABEL: func.func public @arith_add
    // CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<4096xf32>
    // CHECK: scf.for {{.*}} step %c64 iter_args(%{{.*}} = %[[EMPTY]])
    // CHECK: arith.addf {{.*}} : vector<64xf32>
    func.func public @arith_add(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> tensor<4096xf32> {
      %r = arith.addf %a, %b : tensor<4096xf32>
      return %r : tensor<4096xf32>
    }

    // A reduction along the innermost dimension adds four vectors a step into partial sums
    // the loop carries, and reduces those across once, after the loop.
    // CHECK-LABEL: func.func public @rowsum
    // CHECK: %[[PARTIAL:.*]] = scf.for {{.*}} iter_args({{.*}}) -> (vector<64xf32>)
    // CHECK: arith.addf {{.*}} : vector<64xf32>
    // CHECK: %[[ROW:.*]] = vector.broadcast %[[PARTIAL]] : vector<64xf32> to vector<1x64xf32>
    // CHECK: vector.multi_reduction <add>, %[[ROW]], {{.*}} [1] : vector<1x64xf32> to vector<1xf32>

    func.func public @rowsum(%a: tensor<16x1024xf32>, %init: tensor<16xf32>) -> tensor<16xf32> {
      %r = linalg.reduce ins(%a : tensor<16x1024xf32>) outs(%init : tensor<16xf32>) dimensions = [1]
        (%x: f32, %acc: f32) {
          %s = arith.addf %x, %acc : f32
          linalg.yield %s : f32
        }
      return %r : tensor<16xf32>
    }

    // Elementwise arith on tensors in a target module is vectorized too.
    // CHECK-LABEL: func.func public @scale
    // CHECK: arith.mulf {{.*}} : vector<64xf32>
    func.func public @scale(%a: tensor<1000xf32>, %b: tensor<1000xf32>) -> tensor<1000xf32> {
      %r = arith.mulf %a, %b : tensor<1000xf32>
      return %r : tensor<1000xf32>
    }
  }

  // Where B's rows are a page apart (1024 f32), each 256 x 256 tile of B is copied once into
  // a contiguous buffer, in the K loop before the M loop, and the register tiles read the copy.
  // CHECK-LABEL: module @packed
  // CHECK: %[[PACK:.*]] = tensor.empty() : tensor<256x256xf32>
  // CHECK: scf.for %[[N:.*]] = {{.*}} step %c256
  // CHECK: scf.for %[[K:.*]] = {{.*}} step %c256
  // CHECK: %[[COPY:.*]] = scf.for {{.*}} iter_args({{.*}} = %[[PACK]]) -> (tensor<256x256xf32>)
  // CHECK: vector.transfer_read {{.*}} : tensor<1024x1024xf32>, vector<64xf32>
  // CHECK: scf.for {{.*}} step %c64
  // CHECK: vector.transfer_read %[[COPY]]
  // CHECK: vector.fma {{.*}} : vector<32xf32>
  // A finished tile of C goes back into C as a slice (nothing once bufferized in place), not as
  // a 64 x 256 vector read and written.
  // CHECK-NOT: vector<64x256xf32>
  // CHECK: tensor.insert_slice {{.*}} : tensor<64x256xf32> into tensor<1024x1024xf32>
  module @packed attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @matmul(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>, %c: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      return %r : tensor<1024x1024xf32>
    }
  }

  // A matmul of dynamic shape gets register tiles alone: whole 8 x 32 tiles (peeled loops
  // whose bounds round the sizes down) are vectorized, and strips of dynamic size at the
  // edges stay scalar. The same for an elementwise op.
  // CHECK-LABEL: module @dynamic
  // CHECK: scf.for {{.*}} step %c8
  // CHECK: scf.for {{.*}} step %c32
  // CHECK: vector.transfer_read {{.*}} : tensor<?x?xf32>, vector<8x32xf32>
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
  // CHECK-COUNT-8: vector.fma {{.*}} : vector<32xf32>
  // CHECK: linalg.matmul ins({{.*}} : tensor<8x1xf32>, tensor<1x?xf32>)
  // CHECK: linalg.matmul ins({{.*}} : tensor<?x1xf32>, tensor<1x32xf32>)
  // CHECK-LABEL: func.func public @add
  // CHECK: arith.addf {{.*}} : vector<64xf32>
  // CHECK: linalg.add ins({{.*}} : tensor<?xf32>, tensor<?xf32>)
  module @dynamic attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }
    func.func public @add(%a: tensor<?xf32>, %b: tensor<?xf32>, %c: tensor<?xf32>) -> tensor<?xf32> {
      %r = linalg.add ins(%a, %b : tensor<?xf32>, tensor<?xf32>) outs(%c : tensor<?xf32>) -> tensor<?xf32>
      return %r : tensor<?xf32>
    }
  }

  // A matmul reading B transposed through its maps reads B where it is: no packed copy, whose
  // layout is B's as k x n.
  // CHECK-LABEL: module @transposed
  // CHECK-NOT: linalg.copy
  // CHECK: vector.fma {{.*}} : vector<32xf32>
  module @transposed attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @matmul(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>, %c: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
      %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
          ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      return %r : tensor<1024x1024xf32>
    }
  }

  // An i8 matmul on x86 takes k in pairs: A widened to i16 as m x k/2 x 2, B as k/2 x n x 2
  // (each pair of rows interleaved), and each register-tile step broadcasts a row's pair of A
  // as one 32-bit lane and adds pmaddwd of it and B's pairs to the row's accumulators
  // (vpdpwssd with VNNI: tests/passes/courier-vectorize-pair-dots.mlir).
  // CHECK-LABEL: module @pairs
  // CHECK: func.func private @llvm.x86.avx512.pmaddw.d.512(vector<32xi16>, vector<32xi16>) -> vector<16xi32>
  // CHECK: scf.for {{.*}} -> (tensor<128x64x2xi16>)
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xi32>)
  // CHECK: vector.transfer_read {{.*}} : tensor<128x64x2xi16>, vector<32x2xi16>
  // CHECK: vector.bitcast {{.*}} : vector<8x2xi16> to vector<8x1xi32>
  // CHECK-COUNT-16: func.call @llvm.x86.avx512.pmaddw.d.512
  module @pairs attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @imatmul(%a: tensor<64x256xi8>, %b: tensor<256x64xi8>, %c: tensor<64x64xi32>) -> tensor<64x64xi32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x256xi8>, tensor<256x64xi8>) outs(%c : tensor<64x64xi32>) -> tensor<64x64xi32>
      return %r : tensor<64x64xi32>
    }
  }

  // Elsewhere an integer matmul is tiled as a float one, multiplies and adds in place of FMAs.
  // CHECK-LABEL: module @neon_int
  // CHECK-NOT: pmadd
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x8xi32>)
  // CHECK: arith.muli {{.*}} : vector<8xi32>
  module @neon_int attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {
    func.func public @imatmul(%a: tensor<64x256xi8>, %b: tensor<256x64xi8>, %c: tensor<64x64xi32>) -> tensor<64x64xi32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x256xi8>, tensor<256x64xi8>) outs(%c : tensor<64x64xi32>) -> tensor<64x64xi32>
      return %r : tensor<64x64xi32>
    }
  }

  // A batch of one is a matmul, tiled as one.
  // CHECK-LABEL: module @batch
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
  // CHECK-COUNT-8: vector.fma {{.*}} : vector<32xf32>
  module @batch attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @bmm(%a: tensor<1x64x64xf32>, %b: tensor<1x64x64xf32>, %c: tensor<1x64x64xf32>) -> tensor<1x64x64xf32> {
      %r = linalg.batch_matmul ins(%a, %b : tensor<1x64x64xf32>, tensor<1x64x64xf32>) outs(%c : tensor<1x64x64xf32>) -> tensor<1x64x64xf32>
      return %r : tensor<1x64x64xf32>
    }
  }

  // A 2-D convolution: 8 output pixels by two vectors of filters, carried across the filter
  // row, column and input channel loops, one FMA per pixel a step.
  // CHECK-LABEL: module @conv
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
  // CHECK-COUNT-8: vector.fma {{.*}} : vector<32xf32>
  module @conv attributes {catalyst.target = {cpu = "znver4"}} {
    func.func public @conv(%i: tensor<1x10x10x16xf32>, %w: tensor<3x3x16x64xf32>, %o: tensor<1x8x8x64xf32>) -> tensor<1x8x8x64xf32> {
      %r = linalg.conv_2d_nhwc_hwcf ins(%i, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x64xf32>) outs(%o : tensor<1x8x8x64xf32>) -> tensor<1x8x8x64xf32>
      return %r : tensor<1x8x8x64xf32>
    }
  }

  // CHECK-LABEL: module @avx2
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x16xf32>)
  // CHECK-COUNT-8: vector.fma {{.*}} : vector<16xf32>
  module @avx2 attributes {catalyst.target = {cpu = "haswell"}} {
    func.func public @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
      return %r : tensor<64x64xf32>
    }
  }

  // CHECK-LABEL: module @neon
  // CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x8xf32>)
  // CHECK-COUNT-8: vector.fma {{.*}} : vector<8xf32>
  module @neon attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {
    func.func public @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
      return %r : tensor<64x64xf32>
    }
  }

  // fp = "strict" keeps source order: nothing is tiled, vectorized or fused.
  // CHECK-LABEL: module @strict
  // CHECK-NOT: vector.
  // CHECK: linalg.matmul
  // CHECK-NOT: vector.
  module @strict attributes {catalyst.target = {cpu = "znver4", fp = "strict"}} {
    func.func public @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
      return %r : tensor<64x64xf32>
    }
  }
}
