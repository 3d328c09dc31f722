// Input areas, arenas and the same-host regions. See executor/Arena.h.
#include "executor/Arena.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <tuple>

namespace courier::executor {

llvm::Expected<std::shared_ptr<Arena>> Arena::create(uint64_t bytes, const char *name) {
  llvm::Expected<SharedBuffer> buffer = SharedBuffer::create(bytes, name);
  if (!buffer)
    return buffer.takeError();
  if (llvm::Error error = buffer->sealSize())
    return std::move(error);
  auto arena = std::make_shared<Arena>();
  arena->buffer = std::move(*buffer);
  return arena;
}

llvm::Expected<std::shared_ptr<Arena>> ArenaPool::take(std::vector<std::shared_ptr<Arena>> &idle,
                                                       uint64_t size) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = idle.begin(); it != idle.end(); ++it)
      if ((*it)->buffer.size() >= size) {
        std::shared_ptr<Arena> arena = std::move(*it);
        idle.erase(it);
        return arena;
      }
  }
  uint64_t capacity = std::max(kMinArenaBytes, llvm::PowerOf2Ceil(size));
  llvm::Expected<std::shared_ptr<Arena>> arena = Arena::create(capacity, "courier-arena");
  if (!arena)
    return arena.takeError();
  std::lock_guard<std::mutex> lock(mutex);
  (*arena)->id = ++lastId;
  return arena;
}

void ArenaPool::give(std::vector<std::shared_ptr<Arena>> &idle, std::shared_ptr<Arena> arena) {
  if (!arena->pooled)
    return;
  std::lock_guard<std::mutex> lock(mutex);
  if (arena->buffer.size() <= kMaxArenaBytes && idle.size() < kIdleArenas) {
    idle.push_back(std::move(arena));
    return;
  }
  if (idle.size() >= kIdleArenas && arena->buffer.size() <= kMaxArenaBytes) {
    // Keep the larger ones: they serve every smaller request too.
    auto smallest = std::min_element(idle.begin(), idle.end(), [](const auto &a, const auto &b) {
      return a->buffer.size() < b->buffer.size();
    });
    if ((*smallest)->buffer.size() < arena->buffer.size())
      std::swap(*smallest, arena);
  }
  // The arena that is left goes here; the session's worker unmaps it with the next launch
  // (WorkerHost's mapped arenas).
}

InputArea::Impl::~Impl() {
  if (arena && pool)
    pool->give(pool->idleInputs, std::move(arena));
}

InputArea::InputArea() : impl(std::make_unique<Impl>()) {}
InputArea::InputArea(InputArea &&) noexcept = default;
InputArea &InputArea::operator=(InputArea &&) noexcept = default;
InputArea::~InputArea() = default;
char *InputArea::input(size_t i) const {
  if (!impl->buffers.empty())
    return impl->buffers[i].get();
  return impl->base() + impl->offsets[i];
}

SharedRegions::SharedRegions() : impl(std::make_unique<Impl>()) {}
SharedRegions::~SharedRegions() = default;
const SharedBuffer &SharedRegions::inputs() const { return impl->inputs->buffer; }
const SharedBuffer &SharedRegions::results() const { return impl->results->buffer; }

llvm::Expected<std::shared_ptr<SharedRegions>> SharedRegions::create(uint64_t inputBytes,
                                                                     uint64_t resultBytes) {
  // Worker arena ids of their own: a session's pool counts from 1, these from 2^63.
  static std::atomic<uint64_t> lastId{0};
  std::shared_ptr<SharedRegions> regions(new SharedRegions());
  for (auto [bytes, slot, name] :
       {std::tuple{inputBytes, &regions->impl->inputs, "courier-shm-inputs"},
        std::tuple{resultBytes, &regions->impl->results, "courier-shm-results"}}) {
    llvm::Expected<std::shared_ptr<Arena>> arena = Arena::create(bytes, name);
    if (!arena)
      return arena.takeError();
    (*arena)->pooled = false;
    (*arena)->id = (uint64_t(1) << 63) | ++lastId;
    *slot = std::move(*arena);
  }
  return regions;
}

} // namespace courier::executor
