// NumPy arrays in and out of the engine: inputs read in place when the engine can, results
// handed to NumPy without a copy.
#include "Bindings.h"

#include <array>
#include <optional>

namespace courier::python {

namespace {

constexpr DType kAllDTypes[] = {DType::F16,  DType::F32,  DType::F64, DType::I1,   DType::I8,
                                DType::I16,  DType::I32,  DType::I64, DType::BF16, DType::UI8,
                                DType::UI16, DType::UI32, DType::UI64};
constexpr size_t kDTypeCount = sizeof(kAllDTypes) / sizeof(kAllDTypes[0]);

const char *numpyName(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "float16";
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::I1:
    return "bool";
  case DType::I8:
    return "int8";
  case DType::I16:
    return "int16";
  case DType::I32:
    return "int32";
  case DType::I64:
    return "int64";
  case DType::BF16:
  case DType::UI16:
    return "uint16";
  case DType::UI8:
    return "uint8";
  case DType::UI32:
    return "uint32";
  case DType::UI64:
    return "uint64";
  }
  return "uint8";
}

// NumPy's objects the conversions use, looked up once (with the GIL held, the first time
// they are needed) and kept for the life of the interpreter.
struct NumPy {
  std::array<PyObject *, kDTypeCount> dtypes{};
  PyObject *asarray = nullptr;
  PyObject *require = nullptr;
  PyObject *arrayEqual = nullptr;

  static const NumPy &get() {
    static const NumPy *numpy = [] {
      auto *n = new NumPy;
      py::module_ np = py::module_::import("numpy");
      for (DType dtype : kAllDTypes)
        n->dtypes[size_t(dtype)] = py::dtype(numpyName(dtype)).release().ptr();
      n->asarray = py::object(np.attr("asarray")).release().ptr();
      n->require = py::object(np.attr("require")).release().ptr();
      n->arrayEqual = py::object(np.attr("array_equal")).release().ptr();
      return n;
    }();
    return *numpy;
  }
};

// The Courier dtype of elements NumPy describes by `kind` and `size`, whatever their byte
// order; bf16 when the entry wants bf16 and the array holds uint16 bit patterns.
std::optional<DType> courierDType(char kind, int size, const TensorSpec *spec) {
  switch (kind) {
  case 'b':
    return DType::I1;
  case 'f':
    switch (size) {
    case 2:
      return DType::F16;
    case 4:
      return DType::F32;
    case 8:
      return DType::F64;
    }
    return std::nullopt;
  case 'i':
    switch (size) {
    case 1:
      return DType::I8;
    case 2:
      return DType::I16;
    case 4:
      return DType::I32;
    case 8:
      return DType::I64;
    }
    return std::nullopt;
  case 'u':
    switch (size) {
    case 1:
      return DType::UI8;
    case 2:
      return spec && spec->dtype == DType::BF16 ? DType::BF16 : DType::UI16;
    case 4:
      return DType::UI32;
    case 8:
      return DType::UI64;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

bool nativeOrder(char order) {
  return order == '=' || order == '|' ||
         (order == '<') == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
}

std::string describeInput(size_t index, const EntrySignature &entry) {
  return "input " + std::to_string(index) + " of '" + entry.name + "'";
}

std::string pythonTypeName(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__"));
}

// An array of the entry's dtype `want` from a Python number or nested sequence, refusing
// what the dtype cannot hold: a float or an out-of-range integer for an integer dtype, a
// number other than a bool for i1.
py::array fromPython(py::handle value, DType want, size_t index, const EntrySignature &entry) {
  const NumPy &numpy = NumPy::get();
  py::handle wantType(numpy.dtypes[size_t(want)]);
  py::object natural, converted;
  try {
    natural = py::reinterpret_borrow<py::object>(numpy.asarray)(value);
  } catch (py::error_already_set &e) {
    raiseInvokeError(ErrorCode::InvalidInput, describeInput(index, entry) + " must be " +
                                                  std::string(dtypeName(want)) + ", got a " +
                                                  pythonTypeName(value) + " NumPy cannot read (" +
                                                  e.what() + ")");
  }
  char kind = py::reinterpret_borrow<py::array>(natural).dtype().kind();
  bool exact = !isFloatDType(want);
  bool fits = exact ? (want == DType::I1 ? kind == 'b' : kind == 'b' || kind == 'i' || kind == 'u')
                    : kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f';
  if (fits) {
    try {
      converted = py::reinterpret_borrow<py::object>(numpy.asarray)(natural, wantType);
      if (exact)
        fits =
            py::reinterpret_borrow<py::object>(numpy.arrayEqual)(converted, natural).cast<bool>();
    } catch (py::error_already_set &) {
      fits = false; // An integer too large for any NumPy integer, say.
    }
  }
  if (!fits)
    raiseInvokeError(ErrorCode::InvalidInput,
                     describeInput(index, entry) + " must be " + std::string(dtypeName(want)) +
                         ", got " + pythonTypeName(value) + " values it cannot hold exactly");
  return py::reinterpret_steal<py::array>(converted.release());
}

void deleteTensor(void *tensor) { delete static_cast<Tensor *>(tensor); }

// Calls happen a million times a second: the arrays of their results are made with NumPy's
// own constructor, the dimensions on the stack, rather than through py::array's vectors.
py::object toArray(Tensor &&tensor) {
  auto *owned = new Tensor(std::move(tensor));
  // Made first, so that whatever fails below frees the tensor through it.
  py::capsule base(owned, deleteTensor);
  llvm::SmallVector<Py_intptr_t, 4> dims(owned->shape.begin(), owned->shape.end());
  auto &api = py::detail::npy_api::get();
  constexpr int kCArray = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ |
                          py::detail::npy_api::NPY_ARRAY_ALIGNED_ |
                          py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  PyObject *descr = NumPy::get().dtypes[size_t(owned->dtype)];
  Py_INCREF(descr); // PyArray_NewFromDescr takes a reference, even when it fails.
  // An empty tensor's bytes have no address; NumPy then allocates its own (empty) buffer.
  auto array = py::reinterpret_steal<py::object>(api.PyArray_NewFromDescr_(
      api.PyArray_Type_, descr, int(dims.size()), dims.data(), nullptr,
      owned->bytes.empty() ? nullptr : owned->bytes.data(), kCArray, nullptr));
  if (!array)
    throw py::error_already_set();
  if (!owned->bytes.empty() && api.PyArray_SetBaseObject_(array.ptr(), base.release().ptr()) != 0)
    throw py::error_already_set(); // NumPy took the capsule's reference all the same.
  return array;
}

} // namespace

py::dtype numpyDType(DType dtype) {
  return py::reinterpret_borrow<py::dtype>(NumPy::get().dtypes[size_t(dtype)]);
}

void readInputs(const EntrySignature &entry, py::handle args, CallInputs &inputs) {
  auto arguments = py::reinterpret_borrow<py::tuple>(args);
  size_t count = arguments.size();
  inputs.refs.reserve(count);
  inputs.arrays.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    py::handle value = arguments[i];
    const TensorSpec *spec = i < entry.inputs.size() ? &entry.inputs[i] : nullptr;
    py::array array;
    if (py::isinstance<py::array>(value)) {
      array = py::reinterpret_borrow<py::array>(value);
    } else if (spec) {
      array = fromPython(value, spec->dtype, i, entry);
    } else {
      // More arguments than inputs: the engine says so; this one need only be an array.
      array = py::reinterpret_steal<py::array>(
          py::reinterpret_borrow<py::object>(NumPy::get().asarray)(value).release());
    }
    auto *proxy = py::detail::array_proxy(array.ptr());
    auto *descr = py::detail::array_descriptor_proxy(proxy->descr);
    std::optional<DType> courier = courierDType(descr->kind, descr->elsize, spec);
    if (!courier)
      raiseInvokeError(ErrorCode::InvalidInput,
                       describeInput(i, entry) + (spec ? " must be " + spec->str() : "") +
                           ", got a NumPy array of " + std::string(py::str(array.dtype())) +
                           ", which no Courier dtype is (" + dtypeNames() + ")");
    constexpr int kInPlace = py::array::c_style | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
    if ((proxy->flags & kInPlace) != kInPlace || !nativeOrder(descr->byteorder)) {
      // A strided view, an unaligned buffer or another byte order: a contiguous copy.
      const NumPy &numpy = NumPy::get();
      array = py::reinterpret_steal<py::array>(
          py::reinterpret_borrow<py::object>(numpy.require)(
              array, py::handle(numpy.dtypes[size_t(*courier)]), py::make_tuple("C", "A"))
              .release());
      proxy = py::detail::array_proxy(array.ptr());
    }
    size_t bytes = dtypeSize(*courier);
    TensorRef ref{*courier, {}, reinterpret_cast<const uint8_t *>(proxy->data), 0};
    for (int d = 0; d < proxy->nd; ++d) {
      ref.shape.push_back(proxy->dimensions[d]);
      bytes *= size_t(proxy->dimensions[d]);
    }
    ref.size = bytes;
    inputs.refs.push_back(std::move(ref));
    inputs.arrays.push_back(std::move(array));
  }
}

py::object resultsToPython(std::vector<Tensor> &&results) {
  if (results.empty())
    return py::none();
  if (results.size() == 1)
    return toArray(std::move(results[0]));
  py::tuple tuple(results.size());
  for (size_t i = 0; i < results.size(); ++i)
    tuple[i] = toArray(std::move(results[i]));
  return tuple;
}

} // namespace courier::python
