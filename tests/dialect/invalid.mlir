// RUN: courier-opt %s -split-input-file -verify-diagnostics

// An empty address cannot name an executor.
func.func @open_empty() {
  // expected-error @+1 {{needs a non-empty address}}
  %s = executor.open("") : !executor.session
  return
}

// -----

// num_input_args may not exceed the operand count.
func.func @call_too_many_inputs(%s: !executor.session, %in: memref<8xi8>) {
  // expected-error @+1 {{num_input_args (2) must be between 0 and the operand count (1)}}
  executor.call %s("sym") (%in) {num_input_args = 2 : i32} : !executor.session, (memref<8xi8>) -> ()
  return
}

// -----

// Tensor results and output buffers are two forms of the same thing, not to be mixed.
func.func @call_both_forms(%s: !executor.session, %in: tensor<8xi8>, %out: tensor<4xf32>) {
  // expected-error @+1 {{has both results and output buffers}}
  %o = executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (tensor<8xi8>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// The wire layout is packed: dynamic shapes cannot be sized.
func.func @call_dynamic(%s: !executor.session, %in: memref<?xi8>) {
  // expected-error @+1 {{needs statically shaped operands and results}}
  executor.call %s("sym") (%in) {num_input_args = 1 : i32} : !executor.session, (memref<?xi8>) -> ()
  return
}

// -----

// Launch operands are tensors or memrefs.
func.func @launch_scalar(%s: !executor.session, %x: f32) {
  // expected-error @+1 {{operand #1 must be variadic of ranked tensor or memref}}
  %r = executor.launch %s("k", "/o.o") (%x) : !executor.session, (f32) -> memref<4xf32>
  return
}

// -----

// Launch is either before or after bufferization.
func.func @launch_mixed(%s: !executor.session, %x: tensor<4xf32>) {
  // expected-error @+1 {{mixes tensor and memref operands or results}}
  %r = executor.launch %s("k", "/o.o") (%x) : !executor.session, (tensor<4xf32>) -> memref<4xf32>
  return
}

// -----

// A launch needs the object it comes from.
func.func @launch_no_object(%s: !executor.session, %x: memref<4xf32>) {
  // expected-error @+1 {{needs a non-empty object path}}
  %r = executor.launch %s("k", "") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  return
}

// -----

// launch_kernel names a function in a nested module.
module {
  func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    // expected-error @+1 {{no function 'missing' in module 'dev'}}
    %y = catalyst.launch_kernel @dev::@missing(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      return %x : tensor<4xf64>
    }
  }
}

// -----

module {
  func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    // expected-error @+1 {{takes 1 arguments and returns 1 results, but the launch passes 2 and expects 1}}
    %y = catalyst.launch_kernel @dev::@scale(%x, %x) : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @scale(%x: tensor<4xf64>) -> tensor<4xf64> {
      return %x : tensor<4xf64>
    }
  }
}

// -----

// catalyst.target must be a dictionary.
// expected-error @+1 {{'catalyst.target' must be a dictionary}}
module @dev attributes {catalyst.target = "x86_64"} {
}

// -----

// expected-error @+1 {{'catalyst.dispatch' field 'address' must be a string}}
module @dev attributes {catalyst.dispatch = {address = 7000}} {
}

// -----

func.func @f() attributes {catalyst.object_file = "/w/k.o"} {
  // expected-error @-1 {{'catalyst.object_file' is only valid on a builtin.module}}
  return
}

// -----

// c_params kinds are C scalar kinds, ptr or str.
func.func @bad_kind(%x: f64) {
  // expected-error @+1 {{c_params[0] has unknown kind 'double'}}
  catalyst.runtime_call fn("f") (%x) {c_params = ["double"]} : (f64) -> ()
  return
}

// -----

func.func @kind_mismatch(%x: f32) {
  // expected-error @+1 {{operand 0 of type 'f32' does not match its C parameter kind 'f64'}}
  catalyst.runtime_call fn("f") (%x) {c_params = ["f64"]} : (f32) -> ()
  return
}

// -----

func.func @missing_string() {
  // expected-error @+1 {{c_params declares 1 str parameters but c_strings has 0 entries}}
  catalyst.runtime_call fn("f") () {c_params = ["str"]} : () -> ()
  return
}

// -----

func.func @operand_count(%x: f64) {
  // expected-error @+1 {{c_params declares 0 scalar or ptr parameters but the op has 1 operands}}
  catalyst.runtime_call fn("f") (%x) {c_params = []} : (f64) -> ()
  return
}

// -----

func.func @void_with_result() {
  // expected-error @+1 {{c_result is void but the op declares a result}}
  %r = catalyst.runtime_call fn("f") () {c_params = []} : () -> f64
  return
}

// -----

func.func @result_mismatch() {
  // expected-error @+1 {{c_result 'i32' needs exactly one result of that type}}
  %r = catalyst.runtime_call fn("f") () {c_params = [], c_result = "i32"} : () -> f64
  return
}

// -----

// A launch must agree with the kernel's signature, or the kernel overruns its buffers.
module {
  func.func @main(%x: tensor<8xf64>) -> tensor<8xf64> {
    // expected-error @+1 {{operand 0 has type 'tensor<8xf64>' but @dev::@k declares 'tensor<4xf64>'}}
    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<8xf64>) -> tensor<8xf64>
    return %y : tensor<8xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}

// -----

module {
  func.func @main(%x: tensor<4xf64>) -> tensor<4xf32> {
    // expected-error @+1 {{result 0 has type 'tensor<4xf32>' but @dev::@k declares 'tensor<4xf64>'}}
    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<4xf64>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}

// -----

// Only public functions get a kernel entry.
module {
  func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    // expected-error @+1 {{callee @dev::@k is not public}}
    %y = catalyst.launch_kernel @dev::@k(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func private @k(%x: tensor<4xf64>) -> tensor<4xf64> { return %x : tensor<4xf64> }
  }
}

// -----

// A bufferized host may launch a tensor-level kernel, and dynamic sizes match any.
module {
  func.func @main(%x: memref<?xf64>) -> memref<4xf64> {
    %y = catalyst.launch_kernel @dev::@k(%x) : (memref<?xf64>) -> memref<4xf64>
    return %y : memref<4xf64>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<?xf64>) -> tensor<?xf64> { return %x : tensor<?xf64> }
  }
}

// -----

// Kernels are compiled for contiguous buffers; a strided view must be copied first (one-shot
// bufferize does).
func.func @launch_strided(%s: !executor.session, %x: memref<4xf32, strided<[2]>>) {
  // expected-error @+1 {{needs identity-layout (contiguous) buffers, got 'memref<4xf32, strided<[2]>>'}}
  %r = executor.launch %s("k", "/o.o") (%x) : !executor.session, (memref<4xf32, strided<[2]>>) -> memref<4xf32>
  return
}

// -----

// A packed layout larger than 64-bit sizes can address is refused.
func.func @call_too_large(%s: !executor.session, %in: memref<4611686018427387904xi64>) {
  // expected-error @+1 {{packs more bytes than a 64-bit size holds}}
  executor.call %s("sym") (%in) {num_input_args = 1 : i32} : !executor.session, (memref<4611686018427387904xi64>) -> ()
  return
}

// -----

// Out buffers travel packed: their elements must be integers or floats.
func.func @index_outs() {
  // expected-error @+1 {{out buffers need static shapes and integer or float elements, got 'tensor<2xindex>'}}
  %o = catalyst.runtime_call fn("f") () {c_params = []} : () -> () outs(tensor<2xindex>)
  return
}

// -----

// A misspelled key would silently change where the module runs: it is refused, naming the
// keys there are.
// expected-error @+1 {{'catalyst.dispatch' has unknown key 'adress'; the known keys are 'address'}}
module @dev attributes {catalyst.dispatch = {adress = "127.0.0.1:7000"}} {
}

// -----

// expected-error @+1 {{'catalyst.target' has unknown key 'tripel'; the known keys are 'triple', 'cpu', 'features', 'pipeline', 'backend', 'fp'}}
module @dev attributes {catalyst.target = {tripel = "x86_64-unknown-linux-gnu"}} {
}

// -----

// The floating-point policy is one of two words.
// expected-error @+1 {{'catalyst.target' field 'fp' must be "fast" or "strict", not 'exact'}}
module @dev attributes {catalyst.target = {fp = "exact"}} {
}

// -----

// An empty address is not the in-process executor: that one is spelled "local".
// expected-error @+1 {{'catalyst.dispatch' has an empty 'address'; write "host:port", or "local" for the in-process executor}}
module @dev attributes {catalyst.dispatch = {address = ""}} {
}

// -----

// expected-error @+1 {{'catalyst.dispatch' needs an 'address'}}
module @dev attributes {catalyst.dispatch = {}} {
}

// -----

// expected-error @+1 {{'catalyst.object_file' must name an object file, not be empty}}
module @dev attributes {catalyst.object_file = ""} {
}

// -----

// expected-error @+1 {{unknown catalyst attribute 'catalyst.nonblock'; the known ones are 'catalyst.target', 'catalyst.dispatch', 'catalyst.object_file', 'catalyst.nonblocking', 'catalyst.backline_bringup'}}
func.func @f() attributes {catalyst.nonblock} {
  return
}

// -----

// expected-error @+1 {{'catalyst.nonblocking' is only valid on a catalyst.launch_kernel}}
func.func @f() attributes {catalyst.nonblocking} {
  return
}

// -----

// expected-error @+1 {{'catalyst.backline_bringup' is only valid on a host function}}
module @dev attributes {catalyst.backline_bringup} {
}

// -----

// expected-error @+1 {{'catalyst.backline_bringup' is a unit attribute and takes no value}}
func.func @f() attributes {catalyst.backline_bringup = true} {
  return
}

// -----

// A scalar cannot be a kernel argument; the message says what to write instead.
module {
  func.func @main(%x: tensor<4xf32>, %a: f32) -> tensor<4xf32> {
    // expected-error @+1 {{operand 1 has type 'f32' and @dev::@k declares 'f32', but kernels take and return ranked tensors or memrefs; pass a scalar as a rank-0 tensor, 'tensor<f32>'}}
    %y = catalyst.launch_kernel @dev::@k(%x, %a) : (tensor<4xf32>, f32) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  module @dev attributes {catalyst.target = {}} {
    func.func public @k(%x: tensor<4xf32>, %a: f32) -> tensor<4xf32> { return %x : tensor<4xf32> }
  }
}

// -----

func.func @custom_call_bad_dispatch(%x: memref<4xf64>) {
  // expected-error @+1 {{backend_config 'dispatch' must be a string}}
  catalyst.custom_call fn("f") (%x) {backend_config = {dispatch = 7 : i32}, number_original_arg = 1 : i32} : (memref<4xf64>) -> ()
  return
}

// -----

func.func @custom_call_too_many_inputs(%x: memref<4xf64>) {
  // expected-error @+1 {{number_original_arg (2) must be between 0 and the operand count (1)}}
  catalyst.custom_call fn("f") (%x) {number_original_arg = 2 : i32} : (memref<4xf64>) -> ()
  return
}

// -----

func.func @custom_call_buffer_results(%x: memref<4xf64>) -> memref<4xf64> {
  // expected-error @+1 {{returns buffers; after bufferization the outputs are operands after number_original_arg}}
  %y = catalyst.custom_call fn("f") (%x) : (memref<4xf64>) -> memref<4xf64>
  return %y : memref<4xf64>
}

// -----

func.func @custom_call_empty_name(%x: tensor<4xf64>) -> tensor<4xf64> {
  // expected-error @+1 {{needs a non-empty fn name}}
  %y = catalyst.custom_call fn("") (%x) : (tensor<4xf64>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}

// -----

func.func @custom_call_count_on_tensors(%x: tensor<4xf64>, %y: tensor<4xf64>) {
  // expected-error @+1 {{has number_original_arg on tensors; it marks the destination-passing form on buffers}}
  catalyst.custom_call fn("f") (%x, %y) {number_original_arg = 1 : i32} : (tensor<4xf64>, tensor<4xf64>) -> ()
  return
}

// -----

// Catalyst's own target keys are known: `pipeline` lowers the module, `backend` is a label.
module {
  module @dev attributes {catalyst.target = {backend = "accel", pipeline = "courier-lower-to-llvm"}} {
  }
}
