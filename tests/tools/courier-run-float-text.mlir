// courier-run prints each result in the shortest text that reads back in its own element type,
// as courier-serve does: a third of 1 is 0.33333334 as an f32 (its double would print
// 0.3333333432674408) and 0.3333333333333333 as an f64; whole numbers print exactly, and
// scientific notation only where it is shorter.
// RUN: courier-run %s --entry third32 --arg '[1, 2, 1e10, 3e-7]' --no-disk-cache | FileCheck %s --check-prefix=F32
// RUN: courier-run %s --entry third64 --arg '[1, 2, 1e10, 3e-7]' --no-disk-cache | FileCheck %s --check-prefix=F64
// Read back, each printed f32 is the kernel's result exactly (Python's float division of the
// two floats, rounded to a float once, is the correctly rounded f32 quotient).
// RUN: courier-run %s --entry third32 --arg '[1, 2, 1e10, 3e-7]' --no-disk-cache | python3 -c 'import json, struct, sys; f = lambda x: struct.unpack("f", struct.pack("f", x))[0]; got = json.loads(sys.stdin.readline())["data"]; want = [f(f(x) / 3.0) for x in (1, 2, 1e10, 3e-7)]; sys.exit(0 if [f(x) for x in got] == want else "printed %r, the kernel computed %r" % (got, want))'

// F32: {"data":[0.33333334,0.6666667,3333333248,1e-07],"dtype":"f32","shape":[4]}
// F64: {"data":[0.3333333333333333,0.6666666666666666,3333333333.3333335,1e-07],"dtype":"f64","shape":[4]}
module {
  func.func public @third32(%x: tensor<4xf32>) -> tensor<4xf32> {
    %three = arith.constant dense<3.0> : tensor<4xf32>
    %y = arith.divf %x, %three : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func public @third64(%x: tensor<4xf64>) -> tensor<4xf64> {
    %three = arith.constant dense<3.0> : tensor<4xf64>
    %y = arith.divf %x, %three : tensor<4xf64>
    return %y : tensor<4xf64>
  }
}
