// The subset of Catalyst's `catalyst` dialect that the dispatch passes consume, in
// Catalyst's own syntax, so IR written for Catalyst's executor pipeline parses unchanged.
#ifndef COURIER_DIALECT_CATALYST_TD
#define COURIER_DIALECT_CATALYST_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Catalyst_Dialect : Dialect {
  let name = "catalyst";
  let cppNamespace = "::courier::catalyst";
  let summary = "Kernel launches into nested target modules and dispatched library calls.";
  let description = [{
    Host programs reach code that runs elsewhere through two ops: `launch_kernel` calls a
    public function of a nested module that carries a `catalyst.target` attribute, and
    `runtime_call` calls a C symbol on an executor. Nested target modules carry three
    discardable attributes:

    - `catalyst.target = {triple = "..."}`: compile this module on its own, for `triple`
      (the host's when absent);
    - `catalyst.dispatch = {address = "host:port" | "local"}`: where it runs;
    - `catalyst.object_file = "path"`: the object `cross-compile-targets` wrote.
  }];
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kTargetAttrName = "catalyst.target";
    static constexpr ::llvm::StringLiteral kDispatchAttrName = "catalyst.dispatch";
    static constexpr ::llvm::StringLiteral kObjectFileAttrName = "catalyst.object_file";
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
    rewrites the op into `executor.launch` once its module has an object file.

    ```mlir
    %y = catalyst.launch_kernel @dev::@scale(%x) : (tensor<4xf64>) -> tensor<4xf64>
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

#endif // COURIER_DIALECT_CATALYST_TD
