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

#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// An owning, contiguous, row-major tensor. A scalar is a tensor of rank 0. A value type:
/// copies copy the bytes; one thread may write a tensor while no other reads it.
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// The product of the shape; see checkedElementCount for untrusted shapes.
  int64_t numElements() const;

  /// A tensor holding a copy of `values` with `shape`: Tensor::of<float>({3}, {1.5f, 2, 3}).
  template <typename T> static Tensor of(std::vector<int64_t> shape, llvm::ArrayRef<T> values) {
    Tensor t{dtypeOf<T>, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
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
