"""Courier from Python: compile MLIR text and call its entries with NumPy arrays.

    import numpy as np
    import courier

    engine = courier.Engine()
    module = engine.compile_file("samples/02-local-kernel/app.mlir")
    print(module.main(np.array([1.0, 2.0, 3.0, 4.0])))  # [3. 5. 7. 9.]

Engine compiles; a Module's entries are its attributes (and `module.entries`), and calling
one runs it, in this process or, with ``isolation="process"``, in a sandboxed worker.
ReloadableModule swaps in new versions while it serves. Failures raise CompileError (with
`diagnostics`), EngineError and InvokeError (with `kind`), all Errors.

`courier.serve.Client` speaks to a courier-serve over its REST API.
"""

from ._courier import (  # noqa: F401 (the package's API)
    CompileError,
    Diagnostic,
    Engine,
    EngineError,
    Entry,
    Error,
    InvokeError,
    Module,
    ReloadableModule,
    TensorSpec,
    __version__,
)

__all__ = [
    "CompileError",
    "Diagnostic",
    "Engine",
    "EngineError",
    "Entry",
    "Error",
    "InvokeError",
    "Module",
    "ReloadableModule",
    "TensorSpec",
    "__version__",
]
