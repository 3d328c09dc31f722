// An edit of one kernel compiles that kernel again, and nothing else: the other kernel's
// object and the host code's come from the cache directory, and the answer is the new one.
// RUN: rm -rf %t && mkdir -p %t
// RUN: courier-run %s --arg '[1, 2]' --cache-dir %t/cache --time 2> %t/first | FileCheck %s --check-prefix=BEFORE
// RUN: FileCheck %s --check-prefix=COLD < %t/first
// RUN: sed 's/dense<10.0>/dense<20.0>/' %s > %t/edited.mlir
// RUN: courier-run %t/edited.mlir --arg '[1, 2]' --cache-dir %t/cache --time 2> %t/second | FileCheck %s --check-prefix=AFTER
// RUN: FileCheck %s --check-prefix=EDIT < %t/second
// The same objects come out of one code generation thread or four.
// RUN: courier-run %s --arg '[1, 2]' --no-disk-cache --jobs 1 | FileCheck %s --check-prefix=BEFORE
// RUN: courier-run %s --arg '[1, 2]' --no-disk-cache --jobs 4 | FileCheck %s --check-prefix=BEFORE
// RUN: not courier-run %s --arg '[1, 2]' --jobs 1000 2>&1 | FileCheck %s --check-prefix=JOBS

// BEFORE: {"data":[12,14],"dtype":"f64","shape":[2]}
// COLD: cross-compile {{.*}} ms (2 compiled, 0 reused), link {{[0-9.]+}} ms, ship
// AFTER: {"data":[22,24],"dtype":"f64","shape":[2]}
// EDIT: cross-compile {{.*}} ms (1 compiled, 1 reused), link {{.*}} ms (host reused), ship
// JOBS: courier-run: error: --jobs 1000: at most 256 threads
module @app {
  func.func public @main(%x: tensor<2xf64>) -> tensor<2xf64> {
    %y = catalyst.launch_kernel @twice::@f(%x) : (tensor<2xf64>) -> tensor<2xf64>
    %z = catalyst.launch_kernel @add::@f(%y) : (tensor<2xf64>) -> tensor<2xf64>
    return %z : tensor<2xf64>
  }
  module @twice attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @f(%x: tensor<2xf64>) -> tensor<2xf64> {
      %r = arith.addf %x, %x : tensor<2xf64>
      return %r : tensor<2xf64>
    }
  }
  module @add attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @f(%x: tensor<2xf64>) -> tensor<2xf64> {
      %c = arith.constant dense<10.0> : tensor<2xf64>
      %r = arith.addf %x, %c : tensor<2xf64>
      return %r : tensor<2xf64>
    }
  }
}
