// Large buffers kept for reuse in process (see ResultBlocks.h).
#include "executor/ResultBlocks.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace courier::executor {

namespace {

using Clock = std::chrono::steady_clock;

struct IdleBlock {
  void *pointer;
  size_t size; ///< Usable bytes, as the C allocator reports them.
  Clock::time_point since;
};

struct Blocks {
  std::atomic<bool> enabled{false};
  std::mutex mutex;
  std::vector<IdleBlock> idle; ///< Oldest first.
  size_t idleBytes = 0;
  uint64_t reused = 0, missed = 0, kept = 0;

  /// Removes idle blocks from the front while `drop` says so; returns them to free unlocked.
  template <typename Drop> void dropOldest(std::vector<void *> &freed, Drop drop) {
    size_t n = 0;
    while (n < idle.size() && drop(idle[n])) {
      idleBytes -= idle[n].size;
      freed.push_back(idle[n].pointer);
      ++n;
    }
    idle.erase(idle.begin(), idle.begin() + n);
  }
};

Blocks &blocks() {
  // Never destroyed: kernels' buffers may be given back while the process exits.
  static Blocks *instance = new Blocks;
  return *instance;
}

void freeAll(const std::vector<void *> &freed) {
  for (void *pointer : freed)
    std::free(pointer);
}

} // namespace

void enableBlockReuse() { blocks().enabled.store(true, std::memory_order_release); }

void *takeBlock(size_t size, size_t alignment) {
  Blocks &b = blocks();
  if (size < kReusedBlockBytes || !b.enabled.load(std::memory_order_acquire))
    return nullptr;
  // A block much larger than asked for would hold memory the caller does not use.
  size_t most = size + size / 4 + 4096;
  std::vector<void *> freed;
  void *taken = nullptr;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    Clock::time_point stale = Clock::now() - std::chrono::seconds(kIdleBlockSeconds);
    b.dropOldest(freed, [&](const IdleBlock &block) { return block.since < stale; });
    auto best = b.idle.end();
    for (auto it = b.idle.begin(); it != b.idle.end(); ++it)
      if (it->size >= size && it->size <= most &&
          reinterpret_cast<uintptr_t>(it->pointer) % std::max<size_t>(alignment, 1) == 0 &&
          (best == b.idle.end() || it->size < best->size))
        best = it;
    if (best != b.idle.end()) {
      taken = best->pointer;
      b.idleBytes -= best->size;
      b.idle.erase(best);
      ++b.reused;
    } else {
      ++b.missed;
    }
  }
  freeAll(freed);
  return taken;
}

void giveBlock(void *pointer) {
  if (!pointer)
    return;
  Blocks &b = blocks();
  size_t size = malloc_usable_size(pointer);
  if (size < kReusedBlockBytes || size > kMaxIdleBlockBytes ||
      !b.enabled.load(std::memory_order_acquire)) {
    std::free(pointer);
    return;
  }
  std::vector<void *> freed;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    Clock::time_point now = Clock::now(), stale = now - std::chrono::seconds(kIdleBlockSeconds);
    // Room is made by dropping the oldest: the newest are the likeliest to be asked for next.
    b.dropOldest(freed, [&](const IdleBlock &block) {
      return block.since < stale || b.idle.size() - freed.size() + 1 > kMaxIdleBlocks ||
             b.idleBytes + size > kMaxIdleBlockBytes;
    });
    b.idle.push_back({pointer, size, now});
    b.idleBytes += size;
    ++b.kept;
  }
  freeAll(freed);
}

void trimBlocks() {
  Blocks &b = blocks();
  std::vector<void *> freed;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    b.dropOldest(freed, [](const IdleBlock &) { return true; });
  }
  freeAll(freed);
}

BlockCounts blockCounts() {
  Blocks &b = blocks();
  std::lock_guard<std::mutex> lock(b.mutex);
  return {b.reused, b.missed, b.kept, b.idleBytes};
}

} // namespace courier::executor
