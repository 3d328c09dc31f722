// NaN and the infinities print as the JSON strings "NaN", "Infinity" and "-Infinity", which a
// strict parser reads, and are read back from --arg; -0 stays -0.
// RUN: courier-run %s --arg '[1, 0, -1, 0]' --no-disk-cache | FileCheck %s
// RUN: courier-run %s --arg '[1, 0, -1, 0]' --no-disk-cache | python3 -c 'import json, sys; [json.loads(line, parse_constant=lambda bare: sys.exit("not JSON: " + bare)) for line in sys.stdin]'
// RUN: courier-run %s --arg '["Infinity", "NaN", "-Infinity", 0]' --no-disk-cache | FileCheck %s
// An integer input cannot hold them.
// RUN: not courier-run %s --entry count --arg '[1, "NaN"]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=INT

// CHECK: {"data":["Infinity","NaN","-Infinity",-0.0],"dtype":"f32","shape":[4]}
// INT: courier-run: error: --arg 0: element 1 is "NaN", which only a float dtype (bf16, f16, f32 or f64) can hold, not i32
module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %d = arith.constant dense<[0.0, 0.0, 0.0, -1.0]> : tensor<4xf32>
    %y = arith.divf %x, %d : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func public @count(%x: tensor<2xi32>) -> tensor<2xi32> {
    return %x : tensor<2xi32>
  }
}
