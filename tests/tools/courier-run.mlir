// RUN: rm -rf %t
// RUN: courier-run %s --arg '[1, 2, 3, 4]' --arg 0.5 --cache-dir %t --time 2> %t.first | FileCheck %s
// RUN: FileCheck %s --check-prefix=COLD < %t.first
// A second process finds the compiled module in the disk cache: no pass runs.
// RUN: courier-run %s --arg '[1, 2, 3, 4]' --arg 0.5 --cache-dir %t --time 2> %t.second | FileCheck %s
// RUN: FileCheck %s --check-prefix=WARM < %t.second
// Inputs may also be tensor objects; an integer entry prints integers.
// RUN: courier-run %s --entry count --arg '{"dtype": "i32", "shape": [2, 2], "data": [1, 2, 3, 4]}' --no-disk-cache | FileCheck %s --check-prefix=INT
// 64-bit integers survive the trip through JSON exactly.
// RUN: courier-run %s --entry next --arg '[9007199254740993, -9223372036854775807]' --no-disk-cache | FileCheck %s --check-prefix=I64
// Every failure other than a compile error is one line on stderr and a non-zero exit.
// RUN: not courier-run %s --arg '[1, 2, 3]' --arg 0.5 --no-disk-cache 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not courier-run %s --arg '[1, 2' --arg 0.5 --no-disk-cache 2>&1 | FileCheck %s --check-prefix=JSON
// RUN: not courier-run %s --arg '[1, 2, 3, 4]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not courier-run %s --entry missing --no-disk-cache 2>&1 | FileCheck %s --check-prefix=ENTRY
// RUN: not courier-run %s.nonexistent 2>&1 | FileCheck %s --check-prefix=FILE
// RUN: not courier-run %s -O7 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: courier-run %s --entry count --arg '[[1, 2], [3, 4]]' --extra-pipeline 'func.func(canonicalize),cse' --no-disk-cache | FileCheck %s --check-prefix=INT
// RUN: not courier-run %s --extra-pipeline 'no-such-pass' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=PIPELINE
// Inputs may come from a file, one JSON value after another, in their place among the --arg.
// RUN: printf '[1, 2,\n 3, 4]\n' > %t.inputs.json
// RUN: courier-run %s --arg-file %t.inputs.json --arg 0.5 --no-disk-cache | FileCheck %s
// RUN: printf '0.5' > %t.scalar.json
// RUN: courier-run %s --arg '[1, 2, 3, 4]' --arg-file %t.scalar.json --no-disk-cache | FileCheck %s
// RUN: printf '[1, 2, 3, 4] 0.5' | courier-run %s --arg-file - --no-disk-cache | FileCheck %s
// RUN: printf '[1, 2, 3, 4]\n\n[1, 2' > %t.torn.json
// RUN: not courier-run %s --arg-file %t.torn.json --no-disk-cache 2>&1 | FileCheck %s --check-prefix=TORN
// RUN: not courier-run %s --arg-file %t.inputs.json --no-disk-cache 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not courier-run %s --arg-file %t.missing.json 2>&1 | FileCheck %s --check-prefix=NOFILE
// RUN: not courier-run %s --arg-file %t.inputs.json --arg '[1, 2, 3, 4]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=ORDER

// CHECK: {"data":[2.5,4.5,6.5,8.5],"dtype":"f64","shape":[4]}
// COLD: parse {{.*}} ms, passes {{[1-9].*}} ms, cross-compile {{.*}} ms (1 compiled, 0 reused), link {{.*}} ms, ship {{.*}} ms, run {{.*}} ms{{$}}
// WARM: passes 0.00 ms, cross-compile 0.00 ms (0 compiled, 0 reused), {{.*}} (cache hit)
// INT: {"data":[2,4,6,8],"dtype":"i32","shape":[2,2]}
// I64: {"data":[9007199254740994,-9223372036854775806],"dtype":"i64","shape":[2]}
// SHAPE: courier-run: error: input 0 of 'main' must have shape tensor<4xf64>, got dimension 0 of size 3
// SHAPE-NOT: error
// JSON: courier-run: error: --arg 0 is not JSON: {{.*}}
// COUNT: courier-run: error: entry 'main' takes 2 inputs, 1 given
// ENTRY: courier-run: error: module '{{.*}}courier-run.mlir' has no entry 'missing' (entries: main, count, next)
// FILE: courier-run: error: cannot read '{{.*}}.nonexistent': {{.*}}
// OPT: courier-run: error: -O7: the optimisation level is 0 to 3
// PIPELINE: courier-run: error: invalid extra pass pipeline 'no-such-pass': {{.*}}does not refer to a registered pass
// TORN: courier-run: error: --arg-file '{{.*}}.torn.json' value 1 (line 3) is not JSON: {{.*}}
// FEW: courier-run: error: entry 'main' takes 2 inputs, 1 given
// NOFILE: courier-run: error: cannot read --arg-file '{{.*}}.missing.json': {{.*}}
// ORDER: courier-run: error: input 1 of 'main' is a scalar, got a tensor of rank 1
module @app {
  func.func public @main(%x: tensor<4xf64>, %b: f64) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    %s = tensor.splat %b : tensor<4xf64>
    %z = arith.addf %y, %s : tensor<4xf64>
    return %z : tensor<4xf64>
  }
  func.func public @count(%x: tensor<2x2xi32>) -> tensor<2x2xi32> {
    %r = arith.addi %x, %x : tensor<2x2xi32>
    return %r : tensor<2x2xi32>
  }
  func.func public @next(%x: tensor<2xi64>) -> tensor<2xi64> {
    %c = arith.constant dense<1> : tensor<2xi64>
    %r = arith.addi %x, %c : tensor<2xi64>
    return %r : tensor<2xi64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
}
