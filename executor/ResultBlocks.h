// Large buffers kept for reuse in process: a block that a kernel's result or temporary
// occupied goes back here when freed, and the next launch asking for about that size takes it
// with its pages already faulted in, instead of a fresh mapping the kernel faults in and the
// system zeroes page by page on every call.
#ifndef COURIER_EXECUTOR_RESULTBLOCKS_H
#define COURIER_EXECUTOR_RESULTBLOCKS_H

#include <cstddef>
#include <cstdint>

namespace courier::executor {

/// Blocks of at least this many bytes are kept for reuse; smaller ones the C allocator
/// serves well enough.
inline constexpr size_t kReusedBlockBytes = 256 * 1024;
/// Most bytes, and most blocks, kept idle at once; a block freed past them is given back to
/// the C allocator, as is a block idle for longer than kIdleBlockSeconds.
inline constexpr size_t kMaxIdleBlockBytes = size_t(256) << 20;
inline constexpr size_t kMaxIdleBlocks = 16;
inline constexpr int kIdleBlockSeconds = 5;

/// Turns reuse on for this process (the in-process backend does, when it is created). Off,
/// takeBlock finds nothing and giveBlock frees: a sandboxed worker keeps no memory it does
/// not use.
void enableBlockReuse();

/// An idle block of at least `size` bytes (and not much more) whose address is a multiple of
/// `alignment`, now the caller's; null when none fits, or `size` is under kReusedBlockBytes.
/// Its bytes are whatever its last user left. Thread-safe.
void *takeBlock(size_t size, size_t alignment = 1);

/// Takes back `pointer`, a C allocator's allocation the caller owns (or null): kept for reuse
/// when it is large and there is room, otherwise freed with std::free. Thread-safe.
void giveBlock(void *pointer);

/// Frees every idle block now.
void trimBlocks();

/// What reuse has done in this process so far, for tests and metrics.
struct BlockCounts {
  uint64_t reused = 0;    ///< Large requests served with an idle block.
  uint64_t missed = 0;    ///< Large requests no idle block fitted (the C allocator served them).
  uint64_t kept = 0;      ///< Blocks given back and kept.
  uint64_t idleBytes = 0; ///< Bytes of the blocks idle now.
};
BlockCounts blockCounts();

} // namespace courier::executor

#endif // COURIER_EXECUTOR_RESULTBLOCKS_H
