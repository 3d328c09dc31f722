// What the executor's main process and a session's worker process say to each other: small
// binary messages on a SOCK_SEQPACKET socketpair, with tensor and object bytes either inline
// (small) or in a memfd passed beside the message (SCM_RIGHTS). Both ends treat what they
// receive as untrusted: a worker runs shipped code, which can write anything to its socket.
#ifndef COURIER_EXECUTOR_WORKERPROTOCOL_H
#define COURIER_EXECUTOR_WORKERPROTOCOL_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::executor {

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

  /// Maps all of `fd`, however long it is.
  static llvm::Expected<SharedBuffer> mapAll(UniqueFd fd);

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

/// Payloads up to this size travel inline in the message; larger ones in a memfd.
inline constexpr uint64_t kInlineBytes = 48 * 1024;
/// Largest message either side accepts (inline payload plus headers).
inline constexpr size_t kMaxMessageBytes = kInlineBytes + 64 * 1024;

enum class MessageKind : uint8_t {
  // main -> worker
  AddObject = 1,
  RemoveObject,
  Launch,
  Call,
  // server -> module worker (jit/ModuleWorker.h)
  Compile = 16,
  Invoke,
  Unload,
  // worker -> main
  Ready = 64,
  Done,    ///< Success; the payload depends on the request.
  Failed,  ///< {code, message}: the request failed, the worker is fine.
  Crashed, ///< Written by the worker's fatal-signal handler just before it dies.
};

/// Appends fixed-width little-endian fields and length-prefixed strings.
class MessageWriter {
public:
  explicit MessageWriter(MessageKind kind) { bytes.push_back(static_cast<char>(kind)); }
  MessageWriter &u64(uint64_t value);
  MessageWriter &i64(int64_t value) { return u64(static_cast<uint64_t>(value)); }
  MessageWriter &str(llvm::StringRef text);
  std::string take() { return std::move(bytes); }
  const std::string &view() const { return bytes; }

private:
  std::string bytes;
};

/// Reads what MessageWriter wrote; every read is bounds-checked, and a short or malformed
/// message leaves the reader failed rather than reading past the end.
class MessageReader {
public:
  explicit MessageReader(llvm::StringRef bytes);
  MessageKind kind() const { return messageKind; }
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  /// A count of items that each take at least `minItemBytes`, refused past what is left.
  uint64_t count(uint64_t minItemBytes);
  llvm::StringRef str();
  llvm::StringRef rest();
  bool ok() const { return good; }
  bool atEnd() const { return good && pos == bytes.size(); }

private:
  llvm::StringRef bytes;
  size_t pos = 0;
  bool good = true;
  MessageKind messageKind{};
};

/// Every request ends with a sequence number (a trailing u64) that its answer repeats, so the
/// executor can tell an answer from bytes a kernel wrote to the channel on its own. Strips
/// the trailing sequence number; nothing if the message is too short to hold one.
std::optional<uint64_t> takeSequence(std::string &bytes);

/// One message with the descriptors that came with it.
struct Message {
  std::string bytes;
  std::vector<UniqueFd> fds;
};

/// Sends one message (and up to 4 descriptors) on a SOCK_SEQPACKET socket.
llvm::Error sendMessage(int socket, llvm::StringRef bytes, llvm::ArrayRef<int> fds = {});

/// How a receive ended.
enum class ReceiveStatus { Message, Closed, TimedOut, Interrupted };

/// Receives one message; waits until `deadline` (none: forever). A message larger than
/// kMaxMessageBytes, or one that brought more descriptors than it may, is an error. For the
/// first `spin` the caller polls, yielding the core between polls, instead of sleeping: a
/// reply due within microseconds then costs no wake-up, most of a small launch's round trip.
llvm::Expected<ReceiveStatus>
receiveMessage(int socket, Message &out,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
               std::chrono::microseconds spin = std::chrono::microseconds(0));

/// Bytes of a Crashed message: the signal, its si_code, the fault address and, for SIGSYS,
/// the system call number; fixed-size so the signal handler needs no allocation.
struct CrashReport {
  int32_t signal = 0;
  int32_t code = 0;
  uint64_t address = 0;
  int32_t syscall = -1;
};

/// CrashReport::code of a worker that ran out of memory (its allocator gave up) and aborts.
inline constexpr int32_t kOutOfMemoryCode = 0x4f4f4d;

/// "SIGSEGV (address 0x0)", "SIGSYS (system call openat)", "SIGABRT", "out of memory".
std::string describeCrash(const CrashReport &report);
/// "SIGKILL", "signal 42" for the signals describeCrash has no name for.
std::string signalName(int signal);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERPROTOCOL_H
