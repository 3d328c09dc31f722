// Ranked memref descriptors as compiled code lays them out, and the one strided copy every
// layer uses. A descriptor of rank R is 3 + 2R 64-bit words: {allocated, aligned, offset,
// sizes[R], strides[R]}, strides in elements (MLIR's StridedMemRefType). Header-only; needs
// LLVM's ADT alone.
#ifndef COURIER_ABI_MEMREF_H
#define COURIER_ABI_MEMREF_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace courier::abi {

/// Words a descriptor of rank `rank` takes.
constexpr size_t descriptorWords(size_t rank) { return 3 + 2 * rank; }

/// A view of a descriptor in memory; it owns nothing. `Word` is `const int64_t` for reading
/// (MemRefView) and `int64_t` for filling one in (MutableMemRefView).
template <typename Word> class BasicMemRefView {
  using Ref = std::conditional_t<std::is_const_v<Word>, llvm::ArrayRef<int64_t>,
                                 llvm::MutableArrayRef<int64_t>>;
  using Pointer = std::conditional_t<std::is_const_v<Word>, const void *, void *>;

public:
  BasicMemRefView(Pointer descriptor, size_t rank)
      : words(static_cast<Word *>(descriptor)), rank_(rank) {}

  size_t rank() const { return rank_; }
  void *allocated() const { return reinterpret_cast<void *>(words[0]); }
  void *aligned() const { return reinterpret_cast<void *>(words[1]); }
  int64_t offset() const { return words[2]; }
  Ref sizes() const { return Ref(words + 3, rank_); }
  Ref strides() const { return Ref(words + 3 + rank_, rank_); }
  /// Address of element [0, ..., 0] for elements `elemSize` bytes wide.
  void *data(int64_t elemSize) const {
    return static_cast<char *>(aligned()) + offset() * elemSize;
  }

  /// Fills in a descriptor of `sizes` and `strides` (of this view's rank) over `data`.
  template <typename W = Word, typename = std::enable_if_t<!std::is_const_v<W>>>
  void fill(void *allocated, void *aligned, int64_t offset, llvm::ArrayRef<int64_t> sizes,
            llvm::ArrayRef<int64_t> strides) const {
    words[0] = reinterpret_cast<int64_t>(allocated);
    words[1] = reinterpret_cast<int64_t>(aligned);
    words[2] = offset;
    std::copy(sizes.begin(), sizes.end(), words + 3);
    std::copy(strides.begin(), strides.end(), words + 3 + rank_);
  }

private:
  Word *words;
  size_t rank_;
};

using MemRefView = BasicMemRefView<const int64_t>;
using MutableMemRefView = BasicMemRefView<int64_t>;

/// Elements a shape holds: 1 for rank 0, 0 when a dimension is 0.
inline int64_t elementCount(llvm::ArrayRef<int64_t> sizes) {
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  return count;
}

/// Row-major strides for `sizes`, into `strides` (as many): a dimension of size 0 counts as 1,
/// as MLIR's canonical strides do.
inline void rowMajorStrides(llvm::ArrayRef<int64_t> sizes, llvm::MutableArrayRef<int64_t> strides) {
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(1, sizes[d]);
  }
}

inline llvm::SmallVector<int64_t, 4> rowMajorStrides(llvm::ArrayRef<int64_t> sizes) {
  llvm::SmallVector<int64_t, 4> strides(sizes.size());
  rowMajorStrides(sizes, strides);
  return strides;
}

/// Whether `strides` lay `sizes` out row-major and dense: a dimension of size 1 may have any
/// stride, and a tensor without elements is row-major whatever its strides.
inline bool isRowMajor(llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> strides) {
  if (llvm::is_contained(sizes, 0))
    return true;
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected)
      return false;
    expected *= sizes[d];
  }
  return true;
}

/// Copies the tensor of `sizes` and `strides` (in elements of `elemSize` bytes) whose element
/// [0, ..., 0] is at `data` into `out`, row-major: elementCount(sizes) * elemSize bytes. A
/// row-major tensor is one memcpy; a tensor without elements copies nothing.
inline void copyRowMajor(const void *data, int64_t elemSize, llvm::ArrayRef<int64_t> sizes,
                         llvm::ArrayRef<int64_t> strides, void *out) {
  int64_t count = elementCount(sizes);
  if (count <= 0)
    return;
  const char *base = static_cast<const char *>(data);
  char *to = static_cast<char *>(out);
  if (isRowMajor(sizes, strides)) {
    std::memcpy(to, base, static_cast<size_t>(count * elemSize));
    return;
  }
  llvm::SmallVector<int64_t, 4> index(sizes.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d)
      offset += index[d] * strides[d];
    std::memcpy(to + n * elemSize, base + offset * elemSize, static_cast<size_t>(elemSize));
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < sizes[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace courier::abi

#endif // COURIER_ABI_MEMREF_H
