// RUN: courier-run %s --entry inc --arg '[0, 200, 254, 255]' --no-disk-cache | FileCheck %s --check-prefix=UI8
// RUN: courier-run %s --entry inc --arg '{"dtype": "ui8", "data": [7, 8, 9, 10]}' --no-disk-cache | FileCheck %s --check-prefix=OBJECT
// RUN: courier-run %s --entry wide --arg '[18446744073709551614, 0]' --no-disk-cache | FileCheck %s --check-prefix=UI64
// RUN: courier-run %s --entry half --arg '[1.00390625, 1.01171875, 256]' --no-disk-cache | FileCheck %s --check-prefix=BF16
// Values an unsigned type cannot hold are refused, naming the range.
// RUN: not courier-run %s --entry inc --arg '[0, 256, 1, 2]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=HIGH
// RUN: not courier-run %s --entry inc --arg '[0, -1, 1, 2]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not courier-run %s --entry wide --arg '[18446744073709551616, 0]' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: not courier-run %s --entry inc --arg '{"dtype": "i8", "data": [1, 2, 3, 4]}' --no-disk-cache 2>&1 | FileCheck %s --check-prefix=SIGNED

// An entry declared on ui8 takes and prints ui8; its kernel adds on the same bytes as i8.
// UI8: {"data":[1,201,255,0],"dtype":"ui8","shape":[4]}
// OBJECT: {"data":[8,9,10,11],"dtype":"ui8","shape":[4]}
// UI64: {"data":[18446744073709551615,1],"dtype":"ui64","shape":[2]}
// bf16 inputs round to the nearest, ties to even (1 + 2^-8 to 1); 256 + 1 rounds back to 256.
// BF16: {"data":[2,2.015625,256],"dtype":"bf16","shape":[3]}
// HIGH: courier-run: error: --arg 0: element 1 (256) is not a whole number ui8 can hold (0 to 255)
// NEGATIVE: courier-run: error: --arg 0: element 1 (-1) is not a whole number ui8 can hold (0 to 255)
// WIDE: courier-run: error: --arg 0: element 0 (1.8446744073709552e+19) is not a whole number ui64 can hold (0 to 18446744073709551615)
// SIGNED: courier-run: error: input 0 of 'inc' must be ui8, got i8
module @app {
  func.func public @inc(%x: tensor<4xui8>) -> tensor<4xui8> {
    %y = catalyst.launch_kernel @dev::@inc(%x) : (tensor<4xui8>) -> tensor<4xui8>
    return %y : tensor<4xui8>
  }
  func.func public @wide(%x: tensor<2xui64>) -> tensor<2xui64> {
    %y = catalyst.launch_kernel @dev::@wide(%x) : (tensor<2xui64>) -> tensor<2xui64>
    return %y : tensor<2xui64>
  }
  func.func public @half(%x: tensor<3xbf16>) -> tensor<3xbf16> {
    %y = catalyst.launch_kernel @dev::@half(%x) : (tensor<3xbf16>) -> tensor<3xbf16>
    return %y : tensor<3xbf16>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @inc(%x: tensor<4xi8>) -> tensor<4xi8> {
      %one = arith.constant dense<1> : tensor<4xi8>
      %y = arith.addi %x, %one : tensor<4xi8>
      return %y : tensor<4xi8>
    }
    func.func public @wide(%x: tensor<2xi64>) -> tensor<2xi64> {
      %one = arith.constant dense<1> : tensor<2xi64>
      %y = arith.addi %x, %one : tensor<2xi64>
      return %y : tensor<2xi64>
    }
    func.func public @half(%x: tensor<3xbf16>) -> tensor<3xbf16> {
      %one = arith.constant dense<1.0> : tensor<3xbf16>
      %y = arith.addf %x, %one : tensor<3xbf16>
      return %y : tensor<3xbf16>
    }
  }
}
