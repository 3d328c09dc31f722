// RUN: courier-run %s --entry launch_column --arg '[[0,1,2,3],[4,5,6,7],[8,9,10,11],[12,13,14,15]]' --no-disk-cache | FileCheck %s --check-prefix=LAUNCH
// RUN: courier-run %s --entry return_column --arg '[[0,1,2,3],[4,5,6,7],[8,9,10,11],[12,13,14,15]]' --no-disk-cache | FileCheck %s --check-prefix=HOST
// RUN: courier-run %s --entry kernel_column --arg '[[0,1,2,3],[4,5,6,7],[8,9,10,11],[12,13,14,15]]' --no-disk-cache | FileCheck %s --check-prefix=KERNEL

// Strided views crossing a launch, returned from the host and returned from a kernel are
// all packed correctly, with no runtime library behind the copies.
// LAUNCH: {"data":[2,10,18,26],"dtype":"f64","shape":[4,1]}
// HOST: {"data":[1,5,9,13],"dtype":"f64","shape":[4,1]}
// KERNEL: {"data":[1,5,9,13],"dtype":"f64","shape":[4,1]}
module @app {
  func.func public @launch_column(%x: tensor<4x4xf64>) -> tensor<4x1xf64> {
    %col = tensor.extract_slice %x[0, 1] [4, 1] [1, 1] : tensor<4x4xf64> to tensor<4x1xf64>
    %y = catalyst.launch_kernel @dev::@twice(%col) : (tensor<4x1xf64>) -> tensor<4x1xf64>
    return %y : tensor<4x1xf64>
  }
  func.func public @return_column(%x: tensor<4x4xf64>) -> tensor<4x1xf64> {
    %col = tensor.extract_slice %x[0, 1] [4, 1] [1, 1] : tensor<4x4xf64> to tensor<4x1xf64>
    return %col : tensor<4x1xf64>
  }
  func.func public @kernel_column(%x: tensor<4x4xf64>) -> tensor<4x1xf64> {
    %y = catalyst.launch_kernel @dev::@column(%x) : (tensor<4x4xf64>) -> tensor<4x1xf64>
    return %y : tensor<4x1xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @twice(%x: tensor<4x1xf64>) -> tensor<4x1xf64> {
      %r = arith.addf %x, %x : tensor<4x1xf64>
      return %r : tensor<4x1xf64>
    }
    func.func public @column(%x: tensor<4x4xf64>) -> tensor<4x1xf64> {
      %col = tensor.extract_slice %x[0, 1] [4, 1] [1, 1] : tensor<4x4xf64> to tensor<4x1xf64>
      return %col : tensor<4x1xf64>
    }
  }
}
