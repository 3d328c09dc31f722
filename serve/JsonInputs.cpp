// simdjson's on-demand API walks the body once, front to back; every value is looked at in
// that walk (nothing skipped, so nothing goes unchecked), and any surprise gives up on the
// whole body rather than guessing.
#include "serve/JsonInputs.h"
#include "transport/Wire.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>

namespace courier::serve {

namespace od = simdjson::ondemand;

namespace {

/// parseJSON's bound (the one the executor holds its JSON to): deeper input is refused there,
/// so it is not taken here.
constexpr size_t kMaxDepth = transport::wire::kMaxJsonDepth;

/// Most digits a number may have for simdjson's get_double() here: past 19 it takes a slower
/// path that Debian's simdjson 3.0 gets wrong for about one number in ten (0.22173711947632793
/// followed by four more digits reads as 0.00037619059181331069), so such a number is left to
/// the full reading. Found by tests/fuzz (json-tensors).
constexpr size_t kMaxExactDigits = 19;

/// True when `value`, a number, has more digits before its exponent than kMaxExactDigits.
bool beyondExactDigits(od::value &value) {
  std::string_view token = value.raw_json_token();
  if (token.size() <= kMaxExactDigits) // The common case: too short to hold that many digits.
    return false;
  size_t digits = 0;
  for (char c : token) {
    if (c >= '0' && c <= '9')
      ++digits;
    else if (c != '-' && c != '.')
      break;
  }
  return digits > kMaxExactDigits;
}

/// The elements of one tensor, appended in the bytes of its dtype as they are read, with
/// the shape their nesting gives (the rules of tensorFromJSON's Flattener).
class TensorReader {
public:
  /// `expected`: the bytes the elements are likely to take, allocated up front.
  TensorReader(DType dtype, size_t baseDepth, size_t expected)
      : dtype(dtype), baseDepth(baseDepth) {
    transport::wire::resizeFresh(bytes, expected);
  }

  /// The bytes of the elements read, and nothing past them.
  std::vector<uint8_t> take() {
    bytes.resize(used);
    return std::move(bytes);
  }

  bool visit(od::value value, size_t depth) {
    od::json_type type;
    if (value.type().get(type) || baseDepth + depth >= kMaxDepth)
      return false;
    if (type != od::json_type::array)
      return leaf(value, type, depth);
    if (leafDepth && depth >= *leafDepth)
      return false;
    bool first = depth == shape.size();
    if (first)
      shape.push_back(-1);
    od::array array;
    if (value.get_array().get(array))
      return false;
    int64_t size = 0;
    for (auto element : array) {
      od::value child;
      bool read = false;
      if (element.get(child))
        return false;
      // Once the numbers are known to lie at depth + 1 (from the first element of this array
      // or of an earlier one), each is read in one step, its type not asked first.
      if (leafDepth && *leafDepth == depth + 1 && shape.size() == depth + 1 &&
          !quickNumber(child, read))
        return false;
      if (!read && !visit(child, depth + 1))
        return false;
      ++size;
    }
    if (first)
      shape[depth] = size;
    return shape[depth] == size;
  }

  DType dtype;
  std::vector<int64_t> shape;
  int64_t count = 0;

private:
  /// Reads `value` in one step if it is a number that the dtype's general reading would take
  /// with no more checks than storing it (a double for f32 and f64, an int64 for the integer
  /// dtypes), and says so in `read`; anything else is left unread for the general reading
  /// (simdjson leaves a value it could not read as asked). False: the number is refused.
  bool quickNumber(od::value &value, bool &read) {
    switch (dtype) {
    case DType::F32:
    case DType::F64: {
      double v;
      if (beyondExactDigits(value) || value.get_double().get(v))
        return true;
      read = true;
      ++count;
      return dtype == DType::F32 ? append<float>(static_cast<float>(v)) : append<double>(v);
    }
    case DType::F16:
    case DType::BF16:
    case DType::I1:
      return true;
    default: {
      int64_t v;
      if (value.get_int64().get(v))
        return true;
      read = true;
      ++count;
      return integer(v < 0, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
    }
    }
  }

  bool leaf(od::value value, od::json_type type, size_t depth) {
    if (!leafDepth)
      leafDepth = depth;
    if (depth != *leafDepth || depth != shape.size())
      return false;
    ++count;
    switch (type) {
    case od::json_type::boolean: {
      bool b;
      return !value.get_bool().get(b) && store(b ? 1.0 : 0.0);
    }
    case od::json_type::string:
      return nonFinite(value);
    case od::json_type::number:
      return number(value);
    default:
      return false;
    }
  }

  bool nonFinite(od::value value) {
    std::string_view text;
    if (!isFloat() || value.get_string().get(text))
      return false;
    if (text == "NaN")
      return store(std::numeric_limits<double>::quiet_NaN());
    if (text == "Infinity")
      return store(std::numeric_limits<double>::infinity());
    if (text == "-Infinity")
      return store(-std::numeric_limits<double>::infinity());
    return false;
  }

  bool number(od::value value) {
    if (isFloat()) {
      double v;
      return !beyondExactDigits(value) && !value.get_double().get(v) && store(v);
    }
    od::number_type kind;
    if (value.get_number_type().get(kind))
      return false;
    if (kind == od::number_type::signed_integer) {
      int64_t v;
      return !value.get_int64().get(v) &&
             integer(v < 0, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
    }
    if (kind == od::number_type::unsigned_integer) {
      uint64_t v;
      return !value.get_uint64().get(v) && integer(false, v);
    }
    return false; // 2.0 and the like: whole, but left to the full reading.
  }

  bool isFloat() const {
    return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 ||
           dtype == DType::F64;
  }

  /// A whole number of magnitude `m`, stored if the integer dtype holds it.
  bool integer(bool negative, uint64_t m) {
    switch (dtype) {
    case DType::I1:
      return !negative && m <= 1 && append<uint8_t>(static_cast<uint8_t>(m));
    case DType::I8:
      return fits<int8_t>(negative, m);
    case DType::I16:
      return fits<int16_t>(negative, m);
    case DType::I32:
      return fits<int32_t>(negative, m);
    case DType::I64:
      return fits<int64_t>(negative, m);
    case DType::UI8:
      return fits<uint8_t>(negative, m);
    case DType::UI16:
      return fits<uint16_t>(negative, m);
    case DType::UI32:
      return fits<uint32_t>(negative, m);
    case DType::UI64:
      return fits<uint64_t>(negative, m);
    default:
      return false;
    }
  }

  template <typename T> bool fits(bool negative, uint64_t m) {
    if (negative) {
      if (!std::is_signed_v<T> || m > static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1)
        return false;
      // Two's complement: the bytes of -m are those of 0 - m modulo 2^64, truncated.
      return append<T>(static_cast<T>(0 - m));
    }
    return m <= static_cast<uint64_t>(std::numeric_limits<T>::max()) &&
           append<T>(static_cast<T>(m));
  }

  /// A value of any dtype, as Tensor::fromDoubles would store it.
  bool store(double v) {
    switch (dtype) {
    case DType::F32:
      return append<float>(static_cast<float>(v));
    case DType::F64:
      return append<double>(v);
    case DType::F16:
    case DType::BF16: {
      uint16_t half;
      std::memcpy(&half, Tensor::fromDoubles(dtype, {}, {v}).bytes.data(), sizeof(half));
      return append<uint16_t>(half);
    }
    default: // A boolean for an integer dtype: 0 or 1.
      return integer(false, static_cast<uint64_t>(v));
    }
  }

  template <typename T> bool append(T v) {
    if (used + sizeof(T) > bytes.size())
      transport::wire::resizeFresh(bytes, std::max<size_t>(2 * bytes.size(), 64));
    std::memcpy(bytes.data() + used, &v, sizeof(T));
    used += sizeof(T);
    return true;
  }

  std::vector<uint8_t> bytes;
  size_t used = 0;
  size_t baseDepth;
  std::optional<size_t> leafDepth;
};

/// The bytes `spec`'s elements take if its shape is static, bounded by what `bodySize` bytes
/// of JSON can hold (two per element, "0,"), so a small body never allocates a large tensor.
size_t expectedBytes(const TensorSpec &spec, size_t bodySize) {
  size_t size = dtypeSize(spec.dtype);
  std::optional<int64_t> count = checkedElementCount(spec.shape, size);
  if (!count) // A dynamic dimension (-1) or an overflow.
    return 0;
  return std::min<size_t>(static_cast<size_t>(*count), bodySize / 2 + 1) * size;
}

/// One input: nested arrays, a lone value, or {"dtype", "shape", "data"}.
std::optional<Tensor> readTensor(od::value value, const TensorSpec &spec, size_t bodySize) {
  od::json_type type;
  if (value.type().get(type))
    return std::nullopt;
  // The body's object, "inputs", and this value: three levels. An object's elements are read
  // by a reader of its "data", so this one allocates nothing up front for it.
  TensorReader reader(spec.dtype, 3,
                      type == od::json_type::object ? 0 : expectedBytes(spec, bodySize));
  std::optional<std::vector<int64_t>> declared;
  if (type == od::json_type::object) {
    od::object object;
    if (value.get_object().get(object))
      return std::nullopt;
    bool sawDtype = false, sawData = false;
    for (auto item : object) {
      od::field field;
      std::string_view key;
      if (std::move(item).get(field) || field.unescaped_key().get(key))
        return std::nullopt;
      if (key == "dtype" && !sawDtype) {
        std::string_view name;
        if (field.value().get_string().get(name) ||
            llvm::StringRef(name.data(), name.size()) != dtypeName(spec.dtype))
          return std::nullopt;
        sawDtype = true;
      } else if (key == "shape" && !declared) {
        od::array sizes;
        if (field.value().get_array().get(sizes))
          return std::nullopt;
        declared.emplace();
        for (auto size : sizes) {
          int64_t d;
          if (size.get_int64().get(d) || d < 0)
            return std::nullopt;
          declared->push_back(d);
        }
      } else if (key == "data" && !sawData) {
        TensorReader nested(spec.dtype, 4, expectedBytes(spec, bodySize));
        if (!nested.visit(field.value(), 0))
          return std::nullopt;
        reader = std::move(nested);
        sawData = true;
      } else {
        return std::nullopt;
      }
    }
    if (!sawData)
      return std::nullopt;
  } else if (!reader.visit(value, 0)) {
    return std::nullopt;
  }
  std::vector<int64_t> shape = std::move(reader.shape);
  if (declared) {
    std::optional<int64_t> count = checkedElementCount(*declared, dtypeSize(spec.dtype));
    if (!count || *count != reader.count)
      return std::nullopt;
    shape = std::move(*declared);
  }
  if (spec.isScalar && reader.count == 1)
    shape.clear();
  else if (!spec.isScalar && shape.empty() && reader.count == 1 && !spec.shape.empty())
    shape.assign(spec.shape.size(), 1);
  return Tensor{spec.dtype, std::move(shape), reader.take()};
}

/// Parsers kept between calls. A parser sizes its buffers to the largest body it has read
/// (about five bytes per byte of JSON), and making them anew for a 20 MB body cost as much as
/// reading it; so at most one per core is kept, each only while it is no larger than
/// kKeptCapacity, and a parser in use belongs to one call.
class ParserPool {
public:
  std::unique_ptr<od::parser> take() {
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.empty())
      return std::make_unique<od::parser>();
    std::unique_ptr<od::parser> parser = std::move(idle.back());
    idle.pop_back();
    return parser;
  }
  void give(std::unique_ptr<od::parser> parser) {
    if (parser->capacity() > kKeptCapacity)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.size() < std::max(1u, std::thread::hardware_concurrency()))
      idle.push_back(std::move(parser));
  }

private:
  static constexpr size_t kKeptCapacity = size_t(64) << 20;
  std::mutex mutex;
  std::vector<std::unique_ptr<od::parser>> idle;
};

ParserPool &parsers() {
  static ParserPool *pool = new ParserPool; // Never destroyed: threads may outlive statics.
  return *pool;
}

/// A parser from the pool for one call, returned to it at the end.
struct PooledParser {
  PooledParser() : parser(parsers().take()) {}
  ~PooledParser() { parsers().give(std::move(parser)); }
  std::unique_ptr<od::parser> parser;
};

} // namespace

std::optional<std::vector<Tensor>> readInputsFast(llvm::StringRef body, const EntrySignature &entry,
                                                  size_t allocated) {
  static_assert(transport::wire::kBodyPadding >= simdjson::SIMDJSON_PADDING,
                "request bodies keep the room simdjson reads past their end");
  // simdjson reads up to SIMDJSON_PADDING bytes past the end; a body without that much room
  // after it is read from a padded copy.
  std::optional<simdjson::padded_string> copy;
  simdjson::padded_string_view json(body.data(), body.size(), std::max(allocated, body.size()));
  if (json.padding() < simdjson::SIMDJSON_PADDING) {
    copy.emplace(body.data(), body.size());
    json = *copy;
  }
  PooledParser pooled;
  od::parser &parser = *pooled.parser;
  od::document doc;
  od::object request;
  if (parser.iterate(json).get(doc) || doc.get_object().get(request))
    return std::nullopt;
  std::vector<Tensor> inputs;
  bool sawInputs = false;
  for (auto item : request) {
    od::field field;
    std::string_view key;
    od::array given;
    if (std::move(item).get(field) || field.unescaped_key().get(key) || key != "inputs" ||
        sawInputs || field.value().get_array().get(given))
      return std::nullopt;
    sawInputs = true;
    for (auto element : given) {
      od::value value;
      if (element.get(value) || inputs.size() == entry.inputs.size())
        return std::nullopt;
      std::optional<Tensor> tensor = readTensor(value, entry.inputs[inputs.size()], body.size());
      if (!tensor)
        return std::nullopt;
      inputs.push_back(std::move(*tensor));
    }
  }
  if (!sawInputs || inputs.size() != entry.inputs.size() ||
      // Past the object there must be nothing but whitespace.
      doc.current_location().error() != simdjson::OUT_OF_BOUNDS)
    return std::nullopt;
  return inputs;
}

} // namespace courier::serve
