// The engine's errors as Python exceptions: the one place the extension converts them.
#include "Bindings.h"

#include "llvm/Support/Error.h"

#include <pybind11/stl.h>

#include <optional>

namespace courier::python {

namespace {

// The exception classes, made once when the module is imported and alive until the
// interpreter ends (never released: they are module attributes, and tearing statics down
// after the interpreter would touch freed objects).
PyObject *errorType = nullptr;
PyObject *compileErrorType = nullptr;
PyObject *engineErrorType = nullptr;
PyObject *invokeErrorType = nullptr;

PyObject *newException(py::module_ &module, const char *name, PyObject *base, const char *doc) {
  std::string qualified = std::string("courier.") + name;
  PyObject *type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type)
    throw py::error_already_set();
  module.add_object(name, py::handle(type));
  return type;
}

// Raises an instance of `type` made from `message`, with `attributes` set on it.
[[noreturn]] void raiseWith(PyObject *type, const std::string &message,
                            std::initializer_list<std::pair<const char *, py::object>> attributes) {
  py::object exception = py::reinterpret_borrow<py::object>(type)(message);
  for (const auto &[name, value] : attributes)
    exception.attr(name) = value;
  PyErr_SetObject(type, exception.ptr());
  throw py::error_already_set();
}

} // namespace

void registerErrors(py::module_ &module) {
  py::class_<Diagnostic>(module, "Diagnostic",
                         "One diagnostic of a failed compile, with its location in the text.")
      .def_readonly("file", &Diagnostic::file)
      .def_readonly("line", &Diagnostic::line)
      .def_readonly("column", &Diagnostic::column)
      .def_readonly("severity", &Diagnostic::severity, "'error', 'warning', 'note' or 'remark'")
      .def_readonly("message", &Diagnostic::message)
      .def_readonly("source_line", &Diagnostic::sourceLine,
                    "The line of the text the location points into, or None")
      .def("render", &Diagnostic::render,
           "As mlir-opt prints it: the location and message, the source line, a caret")
      .def("__str__", &Diagnostic::str)
      // A CompileError crosses processes (multiprocessing) with its diagnostics.
      .def(py::pickle(
          [](const Diagnostic &d) {
            return py::make_tuple(d.file, d.line, d.column, d.severity, d.message, d.sourceLine);
          },
          [](const py::tuple &t) {
            if (t.size() != 6)
              throw py::value_error("a Diagnostic is made of 6 fields");
            Diagnostic d;
            d.file = t[0].cast<std::string>();
            d.line = t[1].cast<unsigned>();
            d.column = t[2].cast<unsigned>();
            d.severity = t[3].cast<std::string>();
            d.message = t[4].cast<std::string>();
            d.sourceLine = t[5].cast<std::optional<std::string>>();
            return d;
          }))
      .def("__repr__", [](const Diagnostic &d) { return "<courier.Diagnostic " + d.str() + ">"; });

  errorType = newException(module, "Error", PyExc_Exception, "Every error Courier raises.");
  compileErrorType = newException(
      module, "CompileError", errorType,
      "The text did not compile. `diagnostics` lists each Diagnostic in order; the message is "
      "all of them as mlir-opt prints them.");
  engineErrorType = newException(
      module, "EngineError", errorType,
      "The engine failed for a reason of kind `kind` ('executor_unavailable', "
      "'compile_crashed', ..., as the REST API names them); `message` says what happened, and "
      "`cause` is the executor's own code behind an executor's failure ('unknown_entry', "
      "'kernel_crashed', ...), None for any other.");
  invokeErrorType = newException(module, "InvokeError", engineErrorType,
                                 "A call failed: bad inputs ('invalid_input'), an unknown entry "
                                 "('unknown_entry'), an executor or worker failure, ...");
}

void raise(llvm::Error error, Phase phase) {
  // The error's parts are taken out first and the exception raised after: nothing is thrown
  // through LLVM's handlers.
  std::optional<CompileError> compileError;
  struct Coded {
    ErrorCode kind;
    std::string message;
    std::optional<ErrorCode> cause;
  };
  std::optional<Coded> coded;
  std::string other;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) { compileError.emplace(e.summary, e.diagnostics); },
      [&](const transport::CodedError &e) {
        coded = Coded{e.kind, e.message, e.cause};
      },
      [&](const llvm::ErrorInfoBase &e) {
        if (!other.empty())
          other += "\n";
        other += e.message();
      });
  if (compileError) {
    std::string message = compileError->diagnostics.empty()
                              ? compileError->summary
                              : renderDiagnostics(compileError->diagnostics);
    // The rendering ends with a line break; an exception's message does not.
    while (!message.empty() && message.back() == '\n')
      message.pop_back();
    raiseWith(compileErrorType, message,
              {{"diagnostics", py::cast(compileError->diagnostics)},
               {"summary", py::cast(compileError->summary)}});
  }
  if (coded) {
    py::object cause = py::none();
    if (coded->cause)
      cause = py::cast(toString(*coded->cause).str());
    raiseWith(phase == Phase::Invoke ? invokeErrorType : engineErrorType, coded->message,
              {{"kind", py::cast(toString(coded->kind).str())},
               {"message", py::cast(coded->message)},
               {"cause", cause}});
  }
  raiseWith(errorType, other, {});
}

void raiseInvokeError(ErrorCode kind, const std::string &message) {
  raiseWith(invokeErrorType, message,
            {{"kind", py::cast(toString(kind).str())}, {"message", py::cast(message)}});
}

} // namespace courier::python
