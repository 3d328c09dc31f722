// What the parts of the extension module courier._courier share: NumPy arrays to and from
// the engine's tensors (Arrays.cpp) and the engine's errors as Python exceptions
// (Errors.cpp). The Python API itself is bound in CourierModule.cpp.
#ifndef COURIER_PYTHON_BINDINGS_H
#define COURIER_PYTHON_BINDINGS_H

#include "jit/Engine.h"

#include "llvm/ADT/SmallVector.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace courier::python {

namespace py = pybind11;

/// Imports NumPy and looks up what the conversions use. Called when the module is imported,
/// so that no call does it (it runs Python code, which may let another thread in).
void importNumPy();

/// The NumPy dtype of a Courier dtype's elements: float16 for f16, bool for i1, ...; bf16,
/// which NumPy lacks, travels as uint16 bit patterns.
py::dtype numpyDType(DType dtype);

/// The inputs of one call as the engine reads them: a TensorRef per argument, pointing into
/// an array this holds (the caller's own when it could be read in place, else a converted
/// copy). Made and destroyed with the GIL held; the refs may be read without it.
struct CallInputs {
  llvm::SmallVector<TensorRef, 4> refs;
  llvm::SmallVector<py::object, 4> arrays;
};

/// Reads the arguments of a call of `entry`. A C-contiguous, aligned, native-order NumPy
/// array of a Courier dtype is read in place; another array is copied into that form (a
/// strided view, say), unless its dtype, rank or a static dimension already differs from
/// the input's; an i1 array holding bytes other than 0 and 1 is copied as 0s and 1s;
/// anything else (a Python number, a nested list) is made an array of the dtype the entry's
/// input has, refusing values an integer dtype cannot hold exactly. Whether the dtype, rank
/// and shape fit the entry, and the count of arguments, is the engine's to say, when it is
/// called. Raises InvokeError (invalid_input) for what it cannot read.
void readInputs(const EntrySignature &entry, py::handle args, CallInputs &inputs);

/// The arrays a call writes its results into (out=), as the engine takes them: an OutputRef
/// per result (one without data for a result to be returned) and the array it points into.
struct CallOutputs {
  std::vector<OutputRef> refs;
  llvm::SmallVector<py::object, 4> arrays;
};

/// Reads `out`: None, an array (an entry of one result), or a tuple or list with an array or
/// None per result. Each array must be C-contiguous, aligned, writable and of the result's
/// dtype in native byte order; its shape is the engine's to check. Raises InvokeError
/// (invalid_input) naming the output otherwise.
void readOutputs(const EntrySignature &entry, py::handle out, CallOutputs &outputs);

/// The results of a call as Python returns them: None for none, the array for one, a tuple
/// for several. Each array owns its tensor's bytes: no copy is made. A result written into
/// an array of `outputs` is that array.
py::object resultsToPython(std::vector<Tensor> &&results, const CallOutputs &outputs = {});

/// Adds Error, CompileError, EngineError, InvokeError and Diagnostic to `module`.
void registerErrors(py::module_ &module);

/// What failed, for the exception an error becomes: an EngineError while compiling is an
/// EngineError, while invoking an InvokeError.
enum class Phase { Compile, Invoke };

/// Raises `error` as the Python exception it maps to (CompileError with its diagnostics,
/// EngineError or InvokeError with its kind, Error for anything else) by throwing
/// py::error_already_set. Call with the GIL held.
[[noreturn]] void raise(llvm::Error error, Phase phase);

/// Raises InvokeError of kind `kind` with `message`.
[[noreturn]] void raiseInvokeError(ErrorCode kind, const std::string &message);

} // namespace courier::python

#endif // COURIER_PYTHON_BINDINGS_H
