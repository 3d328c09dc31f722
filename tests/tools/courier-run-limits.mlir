// A constant over --max-constant-mib (default 64) is refused before any pass, at the op; an
// object over --max-object-mib at the module that produced it.
// RUN: not courier-run %s --no-disk-cache 2>&1 | FileCheck %s --check-prefix=DEFAULT
// RUN: not courier-run %s --entry small --max-constant-mib 1 --no-disk-cache 2>&1 | FileCheck %s --check-prefix=FLAG
// RUN: not courier-run %S/Inputs/large-object.mlir -O0 --max-object-mib 1 --no-disk-cache 2>&1 | FileCheck %s --check-prefix=OBJECT
// RUN: not courier-run %s --entry small --max-constant-mib 17592186044416 2>&1 | FileCheck %s --check-prefix=RANGE

// DEFAULT: {{^}}{{.*}}courier-run-limits.mlir:[[@LINE+6]]:10: error: 'arith.constant' holds a constant of 400000000 bytes, more than the limit of 67108864 (maxConstantBytes)
// FLAG: {{^}}{{.*}}courier-run-limits.mlir:[[@LINE+5]]:10: error: 'arith.constant' holds a constant of 400000000 bytes, more than the limit of 1048576 (maxConstantBytes)
// OBJECT: {{^}}{{.*}}large-object.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'builtin.module' compiled to a host object of {{[0-9]+}} bytes, more than the limit of 1048576 (maxObjectBytes)
// RANGE: courier-run: error: --max-constant-mib and --max-object-mib are at most 17592186044415
module {
  func.func public @main() -> tensor<100000000xf32> {
    %c = arith.constant dense<1.0> : tensor<100000000xf32>
    return %c : tensor<100000000xf32>
  }
  func.func public @small() -> tensor<1xf32> {
    %c = arith.constant dense<2.0> : tensor<1xf32>
    return %c : tensor<1xf32>
  }
}
