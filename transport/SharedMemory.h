// Shared memory between processes on one host: memfd-backed buffers, descriptors passed
// beside SOCK_SEQPACKET messages (SCM_RIGHTS), little-endian field encoding, and futex
// doorbells on words in shared pages. The executor's workers (executor/WorkerProtocol.h)
// and the same-host channel between a client and an executor (transport/SharedChannel.h)
// are built from these. Whatever arrives from the other process is untrusted.
#ifndef COURIER_TRANSPORT_SHAREDMEMORY_H
#define COURIER_TRANSPORT_SHAREDMEMORY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::transport {

/// A file descriptor closed when it goes.
class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd(other.release()) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept;
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd; }
  explicit operator bool() const { return fd >= 0; }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
  void reset(int next = -1);

private:
  int fd = -1;
};

/// A shared-memory buffer: a memfd mapped read-write. Either side creates one, fills it and
/// passes its descriptor; the other maps the same pages.
class SharedBuffer {
public:
  SharedBuffer() = default;
  SharedBuffer(SharedBuffer &&other) noexcept;
  SharedBuffer &operator=(SharedBuffer &&other) noexcept;
  SharedBuffer(const SharedBuffer &) = delete;
  SharedBuffer &operator=(const SharedBuffer &) = delete;
  ~SharedBuffer();

  /// A new zero-filled buffer of `size` bytes (at least one page is mapped).
  static llvm::Expected<SharedBuffer> create(uint64_t size, const char *name);
  /// Maps `fd`, which must be at least `size` bytes long (checked: the peer may lie). With
  /// `requireSealed`, the file must also be sealed against shrinking: a peer that kept its
  /// descriptor could otherwise truncate the file under this mapping, and the next read of
  /// it would kill this process with SIGBUS.
  static llvm::Expected<SharedBuffer> map(UniqueFd fd, uint64_t size, bool requireSealed = false);

  /// Maps all of `fd`, however long it is (sealed against shrinking, with `requireSealed`).
  static llvm::Expected<SharedBuffer> mapAll(UniqueFd fd, bool requireSealed = false);

  /// Seals the file's size (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): what a receiver that
  /// requires a sealed buffer needs before it maps it.
  llvm::Error sealSize();

  char *data() const { return base; }
  uint64_t size() const { return length; }
  int fd() const { return file.get(); }

private:
  UniqueFd file;
  char *base = nullptr;
  uint64_t length = 0;
  uint64_t mapped = 0;
};

/// Tensors are laid out at this alignment in payloads and shared buffers: compiled code may
/// assume its elements (and vectors of them) are aligned.
inline constexpr uint64_t kPayloadAlignment = 64;
inline uint64_t alignPayload(uint64_t n) {
  return (n + kPayloadAlignment - 1) & ~(kPayloadAlignment - 1);
}

/// Bytes in memory aligned to kPayloadAlignment, freed when they go.
struct FreeAligned {
  void operator()(char *bytes) const { std::free(bytes); }
};
using AlignedBytes = std::unique_ptr<char, FreeAligned>;

/// A copy of inline payload bytes at kPayloadAlignment; null for none.
llvm::Expected<AlignedBytes> copyAligned(llvm::StringRef bytes);

/// Appends fixed-width little-endian fields and length-prefixed strings.
class ByteWriter {
public:
  ByteWriter &u8(uint8_t value) {
    bytes.push_back(static_cast<char>(value));
    return *this;
  }
  ByteWriter &u64(uint64_t value);
  ByteWriter &i64(int64_t value) { return u64(static_cast<uint64_t>(value)); }
  ByteWriter &str(llvm::StringRef text);
  std::string take() { return std::move(bytes); }
  const std::string &view() const { return bytes; }

private:
  std::string bytes;
};

/// Reads what ByteWriter wrote; every read is bounds-checked, and a short or malformed
/// message leaves the reader failed rather than reading past the end.
class ByteReader {
public:
  explicit ByteReader(llvm::StringRef bytes) : bytes(bytes) {}
  uint8_t u8();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  /// A count of items that each take at least `minItemBytes`, refused past what is left.
  uint64_t count(uint64_t minItemBytes);
  llvm::StringRef str();
  llvm::StringRef rest();
  bool ok() const { return good; }
  bool atEnd() const { return good && pos == bytes.size(); }
  /// Marks the message malformed (a field read well but out of range): reads fail from now on.
  void fail() { good = false; }

private:
  llvm::StringRef bytes;
  size_t pos = 0;
  bool good = true;
};

/// One message with the descriptors that came with it.
struct Message {
  std::string bytes;
  std::vector<UniqueFd> fds;
};

/// Most descriptors one message carries (a same-host channel handed to a worker has five).
inline constexpr size_t kMaxMessageFds = 5;

/// Sends one message (and up to kMaxMessageFds descriptors) on a SOCK_SEQPACKET socket.
llvm::Error sendMessage(int socket, llvm::StringRef bytes, llvm::ArrayRef<int> fds = {});

/// Bytes sent on the unix socket `socket` that its peer has not received yet (SIOCOUTQ):
/// nonzero while a message waits, with whatever descriptors it carries.
llvm::Expected<uint64_t> unreceivedBytes(int socket);

/// Waits until `fd` has one of `events` or `until` passes, through interruptions: 1 when it
/// has, 0 when the time ran out, -1 on an error (errno says which).
int pollUntil(int fd, short events, std::chrono::steady_clock::time_point until);

/// How a receive ended.
enum class ReceiveStatus { Message, Closed, TimedOut, Interrupted };

/// Receives one message; waits until `deadline` (none: forever). A message larger than
/// `maxBytes`, or one that brought more descriptors than it may, is an error. For the
/// first `spin` the caller polls, yielding the core between polls, instead of sleeping: a
/// reply due within microseconds then costs no wake-up, most of a small launch's round trip.
llvm::Expected<ReceiveStatus>
receiveMessage(int socket, Message &out, size_t maxBytes,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
               std::chrono::microseconds spin = std::chrono::microseconds(0));

/// Futex doorbells: a 32-bit word in a shared mapping that one process changes and another
/// waits on. The word is the whole state; a wake without a change is harmless.
namespace doorbell {
/// Wakes every process waiting on `word` (after the caller changed it).
void ring(std::atomic<uint32_t> &word);
/// Sleeps while `word` holds `seen`, for at most `timeout`; returns early when it changes,
/// on a signal, or spuriously: callers re-read the word.
void sleep(std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds timeout);
/// A doorbell whose waiter says when it may be asleep, so that ringing costs a system call
/// only then: a waiter polling awake (spin) is told by the word alone. Both sides must use
/// these two calls; a peer that does not is never woken early.
/// Stores `value` in `word`, then wakes its waiter if `sleeping` says it may be asleep.
void set(std::atomic<uint32_t> &word, uint32_t value, const std::atomic<uint32_t> &sleeping);
/// As sleep(), first saying in `sleeping` that the caller may be asleep.
void sleep(std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds timeout,
           std::atomic<uint32_t> &sleeping);
/// Polls `word` while it holds `seen`, yielding the core between reads, for at most `spin`.
/// True if it changed. With `pauseFirst`, it first polls that long without yielding (a
/// system call that can miss the change by its own length): only for a path of two processes,
/// since a third polling process would take the core the one with work needs.
bool spin(const std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds spin,
          std::chrono::nanoseconds pauseFirst = std::chrono::nanoseconds(0));
/// Polls either word while it holds its `seen` value, as spin(); 1 or 2 says which changed
/// (the first if both), 0 that neither did.
int spinEither(const std::atomic<uint32_t> &first, uint32_t firstSeen,
               const std::atomic<uint32_t> &second, uint32_t secondSeen,
               std::chrono::nanoseconds spin, std::chrono::nanoseconds pauseFirst);
/// Sleeps while both words hold their `seen` values, for at most `timeout`, each waiter's
/// flag set meanwhile (futex_waitv; where the kernel lacks it, sleeps on `first` for at most
/// a millisecond). Returns early on a change, a signal, or spuriously.
void sleepEither(std::atomic<uint32_t> &first, uint32_t firstSeen, std::atomic<uint32_t> &firstFlag,
                 std::atomic<uint32_t> &second, uint32_t secondSeen,
                 std::atomic<uint32_t> &secondFlag, std::chrono::nanoseconds timeout);
/// How long a two-process path polls without yielding: about what a futex round trip and a
/// small launch take on a virtual machine.
inline constexpr std::chrono::nanoseconds kPauseFirst{5000};
} // namespace doorbell

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SHAREDMEMORY_H
