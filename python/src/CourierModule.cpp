// courier._courier: the engine for Python. Engine compiles MLIR text into Modules whose
// entries take and return NumPy arrays; ReloadableModule swaps versions while it serves;
// failures are the exceptions of Errors.cpp. The GIL is released while the engine compiles
// and while a call runs, so Python threads compile and call at once.
#include "Bindings.h"

#include "Version.h"
#include "transport/Backend.h"

#include <pybind11/stl.h>

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>

namespace courier::python {

namespace {

using namespace pybind11::literals;

/// Runs `drop` without the GIL when it may wait (a module's last reference going: unloading
/// tears the module down, closing its sessions with executors and ending its worker), so
/// that other Python threads run meanwhile; with it while the interpreter finalizes.
template <typename Drop> void dropOutsideGil(bool mayWait, Drop drop) {
  if (mayWait && PyGILState_Check() && !_Py_IsFinalizing()) {
    py::gil_scoped_release release;
    drop();
    return;
  }
  drop();
}

void release(std::shared_ptr<Module> &module) {
  dropOutsideGil(module && module.use_count() == 1, [&] { module.reset(); });
}

/// An entry of a compiled module, callable: module.main(x) or module.entries[0](x).
struct BoundEntry {
  std::shared_ptr<Module> module;
  const EntrySignature *signature; ///< One of module->entries(), which never change.

  BoundEntry(std::shared_ptr<Module> module, const EntrySignature *signature)
      : module(std::move(module)), signature(signature) {}
  BoundEntry(const BoundEntry &) = default;
  BoundEntry(BoundEntry &&) = default;
  ~BoundEntry() { release(module); }
};

/// A compiled module, as Python holds it. Its entries are also attributes of the object.
struct PyModule {
  std::shared_ptr<Module> module;

  explicit PyModule(std::shared_ptr<Module> module) : module(std::move(module)) {}
  PyModule(const PyModule &) = default;
  PyModule(PyModule &&) = default;
  ~PyModule() { release(module); }
};

/// A ReloadableModule and the engine it compiles with, which it must not outlive.
struct PyReloadable {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ReloadableModule> reloadable;

  PyReloadable(std::shared_ptr<Engine> engine, std::unique_ptr<ReloadableModule> reloadable)
      : engine(std::move(engine)), reloadable(std::move(reloadable)) {}
  PyReloadable(PyReloadable &&) = default;
  ~PyReloadable() {
    dropOutsideGil(reloadable != nullptr, [&] { reloadable.reset(); });
  }
};

/// A number of seconds from Python: None, or anything float() takes (an int, a float).
std::optional<double> seconds(py::handle value, const char *what) {
  if (value.is_none())
    return std::nullopt;
  double number = PyFloat_AsDouble(value.ptr());
  if (number == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + " must be a number of seconds or None, got " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  }
  return number;
}

/// A path from Python: a str or an os.PathLike.
std::string fsPath(py::handle value) {
  return py::module_::import("os").attr("fspath")(value).cast<std::string>(); // str or bytes
}

std::optional<std::string> optionalPath(py::handle value) {
  if (value.is_none())
    return std::nullopt;
  return fsPath(value);
}

/// Seconds (None for the default) as the engine's milliseconds; `what` names the setting.
std::optional<std::chrono::milliseconds> toMilliseconds(std::optional<double> seconds,
                                                        const char *what) {
  if (!seconds)
    return std::nullopt;
  if (!std::isfinite(*seconds) || *seconds < 0 || *seconds > 1e9)
    throw py::value_error(std::string(what) + " must be a number of seconds from 0 to 1e9, got " +
                          std::string(py::str(py::float_(*seconds))));
  // Up, so that a positive timeout under a millisecond is one, not none (0 is no limit).
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

/// What `work` (returning an llvm::Expected) makes, run without the GIL; its error raised
/// as the exception of `phase`, with the GIL back.
template <typename Work> auto withoutGil(Phase phase, Work work) {
  std::optional<decltype(work())> made;
  {
    py::gil_scoped_release release;
    made.emplace(work());
  }
  if (!*made)
    raise(made->takeError(), phase);
  return std::move(**made);
}

py::object call(const Module &module, const EntrySignature &entry, py::handle args,
                InvokeOptions options, py::handle out = py::none()) {
  CallInputs inputs;
  readInputs(entry, args, inputs);
  CallOutputs outputs;
  readOutputs(entry, out, outputs);
  options.outputs = std::move(outputs.refs);
  return resultsToPython(withoutGil(Phase::Invoke,
                                    [&] {
                                      return module.invoke(entry.name,
                                                           llvm::ArrayRef<TensorRef>(inputs.refs),
                                                           options);
                                    }),
                         outputs);
}

/// Entry, whose calls come straight to callEntry (its tp_call slot): a call is a few
/// microseconds, and pybind11's dispatch of a __call__ method would be a good part of them.
PyTypeObject *entryType = nullptr;

PyObject *callEntry(PyObject *self, PyObject *args, PyObject *kwargs) {
  try {
    // out= is the one keyword: results written into the caller's arrays.
    PyObject *out = kwargs ? PyDict_GetItemString(kwargs, "out") : nullptr;
    if (kwargs && PyDict_Size(kwargs) != (out ? 1 : 0)) {
      PyErr_SetString(PyExc_TypeError,
                      "an entry takes its inputs by position and out=; for a timeout, "
                      "call module.invoke(name, *inputs, timeout=seconds)");
      return nullptr;
    }
    // Entry's instances hold their BoundEntry in place (a class without bases of its own).
    // Entry is final, so `self` is one; made by Entry.__new__ alone it holds nothing.
    py::detail::value_and_holder held =
        reinterpret_cast<py::detail::instance *>(self)->get_value_and_holder();
    if (!held.holder_constructed()) {
      PyErr_SetString(PyExc_TypeError, "this Entry belongs to no module: entries come from "
                                       "Module.entries or a module's attributes");
      return nullptr;
    }
    auto *entry = static_cast<const BoundEntry *>(held.value_ptr());
    return call(*entry->module, *entry->signature, args, {}, out ? py::handle(out) : py::none())
        .release()
        .ptr();
  } catch (py::error_already_set &e) {
    e.restore();
  } catch (py::builtin_exception &e) {
    e.set_error();
  } catch (const std::bad_alloc &) {
    PyErr_NoMemory();
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

py::object invokeByName(const std::shared_ptr<Module> &module, const std::string &name,
                        py::args args, py::handle timeout, py::handle out) {
  InvokeOptions options;
  options.timeout = toMilliseconds(seconds(timeout, "timeout"), "timeout");
  const EntrySignature *entry = module->findEntry(name);
  if (!entry) {
    // The engine's own refusal, which names the entries there are.
    llvm::Expected<std::vector<Tensor>> refused =
        module->invoke(name, llvm::ArrayRef<TensorRef>{}, options);
    if (!refused)
      raise(refused.takeError(), Phase::Invoke);
    raiseInvokeError(ErrorCode::UnknownEntry,
                     "module '" + module->name() + "' has no entry '" + name + "'");
  }
  return call(*module, *entry, args, options, out);
}

py::object wrapModule(std::shared_ptr<Module> module) {
  py::object object = py::cast(PyModule{module});
  py::handle type = py::type::handle_of(object);
  // Each entry is an attribute, unless its name is taken by one of Module's own (an entry
  // named "invoke" is called through invoke("invoke", ...)).
  for (const EntrySignature &entry : module->entries())
    if (!py::hasattr(type, entry.name.c_str()))
      py::setattr(object, entry.name.c_str(), py::cast(BoundEntry{module, &entry}));
  return object;
}

std::string signatureText(const EntrySignature &entry) {
  auto join = [](const std::vector<TensorSpec> &specs) {
    std::string text;
    for (const TensorSpec &spec : specs)
      text += (text.empty() ? "" : ", ") + spec.str();
    return text;
  };
  std::string outputs = join(entry.outputs);
  return entry.name + "(" + join(entry.inputs) + ") -> " +
         (entry.outputs.size() == 1 ? outputs : "(" + outputs + ")");
}

py::dict phaseTimes(const PhaseTimes &t) {
  return py::dict("parse"_a = t.parse, "passes"_a = t.passes, "cross_compile"_a = t.crossCompile,
                  "link"_a = t.link, "ship"_a = t.ship, "run"_a = t.run, "cache_hit"_a = t.cacheHit,
                  "targets_compiled"_a = t.targetsCompiled, "targets_reused"_a = t.targetsReused,
                  "host_reused"_a = t.hostReused);
}

/// courier-module-worker of the build or install tree this extension belongs to: in a build
/// tree build/bin/, two levels above build/python/courier/; installed, the tree's bin/
/// (COURIER_PYTHON_TO_BIN from the package's directory), wherever the tree was moved. Empty
/// when neither is there: the engine then looks where it was configured to be installed.
/// The engine's own default, beside the executable, would look beside the interpreter.
std::string workerOfThisTree() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&workerOfThisTree), &info) || !info.dli_fname)
    return "";
  llvm::StringRef directory = llvm::sys::path::parent_path(info.dli_fname);
  for (llvm::StringRef toBin :
       {llvm::StringRef("../../bin"), llvm::StringRef(COURIER_PYTHON_TO_BIN)}) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(path, toBin, "courier-module-worker");
    if (llvm::sys::fs::can_execute(path))
      return std::string(path);
  }
  return "";
}

Isolation parseIsolation(const std::string &name) {
  if (name == "in_process")
    return Isolation::InProcess;
  if (name == "process")
    return Isolation::Process;
  throw py::value_error("isolation must be 'in_process' or 'process', got '" + name + "'");
}

std::shared_ptr<Engine>
makeEngine(unsigned optLevel, unsigned jobs, py::object cacheDir, bool diskCache,
           std::optional<std::string> executor, const std::string &isolation,
           std::optional<std::string> authToken, double connectTimeout, double requestTimeout,
           std::optional<double> compileTimeout, std::optional<double> invokeTimeout,
           std::vector<std::string> plugins, std::string extraPipeline, unsigned warmWorkers,
           unsigned workersPerModule, uint64_t workerMemoryMiB, bool workerSandbox,
           py::object workerProgram, unsigned kernelThreads, const std::string &sharedMemory) {
  if (optLevel > 3)
    throw py::value_error("opt_level must be 0 to 3, got " + std::to_string(optLevel));
  if (jobs > EngineOptions::kMaxJobs)
    throw py::value_error("jobs must be 0 (one per core) to " +
                          std::to_string(EngineOptions::kMaxJobs) + ", got " +
                          std::to_string(jobs));
  EngineOptions options;
  options.optLevel = optLevel;
  options.jobs = jobs;
  if (kernelThreads > 1024)
    throw py::value_error("kernel_threads must be 0 (the CPUs this process may run on) to 1024, "
                          "got " +
                          std::to_string(kernelThreads));
  options.kernelThreads = kernelThreads;
  llvm::Expected<transport::SharedMemory> channel = transport::parseSharedMemory(sharedMemory);
  if (!channel) {
    llvm::consumeError(channel.takeError());
    throw py::value_error("shared_memory must be 'auto', 'on' or 'off', got '" + sharedMemory +
                          "'");
  }
  options.executors.sharedMemory = *channel;
  options.cacheDir = optionalPath(cacheDir).value_or("");
  options.diskCache = diskCache;
  options.executorOverride = executor.value_or("");
  options.isolation = parseIsolation(isolation);
  options.executors.bearerToken = authToken.value_or("");
  options.executors.connectTimeout = *toMilliseconds(connectTimeout, "connect_timeout");
  options.executors.requestTimeout = *toMilliseconds(requestTimeout, "request_timeout");
  options.compileTimeout =
      toMilliseconds(compileTimeout, "compile_timeout").value_or(std::chrono::milliseconds(0));
  options.invokeTimeout =
      toMilliseconds(invokeTimeout, "invoke_timeout").value_or(std::chrono::milliseconds(0));
  options.executors.plugins = std::move(plugins);
  options.extraPipeline = std::move(extraPipeline);
  if (workersPerModule < 1 || workersPerModule > EngineOptions::kMaxWorkersPerModule)
    throw py::value_error("workers_per_module must be 1 to " +
                          std::to_string(EngineOptions::kMaxWorkersPerModule) + ", got " +
                          std::to_string(workersPerModule));
  options.warmWorkers = warmWorkers;
  options.workersPerModule = workersPerModule;
  options.workerMemoryMiB = workerMemoryMiB;
  options.workerSandbox = workerSandbox;
  options.workerProgram = optionalPath(workerProgram).value_or("");
  const char *workerFromEnvironment = std::getenv("COURIER_MODULE_WORKER");
  if (options.workerProgram.empty() && (!workerFromEnvironment || !*workerFromEnvironment))
    options.workerProgram = workerOfThisTree();
  return std::make_shared<Engine>(std::move(options));
}

py::object compileText(Engine &engine, const std::string &text, const std::string &name,
                       py::handle timeout, std::optional<std::string> sourceName) {
  CompileOptions options;
  options.timeout = toMilliseconds(seconds(timeout, "timeout"), "timeout");
  options.sourceName = sourceName.value_or("");
  return wrapModule(
      withoutGil(Phase::Compile, [&] { return engine.compile(text, name, options); }));
}

py::object compileFile(Engine &engine, py::handle pathObject, const std::string &name,
                       py::handle timeout) {
  std::string path = fsPath(pathObject);
  CompileOptions options;
  options.timeout = toMilliseconds(seconds(timeout, "timeout"), "timeout");
  return wrapModule(
      withoutGil(Phase::Compile, [&] { return engine.compileFile(path, name, options); }));
}

std::shared_ptr<Module> currentOrRaise(const PyReloadable &self) {
  std::shared_ptr<Module> module = self.reloadable->current();
  if (!module)
    raiseInvokeError(ErrorCode::UnknownModule,
                     "module '" + self.reloadable->name() + "' has no version loaded");
  return module;
}

/// Seconds `iterations` calls of `entry` take from C++ (Module::invoke with the inputs read
/// once, the GIL released), for the benchmark that compares a call from Python with one
/// from C++ in the same process.
double timeInvoke(const BoundEntry &entry, py::tuple args, uint64_t iterations) {
  CallInputs inputs;
  readInputs(*entry.signature, args, inputs);
  py::gil_scoped_release release;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    llvm::Expected<std::vector<Tensor>> results =
        entry.module->invoke(entry.signature->name, llvm::ArrayRef<TensorRef>(inputs.refs));
    if (!results) {
      std::string message = llvm::toString(results.takeError());
      py::gil_scoped_acquire acquire;
      raiseInvokeError(ErrorCode::Internal, message);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// TensorSpec, and the entries a Module binds.
void defineEntries(py::module_ &m) {
  py::class_<TensorSpec>(m, "TensorSpec", "The type of one input or result of an entry.")
      .def_property_readonly(
          "dtype", [](const TensorSpec &s) { return dtypeName(s.dtype).str(); },
          "'f32', 'i64', 'bf16', ...: MLIR's name of the element type")
      .def_property_readonly(
          "shape", [](const TensorSpec &s) { return py::tuple(py::cast(s.shape)); },
          "The dimensions, -1 for a dynamic one; () for a scalar")
      .def_readonly("is_scalar", &TensorSpec::isScalar)
      .def_property_readonly(
          "numpy_dtype", [](const TensorSpec &s) { return numpyDType(s.dtype); },
          "The NumPy dtype arrays of it have (uint16 bit patterns for bf16)")
      .def("__str__", &TensorSpec::str)
      .def("__repr__", [](const TensorSpec &s) { return "<courier.TensorSpec " + s.str() + ">"; });

  py::class_<BoundEntry> entryClass(
      m, "Entry", py::is_final(),
      "A public function of a module. Calling it invokes the function: one NumPy array (or "
      "Python number, or nested list) per input; it returns None, the one result, or a tuple "
      "of the results.");
  entryClass.def_property_readonly("name", [](const BoundEntry &e) { return e.signature->name; })
      .def_property_readonly("inputs", [](const BoundEntry &e) { return e.signature->inputs; })
      .def_property_readonly("outputs", [](const BoundEntry &e) { return e.signature->outputs; })
      .def("__repr__", [](const BoundEntry &e) {
        return "<courier.Entry " + signatureText(*e.signature) + ">";
      });

  // __call__ for those who look for it (callable() sees the slot either way); calls come to
  // the slot, set after it, since setting the attribute sets the slot too.
  entryClass.def(
      "__call__",
      [](const BoundEntry &e, py::args args, py::handle out) {
        return call(*e.module, *e.signature, args, {}, out);
      },
      py::kw_only(), "out"_a = py::none());
  entryType = reinterpret_cast<PyTypeObject *>(entryClass.ptr());
  entryType->tp_call = &callEntry;
  PyType_Modified(entryType);
}

/// Module: a compiled module, its entries as attributes.
void defineModule(py::module_ &m) {
  py::class_<PyModule>(m, "Module", py::dynamic_attr(),
                       "A compiled, linked module. Thread-safe: any number of threads may call "
                       "it at once. Each entry is an attribute: module.main(x).")
      .def_property_readonly("name", [](const PyModule &self) { return self.module->name(); })
      .def_property_readonly(
          "entries",
          [](const PyModule &self) {
            py::list entries;
            for (const EntrySignature &entry : self.module->entries())
              entries.append(BoundEntry{self.module, &entry});
            return entries;
          },
          "Every entry, in the order the module declares them")
      .def(
          "invoke",
          [](const PyModule &self, const std::string &entry, py::args args, py::handle timeout,
             py::handle out) {
            return invokeByName(self.module, entry, std::move(args), timeout, out);
          },
          "entry"_a, py::kw_only(), "timeout"_a = py::none(), "out"_a = py::none(),
          "Invokes `entry` with the arrays given; `timeout` (seconds) ends an isolated "
          "module's call and its worker; results are written into `out` (an array, or a "
          "tuple with an array or None per result), which is returned in their place")
      .def_property_readonly(
          "compile_times",
          [](const PyModule &self) { return phaseTimes(self.module->compileTimes()); },
          "Milliseconds of each compile phase, and what came from the caches")
      .def_property_readonly(
          "worker",
          [](const PyModule &self) -> py::object {
            WorkerState state = self.module->workerState();
            if (!state.isolated)
              return py::none();
            return py::dict("pid"_a = state.pid ? py::object(py::int_(state.pid)) : py::none(),
                            "restarts"_a = state.restarts, "crashes"_a = state.crashes,
                            "last_death"_a = state.lastDeath);
          },
          "An isolated module's worker: pid (None while none runs), restarts, crashes, "
          "last_death; None in process")
      .def(
          "terminate", [](const PyModule &self) { self.module->terminate(); },
          "Ends an isolated module's worker; later calls fail with kind 'unknown_module'")
      .def("__repr__", [](const PyModule &self) {
        std::string entries;
        for (const EntrySignature &entry : self.module->entries())
          entries += (entries.empty() ? "" : ", ") + entry.name;
        return "<courier.Module '" + self.module->name() + "' entries: " + entries + ">";
      });
}

/// Engine: compiles MLIR text into Modules.
void defineEngine(py::module_ &m) {
  py::class_<Engine, std::shared_ptr<Engine>>(
      m, "Engine",
      "Compiles MLIR text into Modules. Thread-safe; modules may outlive their engine.")
      .def(py::init(&makeEngine), py::kw_only(), "opt_level"_a = 2, "jobs"_a = 0,
           "cache_dir"_a = py::none(), "disk_cache"_a = true, "executor"_a = py::none(),
           "isolation"_a = "in_process", "auth_token"_a = py::none(), "connect_timeout"_a = 2.0,
           "request_timeout"_a = 60.0, "compile_timeout"_a = py::none(),
           "invoke_timeout"_a = py::none(), "plugins"_a = std::vector<std::string>{},
           "extra_pipeline"_a = "", "warm_workers"_a = 1, "workers_per_module"_a = 1,
           "worker_memory_mib"_a = 0, "worker_sandbox"_a = true, "worker_program"_a = py::none(),
           "kernel_threads"_a = 0, "shared_memory"_a = "auto")
      .def("compile", &compileText, "text"_a, "name"_a = "module", py::kw_only(),
           "timeout"_a = py::none(), "source_name"_a = py::none(),
           "Compiles MLIR text; `name` names the module and, without `source_name`, the text "
           "in diagnostics. Raises CompileError with the diagnostics.")
      .def("compile_file", &compileFile, "path"_a, "name"_a = "", py::kw_only(),
           "timeout"_a = py::none(),
           "Compiles the file at `path`; the module is named `name`, or the file's stem")
      .def_property_readonly("opt_level", [](const Engine &e) { return e.options().optLevel; })
      .def_property_readonly("isolation", [](const Engine &e) {
        return e.options().isolation == Isolation::Process ? "process" : "in_process";
      });
}

/// ReloadableModule: a module and its source file, reloaded as it changes.
void defineReloadable(py::module_ &m) {
  py::class_<PyReloadable>(m, "ReloadableModule",
                           "A named module that can be replaced while it serves calls: a new "
                           "version is swapped in only if it compiles; calls already running "
                           "finish on the version they started on.")
      .def(py::init([](std::shared_ptr<Engine> engine, std::string name) {
             auto reloadable = std::make_unique<ReloadableModule>(*engine, std::move(name));
             return PyReloadable{std::move(engine), std::move(reloadable)};
           }),
           "engine"_a, "name"_a)
      .def(
          "reload",
          [](PyReloadable &self, const std::string &text, const std::string &sourceName) {
            return withoutGil(Phase::Compile,
                              [&] { return self.reloadable->reload(text, sourceName); });
          },
          "text"_a, "source_name"_a = "",
          "Compiles `text` and makes it the current version; returns the version number. "
          "Raises CompileError, and the current version keeps serving.")
      .def(
          "reload_file",
          [](PyReloadable &self, py::handle pathObject) {
            std::string path = fsPath(pathObject);
            return withoutGil(Phase::Compile, [&] { return self.reloadable->reloadFile(path); });
          },
          "path"_a)
      .def_property_readonly("name",
                             [](const PyReloadable &self) { return self.reloadable->name(); })
      .def_property_readonly(
          "version", [](const PyReloadable &self) { return self.reloadable->version(); },
          "The current version's number; 0 before the first load")
      .def_property_readonly(
          "current",
          [](const PyReloadable &self) -> py::object {
            std::shared_ptr<Module> module = self.reloadable->current();
            return module ? wrapModule(std::move(module)) : py::none();
          },
          "The current version as a Module, or None before the first load")
      .def(
          "invoke",
          [](const PyReloadable &self, const std::string &entry, py::args args, py::handle timeout,
             py::handle out) {
            return invokeByName(currentOrRaise(self), entry, std::move(args), timeout, out);
          },
          "entry"_a, py::kw_only(), "timeout"_a = py::none(), "out"_a = py::none(),
          "Invokes `entry` of the current version, which stays loaded until the call returns")
      .def("__getattr__", [](const PyReloadable &self, const std::string &name) -> py::object {
        std::shared_ptr<Module> module = self.reloadable->current();
        const EntrySignature *entry = module ? module->findEntry(name) : nullptr;
        if (!entry)
          throw py::attribute_error("'ReloadableModule' object has no attribute '" + name + "'" +
                                    (module ? "" : " (no version is loaded)"));
        return py::cast(BoundEntry{std::move(module), entry});
      });
}

} // namespace

} // namespace courier::python

PYBIND11_MODULE(_courier, m) {
  using namespace courier;
  using namespace courier::python;
  m.doc() = "Courier's engine: MLIR text in, modules whose entries take NumPy arrays out.";
  m.attr("__version__") = COURIER_VERSION;
  importNumPy();
  registerErrors(m);

  defineEntries(m);
  defineModule(m);
  defineEngine(m);
  defineReloadable(m);
  m.def("_time_invoke", &timeInvoke, "entry"_a, "args"_a, "iterations"_a);
}
