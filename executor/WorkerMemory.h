// A session worker's shared memory: the arenas it maps from the executor or a same-host
// client, and where a launch's results go in a buffer it sends them in.
#ifndef COURIER_EXECUTOR_WORKERMEMORY_H
#define COURIER_EXECUTOR_WORKERMEMORY_H

#include "transport/SharedMemory.h"
#include "transport/Wire.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <vector>

namespace courier::executor {

/// Bytes of `t`'s elements, packed.
uint64_t packedBytesOf(const transport::OwnedTensor &t);

/// A mapped arena, known to the object host for as long as it is mapped (rememberArena,
/// executor/ObjectHost.h), so kernels may place allocations in it.
struct KnownArena {
  explicit KnownArena(transport::SharedBuffer mapped);
  ~KnownArena();
  KnownArena(const KnownArena &) = delete;
  KnownArena &operator=(const KnownArena &) = delete;
  transport::SharedBuffer buffer;
};

/// Where a launch's results go in a buffer: results the kernel computed in the arena, those
/// the host hands over with no allocation of their own (always packed row-major), may stay
/// where they are, and the others are packed after them.
class ResultLayout {
public:
  ResultLayout(const std::vector<transport::OwnedTensor> &results,
               llvm::MutableArrayRef<char> arena);

  /// Sets each result's offset, results kept in place at theirs in the arena and the rest laid
  /// out after them; returns the bytes they span.
  uint64_t layOut(bool keepInPlace);
  /// Packs the results at their offsets in `out`, but those kept in place.
  void pack(char *out, bool keptInPlace) const;

  const std::vector<transport::OwnedTensor> &results;
  llvm::MutableArrayRef<char> arena;
  std::vector<uint64_t> offsets;
  std::vector<bool> inPlace;
  uint64_t inPlaceEnd = 0;
  bool anyInPlace = false;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERMEMORY_H
