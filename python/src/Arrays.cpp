// NumPy arrays in and out of the engine: inputs read in place when the engine can, results
// handed to NumPy without a copy.
#include "Bindings.h"

#include <cstring>
#include <optional>
#include <vector>

namespace courier::python {

namespace {

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
  std::vector<PyObject *> dtypes; ///< By DType's code (its enum value).
  PyObject *asarray = nullptr;
  PyObject *require = nullptr;
  PyObject *arrayEqual = nullptr;
  PyObject *notEqual = nullptr;

  static const NumPy &get() {
    static const NumPy *numpy = [] {
      auto *n = new NumPy;
      py::module_ np = py::module_::import("numpy");
      for (uint64_t code = 0; std::optional<DType> dtype = dtypeFromCode(code); ++code)
        n->dtypes.push_back(py::dtype(numpyName(*dtype)).release().ptr());
      n->asarray = py::object(np.attr("asarray")).release().ptr();
      n->require = py::object(np.attr("require")).release().ptr();
      n->arrayEqual = py::object(np.attr("array_equal")).release().ptr();
      n->notEqual = py::object(np.attr("not_equal")).release().ptr();
      return n;
    }();
    return *numpy;
  }
};

// The Courier dtype of elements NumPy describes by `kind` and `size`, whatever their byte
// order: the one whose NumPy dtype (numpyName) has them; bf16 when the entry wants bf16 and
// the array holds uint16 bit patterns.
std::optional<DType> courierDType(char kind, int size, const TensorSpec *spec) {
  if (kind == 'u' && size == 2 && spec && spec->dtype == DType::BF16)
    return DType::BF16;
  const std::vector<PyObject *> &dtypes = NumPy::get().dtypes;
  for (size_t code = 0; code < dtypes.size(); ++code) {
    auto *descr = py::detail::array_descriptor_proxy(dtypes[code]);
    if (descr->kind == kind && descr->elsize == size && DType(code) != DType::BF16)
      return DType(code);
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
// number other than a bool for i1. Numbers for a float dtype round to it (for bf16, to the
// nearest, ties to even, as JSON inputs do).
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
  auto naturalArray = py::reinterpret_borrow<py::array>(natural);
  char kind = naturalArray.dtype().kind();
  bool exact = !isFloatDType(want);
  bool fits = exact ? (want == DType::I1 ? kind == 'b' : kind == 'b' || kind == 'i' || kind == 'u')
                    : kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f';
  if (fits && want == DType::BF16) {
    // NumPy has no bf16: its bit patterns, from the values as doubles.
    auto doubles = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(natural);
    if (!doubles)
      throw py::error_already_set();
    std::vector<int64_t> shape(doubles.shape(), doubles.shape() + doubles.ndim());
    Tensor rounded = Tensor::fromDoubles(DType::BF16, shape,
                                         llvm::ArrayRef<double>(doubles.data(), doubles.size()));
    py::array bits(py::reinterpret_borrow<py::dtype>(wantType),
                   std::vector<py::ssize_t>(shape.begin(), shape.end()));
    if (!rounded.bytes.empty())
      std::memcpy(bits.mutable_data(), rounded.bytes.data(), rounded.bytes.size());
    return bits;
  }
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

// Whether an array of `dtype` and the shape `proxy` has can only be refused by the engine:
// then it is passed as it is, not copied first (a broadcast view of a huge shape, say).
bool certainMismatch(const TensorSpec &spec, DType dtype, const py::detail::PyArray_Proxy *proxy) {
  if (dtype != spec.dtype || size_t(proxy->nd) != spec.shape.size())
    return true;
  for (int d = 0; d < proxy->nd; ++d)
    if (spec.shape[d] >= 0 && spec.shape[d] != proxy->dimensions[d])
      return true;
  return false;
}

// Whether a contiguous i1 array holds a byte other than 0 and 1 (a uint8 array viewed as
// bool can): kernels take an i1 byte for its value, so such bytes are made 0 or 1 first.
bool hasNonCanonicalBools(const py::detail::PyArray_Proxy *proxy, size_t bytes) {
  const auto *data = reinterpret_cast<const uint8_t *>(proxy->data);
  uint8_t any = 0;
  for (size_t i = 0; i < bytes; ++i)
    any |= data[i];
  return any > 1;
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

void importNumPy() { NumPy::get(); }

py::dtype numpyDType(DType dtype) {
  return py::reinterpret_borrow<py::dtype>(NumPy::get().dtypes[size_t(dtype)]);
}

void readInputs(const EntrySignature &entry, py::handle args, CallInputs &inputs) {
  auto arguments = py::reinterpret_borrow<py::tuple>(args);
  size_t count = arguments.size();
  inputs.refs.reserve(count);
  inputs.arrays.reserve(count);
  const NumPy &numpy = NumPy::get();
  for (size_t i = 0; i < count; ++i) {
    if (i >= entry.inputs.size()) {
      // More arguments than inputs: the engine refuses the call by their count alone.
      inputs.refs.push_back(TensorRef{});
      continue;
    }
    py::handle value = arguments[i];
    const TensorSpec &spec = entry.inputs[i];
    py::array array = py::isinstance<py::array>(value) ? py::reinterpret_borrow<py::array>(value)
                                                       : fromPython(value, spec.dtype, i, entry);
    auto *proxy = py::detail::array_proxy(array.ptr());
    auto *descr = py::detail::array_descriptor_proxy(proxy->descr);
    std::optional<DType> courier = courierDType(descr->kind, descr->elsize, &spec);
    if (!courier)
      raiseInvokeError(ErrorCode::InvalidInput,
                       describeInput(i, entry) + " must be " + spec.str() +
                           ", got a NumPy array of " + std::string(py::str(array.dtype())) +
                           ", which no Courier dtype is (" + dtypeNames() + ")");
    size_t bytes = dtypeSize(*courier);
    for (int d = 0; d < proxy->nd; ++d)
      bytes *= size_t(proxy->dimensions[d]);
    constexpr int kInPlace = py::array::c_style | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
    bool mismatch = certainMismatch(spec, *courier, proxy);
    if (!mismatch && ((proxy->flags & kInPlace) != kInPlace || !nativeOrder(descr->byteorder))) {
      // A strided view, an unaligned buffer or another byte order: a contiguous copy.
      array = py::reinterpret_steal<py::array>(
          py::reinterpret_borrow<py::object>(numpy.require)(
              array, py::handle(numpy.dtypes[size_t(*courier)]), py::make_tuple("C", "A"))
              .release());
      proxy = py::detail::array_proxy(array.ptr());
    }
    if (!mismatch && *courier == DType::I1 && hasNonCanonicalBools(proxy, bytes)) {
      array = py::reinterpret_steal<py::array>(
          py::reinterpret_borrow<py::object>(numpy.notEqual)(array.attr("view")("uint8"), 0)
              .release());
      proxy = py::detail::array_proxy(array.ptr());
    }
    TensorRef ref{*courier, {}, reinterpret_cast<const uint8_t *>(proxy->data), bytes};
    ref.shape.assign(proxy->dimensions, proxy->dimensions + proxy->nd);
    inputs.refs.push_back(std::move(ref));
    inputs.arrays.push_back(std::move(array));
  }
}

void readOutputs(const EntrySignature &entry, py::handle out, CallOutputs &outputs) {
  if (out.is_none())
    return;
  std::vector<py::handle> given;
  if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
    for (py::handle item : out)
      given.push_back(item);
  } else {
    given.push_back(out);
  }
  if (given.size() != entry.outputs.size())
    raiseInvokeError(ErrorCode::InvalidInput,
                     "out= of '" + entry.name + "' has " + std::to_string(given.size()) +
                         " arrays, the entry has " + std::to_string(entry.outputs.size()) +
                         " results (None for one that is to be returned)");
  for (size_t j = 0; j < given.size(); ++j) {
    py::handle value = given[j];
    const TensorSpec &spec = entry.outputs[j];
    std::string name = "output " + std::to_string(j) + " of '" + entry.name + "'";
    if (value.is_none()) {
      outputs.refs.emplace_back();
      outputs.arrays.push_back(py::none());
      continue;
    }
    if (!py::isinstance<py::array>(value))
      raiseInvokeError(ErrorCode::InvalidInput,
                       name + " must be a NumPy array, got " + pythonTypeName(value));
    auto array = py::reinterpret_borrow<py::array>(value);
    auto *proxy = py::detail::array_proxy(array.ptr());
    auto *descr = py::detail::array_descriptor_proxy(proxy->descr);
    std::optional<DType> courier = courierDType(descr->kind, descr->elsize, &spec);
    if (!courier || *courier != spec.dtype || !nativeOrder(descr->byteorder))
      raiseInvokeError(ErrorCode::InvalidInput, name + " must be an array of " +
                                                    std::string(py::str(numpyDType(spec.dtype))) +
                                                    " (" + spec.str() + "), got one of " +
                                                    std::string(py::str(array.dtype())));
    constexpr int kInPlace = py::array::c_style | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
    if ((proxy->flags & kInPlace) != kInPlace)
      raiseInvokeError(ErrorCode::InvalidInput,
                       name + " must be C-contiguous and aligned: results are written in place");
    if (!(proxy->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_))
      raiseInvokeError(ErrorCode::InvalidInput, name + " is read-only");
    size_t bytes = dtypeSize(*courier);
    for (int d = 0; d < proxy->nd; ++d)
      bytes *= size_t(proxy->dimensions[d]);
    OutputRef ref{*courier, {}, reinterpret_cast<uint8_t *>(proxy->data), bytes};
    ref.shape.assign(proxy->dimensions, proxy->dimensions + proxy->nd);
    outputs.refs.push_back(std::move(ref));
    outputs.arrays.push_back(std::move(array));
  }
}

py::object resultsToPython(std::vector<Tensor> &&results, const CallOutputs &outputs) {
  // A result written to an output is that array.
  auto result = [&](size_t i) -> py::object {
    if (i < outputs.arrays.size() && !outputs.arrays[i].is_none())
      return outputs.arrays[i];
    return toArray(std::move(results[i]));
  };
  if (results.empty())
    return py::none();
  if (results.size() == 1)
    return result(0);
  py::tuple tuple(results.size());
  for (size_t i = 0; i < results.size(); ++i)
    tuple[i] = result(i);
  return tuple;
}

} // namespace courier::python
