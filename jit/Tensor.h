// Tensors as the engine takes and returns them: element types, an owning tensor, a borrowed
// one that reads a caller's buffer in place, typed views of either, and their JSON forms.
// Installed as <courier/Tensor.h>; <courier/Engine.h> includes it.
#ifndef COURIER_JIT_TENSOR_H
#define COURIER_JIT_TENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace courier {

/// Element types an entry may take or return. Each value is also the type's code on the
/// module worker's wire: new types go at the end.
enum class DType { F16, F32, F64, I1, I8, I16, I32, I64, BF16, UI8, UI16, UI32, UI64 };

/// "f32", "ui8", "bf16", ...: MLIR's spelling of the element type, and the name used on the
/// command line and in JSON. An entry declared on `tensor<4xui8>` takes and returns "ui8";
/// the bytes are those of the signless i8 its kernels compute on.
llvm::StringRef dtypeName(DType dtype);
std::optional<DType> parseDType(llvm::StringRef name);
/// Bytes per element in memory (i1 takes a byte).
size_t dtypeSize(DType dtype);
/// True for bf16, f16, f32 and f64.
bool isFloatDType(DType dtype);
/// Every dtype's name for messages, floats first, then by size: "bf16, f16, f32, ..., ui32 or
/// ui64", with `last` between the last two.
std::string dtypeNames(llvm::StringRef last = " or ");
/// The DType whose enum value is `code`, or nullopt if no DType has it.
std::optional<DType> dtypeFromCode(uint64_t code);

/// The DType whose elements are C++ `T`s: float f32, double f64, bool i1, int8_t to int64_t
/// i8 to i64, uint8_t to uint64_t ui8 to ui64. f16 and bf16 have no C++ type here: read them
/// with Tensor::at or through their bytes.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::I1; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::I8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::I16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UI8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::UI16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::UI32; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::UI64; };
template <typename T> inline constexpr DType dtypeOf = DTypeOf<std::remove_cv_t<T>>::value;
static_assert(sizeof(bool) == 1, "an i1 element takes a byte, as a bool must");

/// The number of elements of `shape`, or nullopt if a dimension is negative or the count of
/// bytes (`elemSize` each) does not fit in 63 bits.
std::optional<int64_t> checkedElementCount(llvm::ArrayRef<int64_t> shape, size_t elemSize = 1);

namespace detail {
/// Ends the program saying that `what` asked for `wanted` elements of a `held` tensor: a
/// typed view of the wrong type is a programming error, as an index out of range is.
[[noreturn]] void viewMismatch(const char *what, DType held, DType wanted);
} // namespace detail

struct Tensor;

/// A tensor whose bytes belong to someone else: invoke reads them where they are, without a
/// copy. A TensorRef holds a pointer, not the bytes: they must stay valid, and unchanged,
/// until every invoke given the ref has returned; the shape is the ref's own. Invoke never
/// writes through it. Cheap to copy; any thread may read one while no one writes the bytes.
struct TensorRef {
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t, 4> shape;
  const uint8_t *data = nullptr;
  size_t size = 0; ///< In bytes; invoke checks it against the shape.

  /// `values` in place, `shape` row-major: TensorRef::of<float>({2, 2}, buffer).
  template <typename T>
  static TensorRef of(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<T> values) {
    return {dtypeOf<T>, llvm::SmallVector<int64_t, 4>(shape.begin(), shape.end()),
            reinterpret_cast<const uint8_t *>(values.data()), values.size() * sizeof(T)};
  }
  /// `size` bytes at `data` as elements of `dtype`, for element types without a C++ type and
  /// buffers typed elsewhere.
  static TensorRef of(DType dtype, llvm::ArrayRef<int64_t> shape, const void *data, size_t size) {
    return {dtype, llvm::SmallVector<int64_t, 4>(shape.begin(), shape.end()),
            static_cast<const uint8_t *>(data), size};
  }

  /// The product of the shape.
  int64_t numElements() const;
  /// True when the elements are `T`s (see dtypeOf).
  template <typename T> bool holds() const { return dtype == dtypeOf<T>; }
  /// The elements as `T`s, row-major, in the borrowed buffer. A `T` the tensor does not hold
  /// ends the program (check holds<T>() when the dtype is not known).
  template <typename T> llvm::ArrayRef<T> view() const {
    if (!holds<T>())
      detail::viewMismatch("TensorRef::view", dtype, dtypeOf<T>);
    return {reinterpret_cast<const T *>(data), size / sizeof(T)};
  }
  /// A tensor that owns a copy of the bytes.
  Tensor copy() const;
};

/// A caller's buffer that invoke writes a result into, in place (InvokeOptions::outputs):
/// its dtype and shape must be the result's, and `size` the bytes they take. Invoke writes the
/// whole buffer and nothing else; the bytes must stay valid until the invoke returns.
struct OutputRef {
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t, 4> shape;
  uint8_t *data = nullptr;
  size_t size = 0; ///< In bytes; invoke checks it against the shape.

  /// `values` to be written in place, `shape` row-major: OutputRef::of<float>({2, 2}, buffer).
  template <typename T>
  static OutputRef of(llvm::ArrayRef<int64_t> shape, llvm::MutableArrayRef<T> values) {
    return {dtypeOf<T>, llvm::SmallVector<int64_t, 4>(shape.begin(), shape.end()),
            reinterpret_cast<uint8_t *>(values.data()), values.size() * sizeof(T)};
  }
  /// `size` bytes at `data` to hold elements of `dtype`.
  static OutputRef of(DType dtype, llvm::ArrayRef<int64_t> shape, void *data, size_t size) {
    return {dtype, llvm::SmallVector<int64_t, 4>(shape.begin(), shape.end()),
            static_cast<uint8_t *>(data), size};
  }
  /// The bytes of `tensor`, with its dtype and shape.
  static OutputRef into(Tensor &tensor);
};

/// The bytes of a Tensor: a contiguous byte buffer with the parts of std::vector<uint8_t>'s
/// interface that code uses (data, size, resize, iteration, comparison, conversion both
/// ways), which can also adopt a buffer allocated elsewhere together with the function that
/// releases it, so that a kernel's result becomes a tensor without a copy. Bytes that resize
/// adds are zero, as a vector's are; resizeForOverwrite leaves them for the caller to write.
/// Growing an adopted buffer moves the bytes to storage of its own.
class TensorBytes {
public:
  using value_type = uint8_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = uint8_t &;
  using const_reference = const uint8_t &;
  using pointer = uint8_t *;
  using const_pointer = const uint8_t *;
  using iterator = uint8_t *;
  using const_iterator = const uint8_t *;
  /// Releases an adopted allocation.
  using Release = void (*)(void *allocation);

  TensorBytes() = default;
  explicit TensorBytes(size_t count) { resize(count); }
  TensorBytes(size_t count, uint8_t value) { resize(count, value); }
  TensorBytes(std::initializer_list<uint8_t> values) { assign(values.begin(), values.end()); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  TensorBytes(It first, It last) {
    assign(first, last);
  }
  TensorBytes(const std::vector<uint8_t> &values) { assign(values.begin(), values.end()); }
  TensorBytes(const TensorBytes &other) { assign(other.begin(), other.end()); }
  TensorBytes(TensorBytes &&other) noexcept { steal(other); }
  TensorBytes &operator=(const TensorBytes &other) {
    if (this != &other)
      assign(other.begin(), other.end());
    return *this;
  }
  TensorBytes &operator=(TensorBytes &&other) noexcept {
    if (this != &other) {
      reset();
      steal(other);
    }
    return *this;
  }
  TensorBytes &operator=(const std::vector<uint8_t> &values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~TensorBytes() { reset(); }

  /// `size` bytes at `data`, inside `allocation`, which `release` frees once these bytes are
  /// no longer needed.
  static TensorBytes adopt(void *allocation, uint8_t *data, size_t size, Release release);
  /// `count` bytes whose values are left for the caller to write.
  static TensorBytes uninitialized(size_t count) {
    TensorBytes bytes;
    bytes.resizeForOverwrite(count);
    return bytes;
  }

  uint8_t *data() { return first; }
  const uint8_t *data() const { return first; }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  size_t capacity() const { return room; }
  iterator begin() { return first; }
  iterator end() { return first + count; }
  const_iterator begin() const { return first; }
  const_iterator end() const { return first + count; }
  const_iterator cbegin() const { return first; }
  const_iterator cend() const { return first + count; }
  uint8_t &operator[](size_t i) { return first[i]; }
  const uint8_t &operator[](size_t i) const { return first[i]; }
  uint8_t &front() { return first[0]; }
  const uint8_t &front() const { return first[0]; }
  uint8_t &back() { return first[count - 1]; }
  const uint8_t &back() const { return first[count - 1]; }

  void reserve(size_t bytes);
  void resize(size_t bytes, uint8_t value = 0) {
    size_t had = count;
    resizeForOverwrite(bytes);
    if (bytes > had)
      std::memset(first + had, value, bytes - had);
  }
  void resizeForOverwrite(size_t bytes) {
    if (bytes > room)
      reserve(std::max(bytes, room + room / 2));
    count = bytes;
  }
  void clear() { count = 0; }
  void push_back(uint8_t value) {
    resizeForOverwrite(count + 1);
    first[count - 1] = value;
  }
  template <typename It> void assign(It from, It to) {
    size_t n = static_cast<size_t>(std::distance(from, to));
    clear();
    resizeForOverwrite(n);
    std::copy(from, to, first);
  }
  void assign(size_t bytes, uint8_t value) {
    clear();
    resize(bytes, value);
  }
  template <typename It> iterator insert(const_iterator at, It from, It to) {
    size_t offset = static_cast<size_t>(at - first),
           n = static_cast<size_t>(std::distance(from, to));
    size_t had = count;
    resizeForOverwrite(count + n);
    std::memmove(first + offset + n, first + offset, had - offset);
    std::copy(from, to, first + offset);
    return first + offset;
  }
  void swap(TensorBytes &other) noexcept {
    TensorBytes held(std::move(other));
    other = std::move(*this);
    *this = std::move(held);
  }

  operator std::vector<uint8_t>() const { return std::vector<uint8_t>(begin(), end()); }

  friend bool operator==(const TensorBytes &a, const TensorBytes &b) {
    return equal(a, b.data(), b.size());
  }
  friend bool operator!=(const TensorBytes &a, const TensorBytes &b) { return !(a == b); }
  friend bool operator==(const TensorBytes &a, const std::vector<uint8_t> &b) {
    return equal(a, b.data(), b.size());
  }
  friend bool operator!=(const TensorBytes &a, const std::vector<uint8_t> &b) { return !(a == b); }
  friend bool operator==(const std::vector<uint8_t> &a, const TensorBytes &b) { return b == a; }
  friend bool operator!=(const std::vector<uint8_t> &a, const TensorBytes &b) { return !(b == a); }

private:
  static bool equal(const TensorBytes &a, const uint8_t *data, size_t size) {
    return a.count == size && (size == 0 || std::memcmp(a.first, data, size) == 0);
  }
  void steal(TensorBytes &other) {
    allocation = std::exchange(other.allocation, nullptr);
    release = std::exchange(other.release, nullptr);
    first = std::exchange(other.first, nullptr);
    count = std::exchange(other.count, 0);
    room = std::exchange(other.room, 0);
  }
  void reset();

  void *allocation = nullptr; ///< What `release` frees; null when nothing is held.
  Release release = nullptr;
  uint8_t *first = nullptr;
  size_t count = 0, room = 0;
};

/// An owning, contiguous, row-major tensor. A scalar is a tensor of rank 0. A value type:
/// copies copy the bytes; one thread may write a tensor while no other reads it.
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  TensorBytes bytes;

  /// The product of the shape; see checkedElementCount for untrusted shapes.
  int64_t numElements() const;

  /// A tensor holding a copy of `values` with `shape`: Tensor::of<float>({3}, {1.5f, 2, 3}).
  template <typename T> static Tensor of(std::vector<int64_t> shape, llvm::ArrayRef<T> values) {
    Tensor t{dtypeOf<T>, std::move(shape), TensorBytes::uninitialized(values.size() * sizeof(T))};
    if (!values.empty())
      std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }
  /// A tensor holding `values` (converted to `dtype`) with `shape`.
  static Tensor fromDoubles(DType dtype, std::vector<int64_t> shape, llvm::ArrayRef<double> values);

  /// Element `i` (row-major) as a double, whatever the dtype.
  double at(int64_t i) const;
  /// True when the elements are `T`s (see dtypeOf).
  template <typename T> bool holds() const { return dtype == dtypeOf<T>; }
  /// The elements as `T`s, row-major: for (float x : result.view<float>()). Valid while the
  /// tensor lives and its bytes are not resized. A `T` the tensor does not hold ends the
  /// program (check holds<T>() when the dtype is not known).
  template <typename T> llvm::ArrayRef<T> view() const {
    if (!holds<T>())
      detail::viewMismatch("Tensor::view", dtype, dtypeOf<T>);
    return {reinterpret_cast<const T *>(bytes.data()), bytes.size() / sizeof(T)};
  }
  template <typename T> llvm::MutableArrayRef<T> view() {
    if (!holds<T>())
      detail::viewMismatch("Tensor::view", dtype, dtypeOf<T>);
    return {reinterpret_cast<T *>(bytes.data()), bytes.size() / sizeof(T)};
  }
  /// A TensorRef to this tensor's bytes, valid while it lives and they are not resized.
  TensorRef ref() const;
};

struct TensorSpec;

/// Reads a tensor for `spec` from JSON: a number or boolean for a scalar, nested arrays
/// (the shape follows the nesting), or {"dtype", "shape", "data"} with flat or nested data.
llvm::Expected<Tensor> tensorFromJSON(const llvm::json::Value &value, const TensorSpec &spec);

/// `value` as a whole number from INT64_MIN to UINT64_MAX, as its sign (true for negative) and
/// magnitude: an integer, or a double with no fraction (2.0, 1e3); nullopt for anything else.
/// Defined for every double, unlike llvm::json::Value::getAsInteger, which converts 2^63 to
/// int64 (undefined behaviour) when a client writes 9223372036854775808.0.
std::optional<std::pair<bool, uint64_t>> jsonWholeNumber(const llvm::json::Value &value);

/// `value` as a non-negative whole number (a size, an offset, a level), or nullopt.
std::optional<uint64_t> jsonCount(const llvm::json::Value &value);

/// llvm::json::parse, refusing input nested deeper than `maxDepth` arrays and objects, so
/// hostile input cannot exhaust the parser's stack.
llvm::Expected<llvm::json::Value> parseJSON(llvm::StringRef text, unsigned maxDepth = 128);

/// {"dtype": "f32", "shape": [2, 2], "data": [...]} with flat, row-major data.
llvm::json::Value tensorToJSON(const Tensor &tensor);

/// The same object appended to `out`, each number in the shortest text that reads back as the
/// same value of the tensor's own element type, as std::to_chars writes it (an f32 as a float:
/// 0.6865874, not the 0.68658739328384399 of the double it widens to; integers exactly), with
/// no llvm::json::Value per element. Reserves the most the text can take first, so that it is
/// written once, never copied to grow.
void writeTensorJSON(std::string &out, const Tensor &tensor);
/// The same object written to `os`.
void writeTensorJSON(llvm::raw_ostream &os, const Tensor &tensor);

/// The type of one argument or result of an entry.
struct TensorSpec {
  DType dtype = DType::F32;
  std::vector<int64_t> shape; ///< -1 marks a dynamic dimension.
  bool isScalar = false;      ///< Passed by value rather than as a buffer.

  /// "tensor<4x?xf32>" or "f64".
  std::string str() const;
};

} // namespace courier

#endif // COURIER_JIT_TENSOR_H
