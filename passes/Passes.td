// The dispatch passes. Each pass is documented here, once.
#ifndef COURIER_PASSES_TD
#define COURIER_PASSES_TD

include "mlir/Pass/PassBase.td"

def CrossCompileTargets : Pass<"cross-compile-targets", "::mlir::ModuleOp"> {
  let summary = "Compile nested `catalyst.target` modules to object files";
  let description = [{
    Every module nested in the host module that carries `catalyst.target` is cloned,
    bufferized and lowered to LLVM on its own, given a
    `_catalyst_pyface_<fn>(void *results, void *args)` entry for each public function,
    optimised and emitted in-process as a relocatable object for the `triple` of its
    `catalyst.target` (the host's when absent). The object is written to the workspace
    under the SHA-256 of its bytes, so compiling the same module twice writes the same
    file (a file already there is kept only if it holds those bytes), and the module is
    annotated with `catalyst.object_file`. The engine builds the pass with an
    `ObjectSink` instead: each object is handed to it, and the module is annotated with
    the name it returns (the engine keeps objects in its checked cache or in memory).

    `args` points to a struct of pointers, one per input, each to a ranked memref
    descriptor; `results` points to where the entry stores its result descriptor(s), as
    `_mlir_ciface_<fn>` returns them. An unknown triple is a diagnostic, and so is an object
    larger than `max-object-bytes`: it would fill the workspace and be shipped whole. A
    module that fails does not stop the others: every failing module is reported, in the
    order the modules appear.

    Each module is lowered to LLVM IR on the pass's thread (the MLIR context is shared), in
    a context of its own, and its code generation (LLVM's optimisation pipeline and
    instruction selection, most of a module's cost) runs on one of `jobs` threads with a
    target machine of its own, while the next module is lowered. The objects are the same
    bytes whatever `jobs` is. Modules of one triple, CPU and features look their target up
    once, and modules of one lowering pipeline share its pass manager (the default one
    verifies the module once, after its last pass). The engine has the pass name each
    object before it exists and return without waiting for code generation, so that host
    code compiles meanwhile; failures found later are reported at their modules, in order.

    Before a module is lowered, the engine's cache is asked for the object of its
    fingerprint: the SHA-256 of the module as this pass compiles it (in generic form,
    without locations and the `catalyst.*` attributes) with the triple, CPU, features,
    lowering pipeline, opt level and LLVM version. A module whose object the cache holds is
    not compiled again.

    ```mlir
    module @dev attributes {catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {...}
    // becomes
    module @dev attributes {catalyst.object_file = "/w/<sha256>.o",
                            catalyst.target = {triple = "aarch64-unknown-linux-gnu"}} {...}
    ```
  }];
  let options = [
    Option<"workspace", "workspace", "std::string", /*default=*/"\"\"",
           "Directory for the object files (default: $TMPDIR/courier-objects)">,
    Option<"optLevel", "opt-level", "unsigned", /*default=*/"2",
           "LLVM optimisation level for the target objects (0-3)">,
    Option<"maxObjectBytes", "max-object-bytes", "uint64_t", /*default=*/"0",
           "Largest object a target module may compile to (0: no limit); one larger is an "
           "error at the module and is not written">,
    Option<"jobs", "jobs", "unsigned", /*default=*/"0",
           "Threads that generate code for target modules at once, the pass's own among "
           "them (0: one per core)">,
    Option<"localRunsHere", "local-runs-here", "bool", /*default=*/"true",
           "Modules whose dispatch address is \"local\" run in this process: without a "
           "`cpu` of their own, their code is for this machine's CPU and features">
  ];
}

def DispatchExecutorTargets : Pass<"dispatch-executor-targets", "::mlir::ModuleOp"> {
  let summary = "Ship cross-compiled `catalyst.target` modules to an executor";
  let description = [{
    For every nested module carrying `catalyst.dispatch` (or only `catalyst.target`, which
    means `local`) and a `catalyst.object_file` path, the pass:

    1. injects `executor.open` into `setup()` once per unique address and
       `executor.send_binary` once per module, creating a public `setup()` if the host
       has none;
    2. rewrites every host-side `catalyst.launch_kernel` targeting that module into an
       `executor.launch` carrying the session for the module's address, the entry callee
       and the object-file path. Each function that launches opens its sessions and ships
       its objects at its top (the runtime returns the open session, and an object sent
       over a session is not sent again); when a host function carries
       `catalyst.backline_bringup`, only such functions ship;
    3. rewrites a launch marked `catalyst.nonblocking` (of a `() -> ()` kernel, in the
       function's entry block) into `executor.launch_async`, and awaits its token with
       `executor.await` before the function returns;
    4. rewrites every host-side `catalyst.custom_call` whose `backend_config` has a
       `dispatch` into `executor.call` on that executor (`""`: the program's single one);
    5. erases the nested module once its launches are rewritten.

    Session teardown is the runtime's: it closes every open session at process exit, so
    no `executor.close` is emitted. The pass is a no-op when no module is dispatched and
    no custom call is. A dispatched module without an object file is an error.
  }];
  let dependentDialects = ["::courier::dialect::executor::ExecutorDialect", "::mlir::func::FuncDialect"];
}

def LowerRuntimeDispatch : Pass<"lower-runtime-dispatch", "::mlir::ModuleOp"> {
  let summary = "Lower dispatched `catalyst.runtime_call` ops to `executor.call`";
  let description = [{
    Rewrites every `catalyst.runtime_call` carrying a `dispatch` attribute into an
    `executor.call` on that executor, marshalling the operands into the executor's flat
    wire layout:

    - a scalar or `ptr` operand becomes a one-element tensor of its declared width
      (`ptr` is 64 bits wide);
    - a `str` from `c_strings` becomes a 256-byte NUL-padded constant tensor of `i8`;
    - the declared result and each out buffer become results, the result first; the
      declared result is read back from its one-element tensor.

    An empty `dispatch` binds to the program's single executor, taken from the
    `catalyst.dispatch` attributes of the nested target modules; no executor, or more than
    one, is an error. The session is
    opened at the top of the calling function. The pass runs before bufferization, so
    one-shot bufferize turns the `executor.call` into its destination-passing form.
  }];
  let dependentDialects = [
    "::courier::dialect::executor::ExecutorDialect", "::mlir::arith::ArithDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def ConvertExecutorToLLVM : Pass<"convert-executor-to-llvm", "::mlir::ModuleOp"> {
  let summary = "Lower the `executor` dialect to calls into the executor runtime";
  let description = [{
    Replaces each `executor` op with a call of the matching `__catalyst__executor__*`
    entry point (declared once per module, with the signatures of runtime/ExecutorABI.h):

    - `executor.open` -> `session = __catalyst__executor__open(addr)`
    - `executor.send_binary` -> `__catalyst__executor__send_binary(session, path, format)`
    - `executor.launch` -> `__catalyst__executor__launch(session, "_catalyst_pyface_<callee>",
      object, n_in, in_descs, in_ranks, in_elem_sizes, n_out, out_descs, out_ranks,
      out_elem_sizes)`; result descriptors are pre-filled with the static shape
    - `executor.launch_async` / `executor.await` -> `__catalyst__executor__launch_async` /
      `__catalyst__executor__await`
    - `executor.call` -> `__catalyst__executor__call_wrapper(session, sym, args, args_size,
      &out, &out_size)`, copies of the reply into the output buffers, then
      `__catalyst__executor__free_result`
    - `executor.close` -> `__catalyst__executor__close(session)`

    Sessions and tokens are `i64` handles. Ops must be bufferized first. A
    `catalyst.runtime_call` without `dispatch` or a `catalyst.launch_kernel` into a module
    that was not dispatched has no lowering and is reported here.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def VectorizeKernels : Pass<"courier-vectorize", "::mlir::ModuleOp"> {
  let summary = "Tile linalg ops on tensors for caches and registers and vectorize them";
  let description = [{
    For every function, in the host module and in nested target modules, the linalg ops on
    tensors of static shape are tiled and vectorized at the vector width of the CPU the
    function's code is for (`catalyst.target`'s `cpu` and `features`, or this machine's for
    code that runs in this process; 512 bits with AVX-512, 256 with AVX, 128 with SSE or
    NEON). It runs before bufferization, on tensors, so that an accumulator is carried by a
    loop in registers rather than read and written in memory at every step.

    - `linalg.matmul`: tiles of 64 x 256 x 256 for the caches, then 8 x (2 vectors) x 1 for
      the registers; the 8 x 2-vector accumulator is hoisted out of the k loop and the
      contraction lowered to outer products, that is broadcasts and FMAs.
    - Integer `linalg.matmul`s (i8 signed or unsigned, or i16, into i32) on x86: k is taken
      in pairs (A widened to i16 as m x k/2 x 2, B copied as k/2 x n x 2 with each pair of
      rows interleaved, k padded to even), tiled as a float matmul is, and each register-tile
      step adds pmaddwd of a row's pair of A (broadcast as one 32-bit lane) and B's pairs to
      the row's accumulators: vpdpwssd where the CPU has VNNI. Elsewhere they are tiled as a
      float matmul, with multiplies and adds.
    - `linalg.conv_2d_nhwc_hwcf`: tiles of 8 output pixels by 2 vectors of filters, one
      filter tap and input channel a step, decomposed to 1-D convolutions; the accumulator is
      carried across the filter row, column and channel loops and updated with FMAs.
    - Every other linalg op (elementwise `linalg.generic`, `linalg.fill`, reductions,
      transposes, broadcasts): tiles of 1 along every loop but the innermost, which takes
      four vectors; a reduction along the innermost loop keeps four vectors of partial
      results and reduces them across once, after the loop.

    A function in a module whose `catalyst.target` has `fp = "strict"` is left alone, so
    its floating-point operations keep source order (and are not fused into FMAs): the
    results are bit-identical to the scalar lowering. Ops with dynamic shapes get the register
    tiles alone (no cache tiles, no packed copies); whole tiles are vectorized, and the partial
    tiles at the edges of shapes that tiles do not divide stay scalar.

    ```mlir
    %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                       outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
    // becomes, inside loops over tiles of C, a k loop carrying the accumulator:
    %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%v = %init) -> (vector<8x32xf32>) {
      ...
      %row = vector.fma %a_ik, %b_k, %v_i : vector<32xf32>
      ...
    }
    ```
  }];
  let options = [
    Option<"localRunsHere", "local-runs-here", "bool", /*default=*/"true",
           "As cross-compile-targets' option of the same name">
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::transform::TransformDialect", "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

def ExpandStridedCopies : Pass<"courier-expand-strided-copies", "::mlir::ModuleOp"> {
  let summary = "Turn copies of strided buffers into loops";
  let description = [{
    `memref.copy` between buffers that are not both contiguous lowers to a call of
    `memrefCopy` from MLIR's C runner utilities, which neither the engine's JIT nor an
    executor provides. This pass rewrites such copies into `linalg.copy`, which
    `convert-linalg-to-loops` turns into plain loops. Copies between contiguous buffers stay
    (they lower to `memcpy`).

    ```mlir
    memref.copy %view, %buffer : memref<4xf64, strided<[4], offset: 1>> to memref<4xf64>
    // becomes
    linalg.copy ins(%view : memref<4xf64, strided<[4], offset: 1>>) outs(%buffer : memref<4xf64>)
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def LowerTosa : Pass<"courier-lower-tosa", "::mlir::ModuleOp"> {
  let summary = "Lower the functions that hold TOSA ops to linalg on tensors";
  let description = [{
    Part of the first stage of the default lowering (input dialects to linalg on tensors).
    Every function, in the module and in its nested (target) modules, that holds an op of
    the TOSA dialect goes through upstream's `tosa-to-linalg-pipeline` (optional
    decompositions, shape inference, broadcastable operands, `tosa-to-linalg-named`,
    constant folding, `tosa-to-linalg`), then `tosa-to-scf`, `tosa-to-arith` (with
    `tosa.apply_scale`) and `tosa-to-tensor`, with the canonicalizations those passes
    expect. Functions without TOSA ops are left exactly as they are. `tosa-validate` is not
    run: it refuses f64, which TOSA's profiles lack and the lowering computes as it does f32.
    A TOSA op the lowering does not know (`tosa.custom`) fails to legalize, at the op.

    ```mlir
    %m = tosa.matmul %a, %b, %zp, %zp : (tensor<1x17x33xf32>, tensor<1x33x19xf32>,
                                         tensor<1xf32>, tensor<1xf32>) -> tensor<1x17x19xf32>
    // becomes
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x17x19xf32>) -> tensor<1x17x19xf32>
    %m = linalg.batch_matmul ins(%a, %b : tensor<1x17x33xf32>, tensor<1x33x19xf32>)
                             outs(%f : tensor<1x17x19xf32>) -> tensor<1x17x19xf32>
    ```
  }];
}

def DecomposeLinalgOps : Pass<"courier-decompose-linalg-ops", "::mlir::ModuleOp"> {
  let summary = "Decompose linalg ops that neither bufferize nor vectorize as they are";
  let description = [{
    Part of the first stage of the default lowering (input dialects to linalg on tensors),
    for every function of the module and of its nested modules:

    - an op of `AggregatedOpInterface` (`linalg.softmax`) becomes the ops its
      `decomposeOperation` builds: reductions and elementwise `linalg.generic`s, which the
      vectorizer tiles like any other;
    - `linalg.pack` becomes `tensor.pad`, `tensor.expand_shape` and `linalg.transpose`, and
      `linalg.unpack` becomes `linalg.transpose`, `tensor.collapse_shape` and
      `tensor.extract_slice`: neither has a bufferization of its own.

    ```mlir
    %r = linalg.softmax dimension(1) ins(%x : tensor<2x16xf32>) outs(%e : tensor<2x16xf32>)
           -> tensor<2x16xf32>
    // becomes: the maximum of each row, exp(x - max), the sum of each row, the quotient
    %max = linalg.generic {... iterator_types = ["parallel", "reduction"]} ... arith.maxnumf
    %exp = linalg.generic ... arith.subf, math.exp
    %sum = linalg.generic {... iterator_types = ["parallel", "reduction"]} ... arith.addf
    %r = linalg.generic ... arith.divf
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

def ApproximateMath : Pass<"courier-approximate-math", "::mlir::ModuleOp"> {
  let summary = "Compute f32 math functions with polynomial approximations";
  let description = [{
    Runs in the default lowering after vectorization and before `convert-math-to-libm`, so
    that `math.exp` on `vector<16xf32>` becomes sixteen lanes of arithmetic rather than
    sixteen calls of `expf`. On f32 scalars and vectors, `math.exp`, `expm1`, `log`,
    `log2`, `log1p`, `tanh` and `erf` become upstream's polynomial approximations
    (`populateMathPolynomialApproximationPatterns`), each within 4 ulps of the exact result
    (tests/jit/InputDialectsTest.cpp states and checks the bound of each). Other functions
    (`sin` and `cos`, whose approximations lose accuracy on large arguments, `atan` and
    `atan2`, whose are 27 and 39 ulps off, `pow`, ...) and every f64 function stay calls into
    libm. On f16 and bf16, every math
    function is computed in f32 and rounded back. The exact ops the approximations are made
    of, and that have an instruction of their own (`math.fma`, `absf`, `floor`, `ceil`,
    `trunc`, `roundeven`, `round`, `copysign`, `sqrt`), become LLVM's intrinsics on f32 and
    f64 scalars and vectors (an n-D vector as the 1-D vector of its elements):
    `convert-math-to-libm` would call `fmaf` or `floorf` per element.

    ```mlir
    %y = math.exp %x : vector<16xf32>
    // becomes a range reduction, a polynomial and a scaling by a power of two:
    %k = math.floor ... : vector<16xf32>
    %p = math.fma ... : vector<16xf32>
    ...
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::vector::VectorDialect", "::mlir::LLVM::LLVMDialect"];
}

def LowerMath : Pass<"courier-lower-math", "::mlir::ModuleOp"> {
  let summary = "Lower every math op to a libm call, arithmetic or an LLVM intrinsic";
  let description = [{
    Runs in the default lowering after `courier-approximate-math` and `convert-math-to-funcs`
    (which turns `math.ipowi` and `math.fpowi` into functions that multiply by squaring) and
    before `convert-math-to-llvm`. Every math op libm has a function for becomes a call of it
    (`math.sin` on f32: `sinf`; a vector op, one call per element); `math.rsqrt`, which libm
    lacks, becomes `1 / sqrt(x)`; `math.isinf` and `math.isnormal` become compares of
    `|x|`. What is left (`ctlz`, `cttz`, `ctpop`, `absi`, `isnan`, `isfinite`, `sincos`)
    is `convert-math-to-llvm`'s. Unlike upstream's `convert-math-to-libm`, an op without a
    libm function is left as it is rather than refused.

    ```mlir
    %r = math.rsqrt %x : f32
    // becomes
    %s = math.sqrt %x : f32
    %r = arith.divf %one, %s : f32
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
                           "::mlir::math::MathDialect", "::mlir::vector::VectorDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def ParallelizeKernels : Pass<"courier-parallelize-kernels", "::mlir::ModuleOp"> {
  let summary = "Run the outer tile loops of large ops on several threads";
  let description = [{
    Runs after bufferization. `courier-vectorize` marks each loop it makes over a parallel
    dimension of an op (one whose iterations write disjoint parts of the result) with
    `courier.parallel_work`, the op's iteration count. The outermost such loop of an op whose
    count is at least `min-work`, that carries no value and runs at least twice becomes an
    `scf.parallel`, which `convert-scf-to-openmp` turns into an OpenMP parallel loop: its
    iterations are shared by the threads of the process's kernel-thread team (the OpenMP
    runtime, sized by the executor's `--kernel-threads`). Smaller ops stay on the calling
    thread, as do loops nested in a parallel one. The marks are removed.

    ```mlir
    scf.for %i = %c0 to %c1024 step %c64 {  // {courier.parallel_work = 1073741824}
      ...
    }
    // becomes
    scf.parallel (%i) = (%c0) to (%c1024) step (%c64) {
      ...
    }
    ```
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Make parallel loops (false: only remove the marks)">,
    Option<"minWork", "min-work", "uint64_t", /*default=*/"262144",
           "The least iteration count of an op run on several threads">
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def CheckLowered : Pass<"courier-check-lowered", "::mlir::ModuleOp"> {
  let summary = "Report the first op the default lowering did not lower to LLVM";
  let description = [{
    The last pass of the default lowering. An op no pass converted (an op of a dialect the
    pipeline does not handle, or one no lowering takes as it is) would otherwise leave
    `builtin.unrealized_conversion_cast`s behind, and translation would fail far from the
    cause. This pass fails with an error at the first such op, naming it and where it was
    written; where only casts are left, at the first cast, with the types no conversion
    joined.

    ```mlir
    %c = complex.abs %z : complex<f32>
    // error: 'complex.abs' at input.mlir:3:8 could not be lowered to LLVM by the default
    // pipeline
    ```
  }];
}

#endif // COURIER_PASSES_TD
