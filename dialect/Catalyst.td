// The subset of Catalyst's `catalyst` dialect that the dispatch passes consume, in
// Catalyst's own syntax, so IR written for Catalyst's executor pipeline parses unchanged.
#ifndef COURIER_DIALECT_CATALYST_TD
#define COURIER_DIALECT_CATALYST_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Catalyst_Dialect : Dialect {
  let name = "catalyst";
  let cppNamespace = "::courier::dialect::catalyst";
  let summary = "Kernel launches into nested target modules and dispatched library calls.";
  let description = [{
    Host programs reach code that runs elsewhere through three ops: `launch_kernel` calls
    a public function of a nested module that carries a `catalyst.target` attribute, and
    `runtime_call` and `custom_call` call a symbol on an executor. Nested target modules
    carry three discardable attributes:

    - `catalyst.target = {triple = "...", cpu = "...", features = "..."}`: compile this
      module on its own, for `triple` (the host's when absent);
    - `catalyst.dispatch = {address = "host:port" | "local"}`: where it runs;
    - `catalyst.object_file = "path"`: the object `cross-compile-targets` wrote.

    Two unit attributes shape how launches run: `catalyst.nonblocking` on a
    `launch_kernel` of a `() -> ()` entry starts it without waiting (it is awaited before
    the launching function returns), and `catalyst.backline_bringup` on a host function
    makes it the one that ships objects: other host functions then launch without shipping.
    An unknown key or attribute is an error that names the known ones.
  }];
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kTargetAttrName = "catalyst.target";
    static constexpr ::llvm::StringLiteral kDispatchAttrName = "catalyst.dispatch";
    static constexpr ::llvm::StringLiteral kObjectFileAttrName = "catalyst.object_file";
    static constexpr ::llvm::StringLiteral kNonblockingAttrName = "catalyst.nonblocking";
    static constexpr ::llvm::StringLiteral kBacklineBringupAttrName = "catalyst.backline_bringup";
  }];
}

class Catalyst_Op<string mnemonic, list<Trait> traits = []>
    : Op<Catalyst_Dialect, mnemonic, traits>;

def Catalyst_LaunchKernelOp : Catalyst_Op<"launch_kernel", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Calls a public function of a nested target module.";
  let description = [{
    `callee` is a nested symbol reference `@module::@function`. Operands are read; results
    are fresh values (fresh buffers after bufferization). `dispatch-executor-targets`
    rewrites the op into `executor.launch` once its module has an object file. Marked
    `catalyst.nonblocking`, a launch of a `() -> ()` kernel becomes `executor.launch_async`
    instead, awaited before the launching function returns.

    ```mlir
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
    catalyst.launch_kernel @dev::@warm_up() {catalyst.nonblocking} : () -> ()
    ```
  }];
  let arguments = (ins SymbolRefAttr:$callee, Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = [{
    $callee `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
  }];
}

def Catalyst_RuntimeCallOp : Catalyst_Op<"runtime_call", [
    AttrSizedResultSegments,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Calls a C library symbol, possibly on an executor.";
  let description = [{
    Calls the C function `callee`. `c_params` gives the C kind of each parameter in order:
    a scalar (`i8`, `i16`, `i32`, `i64`, `f16`, `f32`, `f64`), `ptr` (a 64-bit address
    passed as `i64` or `index`), or `str`. Scalars and pointers consume the operands in
    order; each `str` consumes the next entry of `c_strings`. `c_result` is the kind of
    the declared result, or `void`. The out buffers, declared after `outs`, are filled by
    the callee and returned as results after the declared result.

    With a `dispatch` attribute the call runs on that executor (an empty address means
    the program's single executor); `lower-runtime-dispatch` rewrites it into
    `executor.call`.

    ```mlir
    %r, %o = catalyst.runtime_call fn("norm") (%x)
        {c_params = ["f64", "str"], c_result = "f64", c_strings = ["l2"],
         dispatch = "127.0.0.1:7000"} : (f64) -> (f64) outs(tensor<4xf32>)
    ```
  }];
  let arguments = (ins StrAttr:$callee, Variadic<AnyType>:$inputs,
                       StrArrayAttr:$c_params,
                       DefaultValuedStrAttr<StrAttr, "void">:$c_result,
                       DefaultValuedAttr<StrArrayAttr, "{}">:$c_strings,
                       OptionalAttr<StrAttr>:$dispatch);
  let results = (outs Variadic<AnyType>:$result, Variadic<AnyRankedTensor>:$outs);
  let assemblyFormat = [{
    `fn` `(` $callee `)` `(` $inputs `)` attr-dict `:` functional-type($inputs, $result)
    (`outs` `(` type($outs)^ `)`)?
  }];
  let hasVerifier = 1;
}

def Catalyst_CustomCallOp : Catalyst_Op<"custom_call", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Calls a library symbol with buffers, possibly on an executor.";
  let description = [{
    Calls `call_target_name` with the inputs. Before bufferization its results are
    tensors; one-shot bufferize turns it into the destination-passing form, in which the
    operands after the first `number_original_arg` are output buffers the callee fills and
    the op has no results. Inputs and outputs travel packed in order, as for
    `executor.call`.

    `backend_config = {dispatch = "host:port"}` runs the call on that executor
    (`dispatch-executor-targets` rewrites it into `executor.call`); `dispatch = ""` binds
    to the program's single executor, the address of its nested target modules.

    ```mlir
    catalyst.custom_call fn("scale") (%x, %out)
        {backend_config = {dispatch = "127.0.0.1:7000"}, number_original_arg = 1 : i32}
        : (memref<4xf64>, memref<4xf64>) -> ()
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$inputs, StrAttr:$call_target_name,
                       OptionalAttr<I32Attr>:$number_original_arg,
                       OptionalAttr<DictionaryAttr>:$backend_config);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = [{
    `fn` `(` $call_target_name `)` `(` $inputs `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The executor address in `backend_config`, or null when the call is not dispatched.
    ::mlir::StringAttr getDispatch();
  }];
}

#endif // COURIER_DIALECT_CATALYST_TD
