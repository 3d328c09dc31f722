// The `executor` dialect: sessions with remote (or in-process) executors and the
// operations that ship objects to them, launch their entries and call their symbols.
#ifndef COURIER_DIALECT_EXECUTOR_TD
#define COURIER_DIALECT_EXECUTOR_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Executor_Dialect : Dialect {
  let name = "executor";
  let cppNamespace = "::courier::dialect::executor";
  let summary = "Sessions with executors that run cross-compiled target objects.";
  let description = [{
    An executor runs object files compiled for its target. Host code opens a session with
    an executor by address, ships object files to it, launches their
    `_catalyst_pyface_<fn>` entries with tensor arguments and calls symbols with a flat
    byte layout. The ops lower to calls into the `__catalyst__executor__*` runtime.
  }];
  let useDefaultTypePrinterParser = 1;
}

class Executor_Type<string name, string typeMnemonic> : TypeDef<Executor_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Executor_SessionType : Executor_Type<"Session", "session"> {
  let summary = "An open session with one executor.";
  let description = [{
    What `executor.open` returns and the other ops take. `convert-executor-to-llvm` turns
    it into the runtime's `i64` handle.
  }];
}

def Executor_TokenType : Executor_Type<"Token", "token"> {
  let summary = "A launch in flight, to be awaited.";
  let description = [{
    What `executor.launch_async` returns, awaited once with `executor.await`.
    `convert-executor-to-llvm` turns it into the runtime's `i64` handle.
  }];
}

def Executor_TensorOrMemRef : AnyTypeOf<[AnyRankedTensor, AnyMemRef],
                                        "ranked tensor or memref">;

class Executor_Op<string mnemonic, list<Trait> traits = []>
    : Op<Executor_Dialect, mnemonic, traits>;

def Executor_OpenOp : Executor_Op<"open", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Opens a session with the executor at an address.";
  let description = [{
    Returns a session with the executor at `address` (`"host:port"`, or `"local"` for the
    in-process executor). Opening an address that is already open returns the same
    session.

    ```mlir
    %s = executor.open("127.0.0.1:7000") : !executor.session
    ```
  }];
  let arguments = (ins StrAttr:$address);
  let results = (outs Executor_SessionType:$session);
  let assemblyFormat = "`(` $address `)` attr-dict `:` type($session)";
  let hasVerifier = 1;
}

def Executor_SendBinaryOp : Executor_Op<"send_binary", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Ships an object file to a session's executor.";
  let description = [{
    Makes the object file at `path` available to the executor. Objects are
    content-addressed: one the executor already holds is not uploaded again, and a path
    already sent over the session is not read again, so shipping at the top of every
    launching function costs a lookup. `format` is Catalyst's container tag: `0` (the
    default) is a relocatable ELF object, the only container executors load.

    ```mlir
    executor.send_binary %s("/w/k.o") : !executor.session
    ```
  }];
  let arguments = (ins Executor_SessionType:$session, StrAttr:$path,
                       DefaultValuedAttr<I32Attr, "0">:$format);
  let assemblyFormat = "$session `(` $path `)` attr-dict `:` type($session)";
}

def Executor_LaunchOp : Executor_Op<"launch", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Runs an entry of a shipped object and waits for its results.";
  let description = [{
    Runs `_catalyst_pyface_<callee>` of the object shipped from `object` on the session's
    executor, with the inputs as arguments, and returns its results. Operands and results
    are ranked tensors before bufferization and memrefs after; the results are buffers
    the executor's reply fills.

    ```mlir
    %r = executor.launch %s("scale", "/w/k.o") (%x)
        : !executor.session, (memref<4xf32>) -> memref<4xf32>
    ```
  }];
  let arguments = (ins Executor_SessionType:$session, StrAttr:$callee, StrAttr:$object,
                       Variadic<Executor_TensorOrMemRef>:$inputs);
  let results = (outs Variadic<Executor_TensorOrMemRef>:$results);
  let assemblyFormat = [{
    $session `(` $callee `,` $object `)` `(` $inputs `)` attr-dict `:` type($session) `,`
    functional-type($inputs, $results)
  }];
  let hasVerifier = 1;
}

def Executor_LaunchAsyncOp : Executor_Op<"launch_async", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Starts an entry of a shipped object without waiting.";
  let description = [{
    Starts `_catalyst_pyface_<callee>` (no arguments, no results) of the object shipped
    from `object` and returns a token to await.

    ```mlir
    %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
    ```
  }];
  let arguments = (ins Executor_SessionType:$session, StrAttr:$callee, StrAttr:$object);
  let results = (outs Executor_TokenType:$token);
  let assemblyFormat = [{
    $session `(` $callee `,` $object `)` attr-dict `:` type($session) `->` type($token)
  }];
}

def Executor_AwaitOp : Executor_Op<"await", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Waits for a launch started with executor.launch_async.";
  let description = [{
    Returns once the launch behind `token` has finished; a launch that failed fails the
    calling entry with the executor's message. A token is awaited at most once.

    ```mlir
    executor.await %t : !executor.token
    ```
  }];
  let arguments = (ins Executor_TokenType:$token);
  let assemblyFormat = "$token attr-dict `:` type($token)";
}

def Executor_CallOp : Executor_Op<"call", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Calls a symbol on the executor with a flat byte layout.";
  let description = [{
    Calls `callee` on the session's executor. The first `num_input_args` operands are
    the inputs (all of them when it is absent), packed in order into one byte buffer; the
    reply is the outputs packed in order.

    Before bufferization the outputs are the op's tensor results. One-shot bufferize
    turns the op into its destination-passing form: the output buffers become trailing
    operands, the op has no results, and `num_input_args` marks where the inputs end.

    ```mlir
    %o = executor.call %s("sym") (%in) {num_input_args = 1 : i32}
        : !executor.session, (tensor<8xi8>) -> tensor<4xf32>
    executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32}
        : !executor.session, (memref<8xi8>, memref<4xf32>) -> ()
    ```
  }];
  let arguments = (ins Executor_SessionType:$session, StrAttr:$callee,
                       Variadic<Executor_TensorOrMemRef>:$args,
                       OptionalAttr<I32Attr>:$num_input_args);
  let results = (outs Variadic<Executor_TensorOrMemRef>:$results);
  let assemblyFormat = [{
    $session `(` $callee `)` `(` $args `)` attr-dict `:` type($session) `,`
    functional-type($args, $results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// How many operands are inputs: `num_input_args`, or all of them.
    unsigned getInputCount() {
      return static_cast<unsigned>(getNumInputArgs().value_or(getArgs().size()));
    }
    /// The operands that are inputs (the rest are output buffers).
    ::mlir::OperandRange getInputs() { return getArgs().take_front(getInputCount()); }
    /// The output buffers of the destination-passing form.
    ::mlir::OperandRange getOutputBuffers() { return getArgs().drop_front(getInputCount()); }
  }];
}

def Executor_CloseOp : Executor_Op<"close", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Closes a session.";
  let description = [{
    Ends the session on its executor, which frees what it held for it (its worker process,
    its attached objects). Rarely written: sessions still open when the program ends are
    closed by the runtime.

    ```mlir
    executor.close %s : !executor.session
    ```
  }];
  let arguments = (ins Executor_SessionType:$session);
  let assemblyFormat = "$session attr-dict `:` type($session)";
}

#endif // COURIER_DIALECT_EXECUTOR_TD
