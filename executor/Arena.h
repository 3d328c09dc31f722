// The bytes a launch's inputs are written into before it runs (InputArea's parts), and the
// shared-memory arenas a session reuses launch after launch, so large tensors cross to its
// worker (and from a same-host client) without fresh pages being faulted in each time.
#ifndef COURIER_EXECUTOR_ARENA_H
#define COURIER_EXECUTOR_ARENA_H

#include "executor/KernelHost.h"

#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace courier::executor {

/// A shared-memory buffer, its size sealed: the worker (and a same-host client) gets the
/// descriptor, and none of them may shrink what another maps. The worker keeps its own
/// mapping of each arena by id.
struct Arena {
  uint64_t id = 0;
  SharedBuffer buffer;
  /// False for a same-host client's regions (SharedRegions), which no pool takes back.
  bool pooled = true;

  static llvm::Expected<std::shared_ptr<Arena>> create(uint64_t bytes, const char *name);
};

/// A session's idle arenas, for inputs and for results. Bounded: arenas larger than
/// kMaxArenaBytes are used once, and at most kIdleArenas of each kind wait for reuse.
class ArenaPool {
public:
  static constexpr uint64_t kMinArenaBytes = uint64_t(1) << 20;
  static constexpr uint64_t kMaxArenaBytes = uint64_t(256) << 20;
  static constexpr size_t kIdleArenas = 2;

  /// An idle arena of at least `size` bytes, or a new one.
  llvm::Expected<std::shared_ptr<Arena>> take(std::vector<std::shared_ptr<Arena>> &idle,
                                              uint64_t size);
  /// Gives `arena` back for reuse, or drops it.
  void give(std::vector<std::shared_ptr<Arena>> &idle, std::shared_ptr<Arena> arena);

  std::vector<std::shared_ptr<Arena>> idleInputs, idleResults;
  /// Bytes of the session's last results: the size of the next result arena to lend.
  std::atomic<uint64_t> lastResultBytes{0};

private:
  std::mutex mutex;
  uint64_t lastId = 0;
};

struct MallocDeleter {
  void operator()(char *p) const { std::free(p); }
};
using MallocBuffer = std::unique_ptr<char, MallocDeleter>;

/// Where a launch's input bytes are received: in this process one buffer per tensor; for a
/// worker one area it reads in place (inline in the request, or an arena when large).
struct InputArea::Impl {
  std::vector<MallocBuffer> buffers;
  std::string inlineBytes;
  /// Large inputs: an arena of the session's, given back when the area goes.
  std::shared_ptr<ArenaPool> pool;
  std::shared_ptr<Arena> arena;
  std::vector<uint64_t> offsets; ///< Per input, into inlineBytes or the arena.
  uint64_t total = 0;
  char *base() { return arena ? arena->buffer.data() : inlineBytes.data(); }
  ~Impl();
};

struct SharedRegions::Impl {
  std::shared_ptr<Arena> inputs, results;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_ARENA_H
