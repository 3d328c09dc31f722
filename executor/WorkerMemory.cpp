// A session worker's mapped arenas and the layout of a launch's results.
#include "executor/WorkerMemory.h"

#include "abi/MemRef.h"
#include "executor/ObjectHost.h"

#include "llvm/ADT/STLExtras.h"

namespace courier::executor {

using transport::OwnedTensor;

uint64_t packedBytesOf(const OwnedTensor &t) {
  return static_cast<uint64_t>(t.elemSize) * static_cast<uint64_t>(abi::elementCount(t.sizes));
}

KnownArena::KnownArena(transport::SharedBuffer mapped) : buffer(std::move(mapped)) {
  rememberArena(buffer.data(), buffer.size());
}

KnownArena::~KnownArena() { forgetArena(buffer.data()); }

ResultLayout::ResultLayout(const std::vector<OwnedTensor> &results,
                           llvm::MutableArrayRef<char> arena)
    : results(results), arena(arena), offsets(results.size()), inPlace(results.size(), false) {
  for (size_t i = 0; i < results.size(); ++i) {
    const OwnedTensor &t = results[i];
    if (!arena.empty() && !t.allocated) {
      inPlace[i] = true;
      inPlaceEnd = std::max(inPlaceEnd, uint64_t(static_cast<const char *>(t.data) - arena.data()) +
                                            packedBytesOf(t));
    }
  }
  anyInPlace = llvm::is_contained(inPlace, true);
}

uint64_t ResultLayout::layOut(bool keepInPlace) {
  uint64_t size = keepInPlace ? inPlaceEnd : 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const OwnedTensor &t = results[i];
    if (keepInPlace && inPlace[i]) {
      offsets[i] = uint64_t(static_cast<const char *>(t.data) - arena.data());
    } else {
      offsets[i] = size = transport::alignPayload(size);
      size += packedBytesOf(t);
    }
  }
  return size;
}

void ResultLayout::pack(char *out, bool keptInPlace) const {
  for (size_t i = 0; i < results.size(); ++i)
    if (!keptInPlace || !inPlace[i]) {
      const OwnedTensor &t = results[i];
      transport::wire::packInto(transport::TensorView{t.data, t.elemSize, t.sizes, t.strides},
                                out + offsets[i]);
    }
}

} // namespace courier::executor
