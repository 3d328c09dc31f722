// Element types, owning tensors and the printable forms of signatures and diagnostics.
#include "jit/Engine.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace courier {

namespace {
struct DTypeInfo {
  DType dtype;
  llvm::StringLiteral name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F16, "f16", 2}, {DType::F32, "f32", 4}, {DType::F64, "f64", 8}, {DType::I1, "i1", 1},
    {DType::I8, "i8", 1},   {DType::I16, "i16", 2}, {DType::I32, "i32", 4}, {DType::I64, "i64", 8},
};

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}
template <typename T> void store(uint8_t *p, T value) { std::memcpy(p, &value, sizeof(T)); }
} // namespace

llvm::StringRef dtypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

size_t dtypeSize(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }

std::optional<DType> parseDType(llvm::StringRef name) {
  for (const DTypeInfo &info : kDTypes)
    if (info.name == name)
      return info.dtype;
  return std::nullopt;
}

int64_t Tensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Tensor Tensor::fromDoubles(DType dtype, std::vector<int64_t> shape, llvm::ArrayRef<double> values) {
  Tensor t{dtype, std::move(shape), {}};
  size_t size = dtypeSize(dtype);
  t.bytes.resize(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t *p = t.bytes.data() + i * size;
    double v = values[i];
    switch (dtype) {
    case DType::F16: {
      bool lost;
      llvm::APFloat f(v);
      f.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven, &lost);
      store<uint16_t>(p, static_cast<uint16_t>(f.bitcastToAPInt().getZExtValue()));
      break;
    }
    case DType::F32:
      store<float>(p, static_cast<float>(v));
      break;
    case DType::F64:
      store<double>(p, v);
      break;
    case DType::I1:
      store<uint8_t>(p, v != 0);
      break;
    case DType::I8:
      store<int8_t>(p, static_cast<int8_t>(v));
      break;
    case DType::I16:
      store<int16_t>(p, static_cast<int16_t>(v));
      break;
    case DType::I32:
      store<int32_t>(p, static_cast<int32_t>(v));
      break;
    case DType::I64:
      store<int64_t>(p, static_cast<int64_t>(v));
      break;
    }
  }
  return t;
}

double Tensor::at(int64_t i) const {
  const uint8_t *p = bytes.data() + i * dtypeSize(dtype);
  switch (dtype) {
  case DType::F16: {
    llvm::APFloat f(llvm::APFloat::IEEEhalf(), llvm::APInt(16, load<uint16_t>(p)));
    return f.convertToFloat();
  }
  case DType::F32:
    return load<float>(p);
  case DType::F64:
    return load<double>(p);
  case DType::I1:
    return load<uint8_t>(p) & 1;
  case DType::I8:
    return load<int8_t>(p);
  case DType::I16:
    return load<int16_t>(p);
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
    return static_cast<double>(load<int64_t>(p));
  }
  return 0;
}

std::string TensorSpec::str() const {
  if (isScalar)
    return dtypeName(dtype).str();
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return text + dtypeName(dtype).str() + ">";
}

std::string Diagnostic::str() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (!file.empty())
    os << file << ":" << line << ":" << column << ": ";
  os << severity << ": " << message;
  return text;
}

char CompileError::ID = 0;

void CompileError::log(llvm::raw_ostream &os) const {
  os << summary;
  for (const Diagnostic &d : diagnostics)
    os << "\n" << d.str();
}

std::error_code CompileError::convertToErrorCode() const { return llvm::inconvertibleErrorCode(); }

} // namespace courier

namespace courier {

namespace {

/// Flattens nested arrays into `data`, recording the shape of the first path and checking
/// every other path against it.
llvm::Error flatten(const llvm::json::Value &value, size_t depth, std::vector<int64_t> &shape,
                    std::vector<const llvm::json::Value *> &data) {
  if (const llvm::json::Array *array = value.getAsArray()) {
    if (depth == shape.size())
      shape.push_back(static_cast<int64_t>(array->size()));
    else if (depth > shape.size() || shape[depth] != static_cast<int64_t>(array->size()))
      return llvm::createStringError("ragged nested array: dimension %zu has sizes %lld and %zu",
                                     depth, static_cast<long long>(shape[depth]), array->size());
    for (const llvm::json::Value &element : *array)
      if (llvm::Error error = flatten(element, depth + 1, shape, data))
        return error;
    return llvm::Error::success();
  }
  if (depth != shape.size())
    return llvm::createStringError("ragged nested array: a number at depth %zu, arrays at depth "
                                   "%zu elsewhere",
                                   depth, shape.size());
  if (value.getAsBoolean() || value.getAsNumber()) {
    data.push_back(&value);
    return llvm::Error::success();
  }
  return llvm::createStringError("expected a number, got %s",
                                 llvm::formatv("{0}", value).str().c_str());
}

} // namespace

llvm::Expected<Tensor> tensorFromJSON(const llvm::json::Value &value, const TensorSpec &spec) {
  DType dtype = spec.dtype;
  std::vector<int64_t> shape;
  std::vector<const llvm::json::Value *> data;
  if (const llvm::json::Object *object = value.getAsObject()) {
    if (std::optional<llvm::StringRef> name = object->getString("dtype")) {
      std::optional<DType> parsed = parseDType(*name);
      if (!parsed)
        return llvm::createStringError("unknown dtype '%s' (expected f16, f32, f64, i1, i8, "
                                       "i16, i32 or i64)",
                                       name->str().c_str());
      dtype = *parsed;
    }
    const llvm::json::Value *payload = object->get("data");
    if (!payload)
      return llvm::createStringError("a tensor object needs \"data\"");
    if (llvm::Error error = flatten(*payload, 0, shape, data))
      return std::move(error);
    if (const llvm::json::Array *declared = object->getArray("shape")) {
      std::vector<int64_t> explicitShape;
      int64_t count = 1;
      for (const llvm::json::Value &d : *declared) {
        std::optional<int64_t> size = d.getAsInteger();
        if (!size || *size < 0)
          return llvm::createStringError("\"shape\" must hold non-negative integers");
        explicitShape.push_back(*size);
        count *= *size;
      }
      if (count != static_cast<int64_t>(data.size()))
        return llvm::createStringError("\"shape\" holds %lld elements but \"data\" has %zu",
                                       static_cast<long long>(count), data.size());
      shape = std::move(explicitShape);
    }
  } else if (llvm::Error error = flatten(value, 0, shape, data)) {
    return std::move(error);
  }
  // A lone value for a one-element tensor, or a one-element list for a scalar, are what
  // people type; accept both.
  if (spec.isScalar && data.size() == 1)
    shape.clear();
  else if (!spec.isScalar && shape.empty() && data.size() == 1 && !spec.shape.empty())
    shape.assign(spec.shape.size(), 1);
  // Integers are read as integers: a 64-bit value does not survive a trip through double.
  std::vector<double> numbers;
  for (const llvm::json::Value *v : data) {
    if (std::optional<bool> b = v->getAsBoolean())
      numbers.push_back(*b);
    else
      numbers.push_back(*v->getAsNumber());
  }
  Tensor tensor = Tensor::fromDoubles(dtype, std::move(shape), numbers);
  if (dtype == DType::I64)
    for (size_t i = 0; i < data.size(); ++i)
      if (std::optional<int64_t> exact = data[i]->getAsInteger())
        std::memcpy(tensor.bytes.data() + i * sizeof(int64_t), &*exact, sizeof(int64_t));
  return tensor;
}

llvm::json::Value tensorToJSON(const Tensor &tensor) {
  llvm::json::Array data;
  for (int64_t i = 0, n = tensor.numElements(); i < n; ++i) {
    double v = tensor.at(i);
    switch (tensor.dtype) {
    case DType::F16:
    case DType::F32:
    case DType::F64:
      data.push_back(v);
      break;
    case DType::I1:
      data.push_back(v != 0);
      break;
    case DType::I64: {
      int64_t exact;
      std::memcpy(&exact, tensor.bytes.data() + i * sizeof(int64_t), sizeof(exact));
      data.push_back(exact);
      break;
    }
    default:
      data.push_back(static_cast<int64_t>(v));
    }
  }
  llvm::json::Array shape;
  for (int64_t d : tensor.shape)
    shape.push_back(d);
  return llvm::json::Object{
      {"dtype", dtypeName(tensor.dtype)}, {"shape", std::move(shape)}, {"data", std::move(data)}};
}

} // namespace courier
