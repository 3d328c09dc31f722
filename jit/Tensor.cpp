// Element types, owning tensors and the printable forms of signatures and diagnostics.
#include "jit/Engine.h"
#include "jit/Internal.h"
#include "passes/CompilePool.h"
#include "transport/Wire.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <dragonbox/dragonbox.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace courier {

namespace {
enum class Kind { Float, Bool, Signed, Unsigned };
struct DTypeInfo {
  DType dtype;
  llvm::StringLiteral name; ///< MLIR's spelling of the element type.
  size_t size;
  Kind kind;
};
/// The one table of element types, in DType order.
constexpr DTypeInfo kDTypes[] = {
    {DType::F16, "f16", 2, Kind::Float},      {DType::F32, "f32", 4, Kind::Float},
    {DType::F64, "f64", 8, Kind::Float},      {DType::I1, "i1", 1, Kind::Bool},
    {DType::I8, "i8", 1, Kind::Signed},       {DType::I16, "i16", 2, Kind::Signed},
    {DType::I32, "i32", 4, Kind::Signed},     {DType::I64, "i64", 8, Kind::Signed},
    {DType::BF16, "bf16", 2, Kind::Float},    {DType::UI8, "ui8", 1, Kind::Unsigned},
    {DType::UI16, "ui16", 2, Kind::Unsigned}, {DType::UI32, "ui32", 4, Kind::Unsigned},
    {DType::UI64, "ui64", 8, Kind::Unsigned},
};
constexpr bool inDTypeOrder() {
  for (size_t i = 0; i < std::size(kDTypes); ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i)
      return false;
  return true;
}
static_assert(inDTypeOrder() && std::size(kDTypes) == static_cast<size_t>(DType::UI64) + 1,
              "kDTypes lists every DType once, in order");

const DTypeInfo &infoOf(DType dtype) { return kDTypes[static_cast<int>(dtype)]; }

/// "bf16, f16, ..., ui32 or ui64" for messages, floats first, then by size; `kind` narrows
/// it to one kind; `last` separates the last two.
std::string dtypeList(std::optional<Kind> kind = std::nullopt, llvm::StringRef last = " or ") {
  llvm::SmallVector<const DTypeInfo *> listed;
  for (const DTypeInfo &info : kDTypes)
    if (!kind || info.kind == *kind)
      listed.push_back(&info);
  llvm::sort(listed, [](const DTypeInfo *a, const DTypeInfo *b) {
    return std::make_tuple(a->kind, a->size, a->name) < std::make_tuple(b->kind, b->size, b->name);
  });
  std::string text;
  for (size_t i = 0; i < listed.size(); ++i)
    text += (i == 0 ? "" : i + 1 == listed.size() ? last.str() : ", ") + listed[i]->name.str();
  return text;
}

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}
template <typename T> void store(uint8_t *p, T value) { std::memcpy(p, &value, sizeof(T)); }
} // namespace

llvm::StringRef dtypeName(DType dtype) { return infoOf(dtype).name; }

size_t dtypeSize(DType dtype) { return infoOf(dtype).size; }

bool isFloatDType(DType dtype) { return infoOf(dtype).kind == Kind::Float; }

std::string dtypeNames(llvm::StringRef last) { return dtypeList(std::nullopt, last); }

std::optional<DType> dtypeFromCode(uint64_t code) {
  if (code >= std::size(kDTypes))
    return std::nullopt;
  return kDTypes[code].dtype;
}

std::optional<DType> parseDType(llvm::StringRef name) {
  for (const DTypeInfo &info : kDTypes)
    if (info.name == name)
      return info.dtype;
  return std::nullopt;
}

std::optional<int64_t> checkedElementCount(llvm::ArrayRef<int64_t> shape, size_t elemSize) {
  int64_t count = 1, bytes = 0;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(count, d, count))
      return std::nullopt;
  if (llvm::MulOverflow(count, static_cast<int64_t>(elemSize), bytes))
    return std::nullopt;
  return count;
}

namespace {
int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}
} // namespace

int64_t Tensor::numElements() const { return product(shape); }

int64_t TensorRef::numElements() const { return product(shape); }

TensorBytes TensorBytes::adopt(void *allocation, uint8_t *data, size_t size, Release release) {
  TensorBytes bytes;
  bytes.allocation = allocation;
  bytes.release = release;
  bytes.first = data;
  bytes.count = bytes.room = size;
  return bytes;
}

void TensorBytes::reserve(size_t bytes) {
  if (bytes <= room)
    return;
  auto *grown = static_cast<uint8_t *>(std::malloc(bytes));
  if (!grown)
    llvm::report_bad_alloc_error("growing a tensor's bytes");
  if (count)
    std::memcpy(grown, first, count);
  size_t kept = count;
  reset();
  allocation = first = grown;
  release = std::free;
  count = kept;
  room = bytes;
}

void TensorBytes::reset() {
  if (allocation)
    release(allocation);
  allocation = nullptr;
  release = nullptr;
  first = nullptr;
  count = room = 0;
}

OutputRef OutputRef::into(Tensor &tensor) {
  return of(tensor.dtype, tensor.shape, tensor.bytes.data(), tensor.bytes.size());
}

TensorRef Tensor::ref() const { return TensorRef::of(dtype, shape, bytes.data(), bytes.size()); }

Tensor TensorRef::copy() const {
  return Tensor{dtype, std::vector<int64_t>(shape.begin(), shape.end()),
                TensorBytes(data, data + size)};
}

void detail::viewMismatch(const char *what, DType held, DType wanted) {
  llvm::report_fatal_error(llvm::Twine(what) + "<" + dtypeName(wanted) + ">() of a tensor of " +
                               dtypeName(held) + ": its elements are not of that type",
                           /*gen_crash_diag=*/false);
}

Tensor Tensor::fromDoubles(DType dtype, std::vector<int64_t> shape, llvm::ArrayRef<double> values) {
  Tensor t{dtype, std::move(shape), {}};
  size_t size = dtypeSize(dtype);
  t.bytes.resize(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t *p = t.bytes.data() + i * size;
    double v = values[i];
    switch (dtype) {
    case DType::F16:
    case DType::BF16: {
      bool lost;
      llvm::APFloat f(v);
      f.convert(dtype == DType::F16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat(),
                llvm::APFloat::rmNearestTiesToEven, &lost);
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
    case DType::UI8:
      store<uint8_t>(p, static_cast<uint8_t>(v));
      break;
    case DType::UI16:
      store<uint16_t>(p, static_cast<uint16_t>(v));
      break;
    case DType::UI32:
      store<uint32_t>(p, static_cast<uint32_t>(v));
      break;
    case DType::UI64:
      store<uint64_t>(p, static_cast<uint64_t>(v));
      break;
    }
  }
  return t;
}

double Tensor::at(int64_t i) const {
  const uint8_t *p = bytes.data() + i * dtypeSize(dtype);
  switch (dtype) {
  case DType::F16:
  case DType::BF16: {
    llvm::APFloat f(dtype == DType::F16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat(),
                    llvm::APInt(16, load<uint16_t>(p)));
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
  case DType::UI8:
    return load<uint8_t>(p);
  case DType::UI16:
    return load<uint16_t>(p);
  case DType::UI32:
    return load<uint32_t>(p);
  case DType::UI64:
    return static_cast<double>(load<uint64_t>(p));
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

char EngineError::ID = 0;

void EngineError::log(llvm::raw_ostream &os) const { os << message; }

char CompileError::ID = 0;

void CompileError::log(llvm::raw_ostream &os) const {
  if (diagnostics.empty()) {
    os << summary;
    return;
  }
  // toString() and friends add no line break of their own after a message.
  os << llvm::StringRef(renderDiagnostics(diagnostics)).drop_back();
}

std::error_code CompileError::convertToErrorCode() const { return llvm::inconvertibleErrorCode(); }

} // namespace courier

namespace courier {

namespace {

/// JSON has no numbers for NaN and the infinities; they travel as the strings "NaN",
/// "Infinity" and "-Infinity", the spelling of protobuf's JSON mapping and of JavaScript, which
/// every JSON parser accepts. The value such a string stands for, or nullopt.
std::optional<double> nonFiniteOf(const llvm::json::Value &value) {
  std::optional<llvm::StringRef> text = value.getAsString();
  if (!text)
    return std::nullopt;
  if (*text == "NaN")
    return std::numeric_limits<double>::quiet_NaN();
  if (*text == "Infinity")
    return std::numeric_limits<double>::infinity();
  if (*text == "-Infinity")
    return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

/// Flattens nested arrays into their leaves, inferring the shape from the first path and
/// checking every other path against it.
struct Flattener {
  std::vector<int64_t> shape;
  std::vector<const llvm::json::Value *> leaves;
  std::optional<size_t> leafDepth;

  llvm::Error visit(const llvm::json::Value &value, size_t depth) {
    if (const llvm::json::Array *array = value.getAsArray()) {
      auto size = static_cast<int64_t>(array->size());
      if (leafDepth && depth >= *leafDepth)
        return llvm::createStringError("ragged nested array: numbers at depth %zu, an array at "
                                       "depth %zu",
                                       *leafDepth, depth);
      if (depth == shape.size())
        shape.push_back(size);
      else if (shape[depth] != size)
        return llvm::createStringError("ragged nested array: dimension %zu has sizes %lld and "
                                       "%lld",
                                       depth, static_cast<long long>(shape[depth]),
                                       static_cast<long long>(size));
      for (const llvm::json::Value &element : *array)
        if (llvm::Error error = visit(element, depth + 1))
          return error;
      return llvm::Error::success();
    }
    if (!value.getAsBoolean() && !value.getAsNumber() && !nonFiniteOf(value))
      return llvm::createStringError("expected a number, got %s (NaN and the infinities are "
                                     "\"NaN\", \"Infinity\" and \"-Infinity\")",
                                     llvm::formatv("{0}", value).str().c_str());
    if (!leafDepth)
      leafDepth = depth;
    if (depth != *leafDepth || depth != shape.size())
      return llvm::createStringError("ragged nested array: numbers at depths %zu and %zu",
                                     *leafDepth, depth);
    leaves.push_back(&value);
    return llvm::Error::success();
  }
};

/// Checks that `value` fits `dtype` exactly: integers must be whole and in range.
llvm::Error checkRange(const llvm::json::Value &value, DType dtype, size_t index) {
  const DTypeInfo &info = infoOf(dtype);
  if (info.kind == Kind::Float)
    return llvm::Error::success();
  if (value.getAsBoolean())
    return llvm::Error::success();
  if (nonFiniteOf(value))
    return llvm::createStringError("element %zu is %s, which only a float dtype (%s) can hold, "
                                   "not %s",
                                   index, llvm::formatv("{0}", value).str().c_str(),
                                   dtypeList(Kind::Float).c_str(), info.name.str().c_str());
  // The magnitude a negative and a non-negative value may have.
  unsigned bits = info.kind == Kind::Bool ? 1 : 8 * info.size;
  uint64_t maxPositive =
      info.kind == Kind::Signed ? (uint64_t(1) << (bits - 1)) - 1 : ~uint64_t(0) >> (64 - bits);
  uint64_t maxNegative = info.kind == Kind::Signed ? uint64_t(1) << (bits - 1) : 0;
  std::optional<std::pair<bool, uint64_t>> whole = jsonWholeNumber(value);
  if (!whole || whole->second > (whole->first ? maxNegative : maxPositive))
    return llvm::createStringError(
        "element %zu (%s) is not a whole number %s can hold (%s%llu to %llu)", index,
        llvm::formatv("{0}", value).str().c_str(), info.name.str().c_str(), maxNegative ? "-" : "",
        static_cast<unsigned long long>(maxNegative), static_cast<unsigned long long>(maxPositive));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<llvm::json::Value> parseJSON(llvm::StringRef text, unsigned maxDepth) {
  if (transport::wire::findExcessNesting(text, maxDepth, "[{", "]}", /*lineComments=*/false) !=
      llvm::StringRef::npos)
    return llvm::createStringError("JSON nested deeper than %u levels", maxDepth);
  return llvm::json::parse(text);
}

namespace {
/// A tensor written as an object: its fields checked, its dtype (when given) in `dtype`, its
/// data flattened into `flat`, and a declared shape checked against the data.
llvm::Error readTensorObject(const llvm::json::Object &object, DType &dtype, Flattener &flat) {
  // A field of the wrong type is an error, not a default: a typo must not pass silently.
  for (const auto &[key, field] : object) {
    bool typed = key == "dtype"   ? field.getAsString().has_value()
                 : key == "shape" ? field.getAsArray() != nullptr
                 : key == "data"  ? true
                                  : false;
    if (!typed)
      return llvm::createStringError(
          key == "dtype" || key == "shape"
              ? llvm::formatv("\"{0}\" must be a {1}", key.str(),
                              key == "dtype" ? "string" : "list of sizes")
                    .str()
              : llvm::formatv("unknown tensor field \"{0}\" (fields are dtype, shape and "
                              "data)",
                              key.str())
                    .str());
  }
  if (std::optional<llvm::StringRef> name = object.getString("dtype")) {
    std::optional<DType> parsed = parseDType(*name);
    if (!parsed)
      return llvm::createStringError("unknown dtype '%s' (expected %s)", name->str().c_str(),
                                     dtypeList().c_str());
    dtype = *parsed;
  }
  const llvm::json::Value *payload = object.get("data");
  if (!payload)
    return llvm::createStringError("a tensor object needs \"data\"");
  if (llvm::Error error = flat.visit(*payload, 0))
    return error;
  if (const llvm::json::Array *declared = object.getArray("shape")) {
    std::vector<int64_t> explicitShape;
    for (const llvm::json::Value &d : *declared) {
      std::optional<uint64_t> size = jsonCount(d);
      if (!size || *size > uint64_t(INT64_MAX))
        return llvm::createStringError("\"shape\" must hold non-negative integers");
      explicitShape.push_back(static_cast<int64_t>(*size));
    }
    std::optional<int64_t> count = checkedElementCount(explicitShape, dtypeSize(dtype));
    if (!count)
      return llvm::createStringError("\"shape\" is too large");
    if (*count != static_cast<int64_t>(flat.leaves.size()))
      return llvm::createStringError("\"shape\" holds %lld elements but \"data\" has %zu",
                                     static_cast<long long>(*count), flat.leaves.size());
    flat.shape = std::move(explicitShape);
  }
  return llvm::Error::success();
}
} // namespace

llvm::Expected<Tensor> tensorFromJSON(const llvm::json::Value &value, const TensorSpec &spec) {
  DType dtype = spec.dtype;
  Flattener flat;
  std::vector<int64_t> &shape = flat.shape;
  std::vector<const llvm::json::Value *> &data = flat.leaves;
  if (const llvm::json::Object *object = value.getAsObject()) {
    if (llvm::Error error = readTensorObject(*object, dtype, flat))
      return std::move(error);
  } else if (llvm::Error error = flat.visit(value, 0)) {
    return std::move(error);
  }
  for (size_t i = 0; i < data.size(); ++i)
    if (llvm::Error error = checkRange(*data[i], dtype, i))
      return std::move(error);
  // A lone value for a one-element tensor, or a one-element list for a scalar, are what
  // people type; accept both.
  if (spec.isScalar && data.size() == 1)
    shape.clear();
  else if (!spec.isScalar && shape.empty() && data.size() == 1 && !spec.shape.empty())
    shape.assign(spec.shape.size(), 1);
  // Integers are read as integers: a 64-bit value does not survive a trip through double.
  bool wide = dtype == DType::I64 || dtype == DType::UI64;
  std::vector<double> numbers;
  for (const llvm::json::Value *v : data) {
    if (std::optional<bool> b = v->getAsBoolean())
      numbers.push_back(*b);
    else if (std::optional<double> special = nonFiniteOf(*v))
      numbers.push_back(*special);
    else
      numbers.push_back(wide ? 0 : *v->getAsNumber()); // Wide ones are stored exactly below.
  }
  Tensor tensor = Tensor::fromDoubles(dtype, std::move(shape), numbers);
  if (wide)
    for (size_t i = 0; i < data.size(); ++i)
      if (std::optional<std::pair<bool, uint64_t>> whole = jsonWholeNumber(*data[i])) {
        // Two's complement: the bytes of -m are those of 0 - m modulo 2^64.
        uint64_t bits = whole->first ? 0 - whole->second : whole->second;
        std::memcpy(tensor.bytes.data() + i * sizeof(uint64_t), &bits, sizeof(bits));
      }
  return tensor;
}

std::optional<std::pair<bool, uint64_t>> jsonWholeNumber(const llvm::json::Value &value) {
  // Non-negative integers, including those above INT64_MAX, which only getAsUINT64 reads.
  if (std::optional<uint64_t> count = value.getAsUINT64())
    return std::make_pair(false, *count);
  std::optional<double> number = value.getAsNumber();
  if (!number)
    return std::nullopt;
  constexpr double kTwo63 = 9223372036854775808.0, kTwo64 = 18446744073709551616.0;
  // Below 2^63 getAsInteger is exact for integers and defined for doubles; at or above it,
  // only a double can be here (the integers were taken above).
  if (*number < kTwo63) {
    std::optional<int64_t> exact = value.getAsInteger();
    if (!exact)
      return std::nullopt;
    return std::make_pair(*exact < 0, *exact < 0 ? 0 - static_cast<uint64_t>(*exact)
                                                 : static_cast<uint64_t>(*exact));
  }
  double whole;
  if (*number < kTwo64 && std::modf(*number, &whole) == 0.0)
    return std::make_pair(false, static_cast<uint64_t>(*number));
  return std::nullopt;
}

std::optional<uint64_t> jsonCount(const llvm::json::Value &value) {
  std::optional<std::pair<bool, uint64_t>> whole = jsonWholeNumber(value);
  if (!whole || (whole->first && whole->second != 0))
    return std::nullopt;
  return whole->second;
}

llvm::json::Value tensorToJSON(const Tensor &tensor) {
  llvm::json::Array data;
  for (int64_t i = 0, n = tensor.numElements(); i < n; ++i) {
    double v = tensor.at(i);
    switch (tensor.dtype) {
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::F64:
      // llvm::json would print "nan" and "inf", which no JSON parser reads; it prints -0 as
      // "-0", which llvm::json reads back as +0 (writeTensorJSON writes "-0.0").
      if (std::isnan(v))
        data.push_back("NaN");
      else if (std::isinf(v))
        data.push_back(v > 0 ? "Infinity" : "-Infinity");
      else
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
    case DType::UI64: {
      uint64_t exact;
      std::memcpy(&exact, tensor.bytes.data() + i * sizeof(uint64_t), sizeof(exact));
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

namespace {

constexpr char kDigitPairs[] = "0001020304050607080910111213141516171819"
                               "2021222324252627282930313233343536373839"
                               "4041424344454647484950515253545556575859"
                               "6061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

int digitCount(uint64_t v) {
  int n = 1;
  for (uint64_t bound = 10; n < 20 && v >= bound; bound *= 10)
    ++n;
  return n;
}

/// Writes the last `n` decimal digits of `v` (zero-padded) to end at `end`, and returns `v`
/// without them. Digits are divided off by the constants 10 and 100, never by a variable power.
uint64_t writeDigits(char *end, uint64_t v, int n) {
  for (; n >= 2; n -= 2) {
    std::memcpy(end -= 2, kDigitPairs + (v % 100) * 2, 2);
    v /= 100;
  }
  if (n) {
    end[-1] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
  return v;
}

/// Writes the finite `v` in the text std::to_chars(first, last, v) gives, the shortest that
/// reads back as `v` in its own type, and returns the end; `out` has room for 32 characters.
/// std::to_chars's own search for the shortest digits is Ryu in libstdc++, and measured 40-60 ns
/// per float here; Dragonbox finds the same digits several times faster, and they are laid out
/// here by std::to_chars's rules: fixed notation unless scientific is shorter, and a whole
/// number in fixed notation written out exactly (123456790528, not 123456790000).
/// tests/jit/TensorTest.cpp compares the two on a million floats and 600,000 doubles; all
/// 4,278,190,080 finite floats gave the same text too (a one-off run of about ten minutes).
template <typename T> char *writeShortest(char *out, T v) {
  if (std::signbit(v))
    *out++ = '-';
  T magnitude = std::fabs(v);
  // A whole number below 10^5 is its own shortest text, never longer than scientific.
  if (magnitude < 100000 && magnitude == static_cast<T>(static_cast<uint32_t>(magnitude))) {
    auto whole = static_cast<uint32_t>(magnitude);
    int n = digitCount(whole);
    writeDigits(out + n, whole, n);
    return out + n;
  }
  auto decimal = jkj::dragonbox::to_decimal(magnitude, jkj::dragonbox::policy::sign::ignore);
  uint64_t significand = decimal.significand; // No trailing zeros: Dragonbox removes them.
  int digits = digitCount(significand);
  int exponent = decimal.exponent;   // magnitude = significand * 10^exponent
  int point = exponent + digits - 1; // magnitude = d.ddd * 10^point
  int pointDigits = std::abs(point) >= 100 ? 3 : 2;
  int scientificLength = digits + (digits > 1) + 2 + pointDigits;
  int fixedLength = exponent >= 0 ? digits + exponent
                    : point >= 0  ? digits + 1
                                  : digits + 1 - point;
  if (fixedLength <= scientificLength) {
    if (exponent >= 0) {
      if (magnitude >= static_cast<T>(18446744073709551616.0)) // 2^64, only for doubles.
        return std::to_chars(out, out + 32, magnitude).ptr;
      auto whole = static_cast<uint64_t>(magnitude);
      int n = digitCount(whole);
      writeDigits(out + n, whole, n);
      return out + n;
    }
    if (point >= 0) { // ddd.ddd
      uint64_t integral = writeDigits(out + digits + 1, significand, digits - point - 1);
      writeDigits(out + point + 1, integral, point + 1);
      out[point + 1] = '.';
      return out + digits + 1;
    }
    // 0.000ddd, with at most four zeros after the point (scientific is shorter past that).
    std::memcpy(out, "0.0000", 6);
    out += 1 - point;
    writeDigits(out + digits, significand, digits);
    return out + digits;
  }
  out[0] = static_cast<char>('0' + writeDigits(out + digits + 1, significand, digits - 1));
  if (digits > 1)
    out[1] = '.';
  out += digits > 1 ? digits + 1 : 1;
  *out++ = 'e';
  *out++ = point < 0 ? '-' : '+';
  writeDigits(out + pointDigits, static_cast<uint64_t>(std::abs(point)), pointDigits);
  return out + pointDigits;
}

/// The most characters one element of `dtype` takes, with its separator.
size_t maxElementText(DType dtype) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16:
  case DType::F32:
    return 16; // "-1.17549435e-38,"
  case DType::F64:
    return 25; // "-2.2250738585072014e-308,"
  case DType::I1:
    return 6; // "false,"
  default:
    return 21; // "-9223372036854775808,", "18446744073709551615,"
  }
}

/// Appends the text of one tensor's elements to a fixed buffer, handing it to `sink` as it
/// fills: a 16 MiB tensor is twenty million bytes of text, and nothing per element is allocated.
template <typename Sink> class ElementWriter {
public:
  explicit ElementWriter(Sink &sink) : sink(sink) {}
  ~ElementWriter() { flush(); }

  void separator(bool first) {
    if (!first)
      buffer[used++] = ',';
  }
  void put(llvm::StringRef text) {
    std::memcpy(buffer + used, text.data(), text.size());
    used += text.size();
  }
  /// A float or double in the shortest text that reads back as the same value of its own
  /// type; NaN and the infinities as the strings JSON carries them in. Negative zero is "-0.0":
  /// JSON readers that keep integers apart (llvm::json among them) read "-0" as the integer 0,
  /// which widens to +0.
  template <typename T> void real(T v) {
    if (std::isnan(v))
      return put("\"NaN\"");
    if (std::isinf(v))
      return put(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    if (v == 0 && std::signbit(v))
      return put("-0.0");
    used = static_cast<size_t>(writeShortest(buffer + used, v) - buffer);
  }
  template <typename T> void integer(T v) {
    used =
        static_cast<size_t>(std::to_chars(buffer + used, buffer + sizeof(buffer), v).ptr - buffer);
  }
  /// Makes room for the next element: every element with its separator takes at most
  /// kMaxElement characters.
  void reserveElement() {
    if (sizeof(buffer) - used < kMaxElement)
      flush();
  }

private:
  /// More than any element and its separator: 25 for a double, and writeShortest may write
  /// up to 32 bytes.
  static constexpr size_t kMaxElement = 40;
  void flush() {
    sink(buffer, used);
    used = 0;
  }
  Sink &sink;
  char buffer[1 << 16];
  size_t used = 0;
};

/// Writes elements [begin, end) of `tensor` read as T, each through `write`, each after a
/// separator but the tensor's first.
template <typename T, typename Writer, typename Write>
void writeElements(Writer &out, const Tensor &tensor, int64_t begin, int64_t end, Write write) {
  for (int64_t i = begin; i < end; ++i) {
    T v;
    std::memcpy(&v, tensor.bytes.data() + i * sizeof(T), sizeof(T));
    out.reserveElement();
    out.separator(i == 0);
    write(v);
  }
}

/// The text of elements [begin, end) of `tensor`, with the separator before each but the
/// tensor's first, handed to `sink(data, size)` in pieces.
template <typename Sink>
void writeData(Sink &sink, const Tensor &tensor, int64_t begin, int64_t end) {
  ElementWriter<Sink> out(sink);
  auto integer = [&](auto v) { out.integer(v); };
  switch (tensor.dtype) {
  case DType::F16:
  case DType::BF16:
    // Every half and bfloat16 is exactly a float, and the shortest float text reads back
    // to it.
    for (int64_t i = begin; i < end; ++i) {
      out.reserveElement();
      out.separator(i == 0);
      out.real(static_cast<float>(tensor.at(i)));
    }
    break;
  case DType::F32:
    writeElements<float>(out, tensor, begin, end, [&](float v) { out.real(v); });
    break;
  case DType::F64:
    writeElements<double>(out, tensor, begin, end, [&](double v) { out.real(v); });
    break;
  case DType::I1:
    writeElements<uint8_t>(out, tensor, begin, end,
                           [&](uint8_t v) { out.put(v & 1 ? "true" : "false"); });
    break;
  case DType::I8:
    writeElements<int8_t>(out, tensor, begin, end, [&](int8_t v) { out.integer(int{v}); });
    break;
  case DType::I16:
    writeElements<int16_t>(out, tensor, begin, end, integer);
    break;
  case DType::I32:
    writeElements<int32_t>(out, tensor, begin, end, integer);
    break;
  case DType::I64:
    writeElements<int64_t>(out, tensor, begin, end, integer);
    break;
  case DType::UI8:
    writeElements<uint8_t>(out, tensor, begin, end, [&](uint8_t v) { out.integer(unsigned{v}); });
    break;
  case DType::UI16:
    writeElements<uint16_t>(out, tensor, begin, end, integer);
    break;
  case DType::UI32:
    writeElements<uint32_t>(out, tensor, begin, end, integer);
    break;
  case DType::UI64:
    writeElements<uint64_t>(out, tensor, begin, end, integer);
    break;
  }
}

/// What follows a tensor's elements in its object.
std::string tensorTail(const Tensor &tensor) {
  std::string tail = "],\"dtype\":\"" + dtypeName(tensor.dtype).str() + "\",\"shape\":[";
  for (size_t d = 0; d < tensor.shape.size(); ++d)
    tail += (d ? "," : "") + std::to_string(tensor.shape[d]);
  return tail + "]}";
}

// The keys in the order llvm::json prints an object's: sorted.
constexpr llvm::StringLiteral kTensorHead = "{\"data\":[";

/// The object writeTensorJSON writes, handed to `sink(data, size)` in pieces.
template <typename Sink> void writeTensor(Sink &sink, const Tensor &tensor) {
  sink(kTensorHead.data(), kTensorHead.size());
  writeData(sink, tensor, 0, tensor.numElements());
  std::string tail = tensorTail(tensor);
  sink(tail.data(), tail.size());
}

/// A tensor of at least this many elements is written on several threads, each writing one
/// run of its elements into a string of its own, joined in order: printing numbers is most of
/// a large JSON reply's cost, and one core idles meanwhile.
constexpr int64_t kParallelWriteElements = int64_t(1) << 19;
/// The most threads a tensor is written on.
constexpr unsigned kMostWriteThreads = 8;

/// The threads large tensors are written on besides their callers', one per core but one and
/// shared by every call: however many replies are written at once, they add no more.
CompilePool &writePool() {
  static CompilePool pool(std::min(defaultCompileJobs(), kMostWriteThreads) - 1, 0);
  return pool;
}

} // namespace

void writeTensorJSON(std::string &out, const Tensor &tensor) {
  // The most the elements can take, reserved once: the text is never copied to grow, and the
  // pages past what is written are never touched. Past 1 GiB of address space it grows as
  // strings do.
  size_t most = static_cast<size_t>(tensor.numElements()) * maxElementText(tensor.dtype) + 64 +
                21 * tensor.shape.size();
  out.reserve(out.size() + std::min<size_t>(most, size_t(1) << 30));
  // Fresh pages are faulted in one at a time as the text reaches them; measured on a VM, 44 MiB
  // took 70 ms in 4 KiB pages and 16 ms in 2 MiB ones. Only advice: the kernel may decline.
  transport::wire::adviseHugePages(out.data() + out.size(), out.capacity() - out.size());
  auto append = [&](const char *data, size_t size) { out.append(data, size); };
  int64_t n = tensor.numElements();
  int64_t threads =
      std::min<int64_t>({int64_t(writePool().threads()) + 1, n / kParallelWriteElements});
  if (threads < 2)
    return writeTensor(append, tensor);
  // Run k holds elements [first(k), first(k + 1)). This thread writes the first straight into
  // `out`; the others are written into strings of their own by the pool, or by this thread
  // in wait() where no pool thread took them.
  auto first = [&](int64_t k) { return n * k / threads; };
  std::vector<std::string> runs(threads - 1);
  CompileBatch batch(&writePool());
  for (int64_t k = 1; k < threads; ++k)
    batch.add([&, k] {
      std::string &run = runs[k - 1];
      run.reserve(static_cast<size_t>(first(k + 1) - first(k)) * maxElementText(tensor.dtype));
      auto write = [&](const char *data, size_t size) { run.append(data, size); };
      writeData(write, tensor, first(k), first(k + 1));
    });
  out.append(kTensorHead.data(), kTensorHead.size());
  writeData(append, tensor, 0, first(1));
  batch.wait();
  for (std::string &run : runs) {
    out += run;
    std::string().swap(run);
  }
  out += tensorTail(tensor);
}

void writeTensorJSON(llvm::raw_ostream &os, const Tensor &tensor) {
  auto write = [&](const char *data, size_t size) { os.write(data, size); };
  writeTensor(write, tensor);
}

} // namespace courier
