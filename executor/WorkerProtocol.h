// What the executor's main process and a session's worker process say to each other: small
// binary messages on a SOCK_SEQPACKET socketpair, with tensor and object bytes either inline
// (small) or in a memfd passed beside the message (SCM_RIGHTS). Both ends treat what they
// receive as untrusted: a worker runs shipped code, which can write anything to its socket.
#ifndef COURIER_EXECUTOR_WORKERPROTOCOL_H
#define COURIER_EXECUTOR_WORKERPROTOCOL_H

#include "executor/KernelThreads.h"
#include "transport/Backend.h"
#include "transport/SharedMemory.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace courier::executor {

using transport::AlignedBytes;
using transport::alignPayload;
using transport::copyAligned;
using transport::kPayloadAlignment;
using transport::Message;
using transport::ReceiveStatus;
using transport::SharedBuffer;
using transport::UniqueFd;

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
  Doorbell, ///< Carries a DoorbellPage's descriptor; later requests arrive through it.
  /// {u64 max result bytes} with a same-host channel's control page, input region, result
  /// region, counts page (transport/SharedChannel.h) and the socket to its client: the worker
  /// answers the channel's launches itself from now on.
  Channel,
  /// Carries a KernelThreadTally page's descriptor: a module worker counts its kernel threads
  /// there (a session worker keeps them in its doorbell page).
  KernelTally,
  // server -> module worker (jit/ModuleProtocol.h)
  Compile = 16,
  Invoke,
  Unload,
  // worker -> main
  /// {u64 sandboxed, str Courier version}, once the worker is started: a worker of another
  /// build speaks another protocol and is refused (writeReady, checkReady).
  Ready = 64,
  Done,    ///< Success; the payload depends on the request.
  Failed,  ///< {code, message}: the request failed, the worker is fine.
  Crashed, ///< Written by the worker's fatal-signal handler just before it dies.
  /// {u64 phase} and the request's sequence: the request reached a later phase of its work
  /// (what a phase means is the request's protocol's: jit/ModuleProtocol.h), so that a death
  /// after it is told apart from one before. No answer: the request goes on.
  Progress,
};

/// A request or reply: its kind, then ByteWriter's fields.
class MessageWriter : public transport::ByteWriter {
public:
  explicit MessageWriter(MessageKind kind) { u8(static_cast<uint8_t>(kind)); }
};

/// Reads what MessageWriter wrote (transport::ByteReader's checks), its kind first.
class MessageReader : public transport::ByteReader {
public:
  explicit MessageReader(llvm::StringRef bytes) : ByteReader(bytes) {
    messageKind = static_cast<MessageKind>(u8());
  }
  MessageKind kind() const { return messageKind; }

private:
  MessageKind messageKind{};
};

/// Where a message's body lies: an object, a call's input or output, a launch's or an
/// invoke's tensors, a module's text. A body is written as {u64 size, u64 Payload, ...}, the
/// rest by its kind; the reader checks the kind against those its message allows.
enum class Payload : uint64_t {
  /// In a sealed memfd sent as the message's descriptor.
  Memfd = 0,
  /// In the message: {str bytes}.
  Inline = 1,
  /// In an arena both ends have mapped; what follows names it where there are several (a
  /// session's launch: {u64 arena id, u64 descriptor sent}).
  Arena = 2,
  /// In a new arena, sealed, sent as a descriptor of the message: {u64 arena size}. The
  /// receiver keeps it mapped for the messages after.
  NewArena = 3,
};

/// Writes a payload kind.
inline transport::ByteWriter &writePayload(transport::ByteWriter &out, Payload kind) {
  return out.u64(static_cast<uint64_t>(kind));
}

/// Reads a payload kind; one not in `allowed` leaves the reader failed.
Payload readPayload(transport::ByteReader &in, std::initializer_list<Payload> allowed);

/// What precedes a body's bytes, and for an inline body the bytes: {u64 size, u64 Payload},
/// then {str bytes} for Inline and {u64 arena size} for NewArena. One encoding for every body.
struct BodyHead {
  uint64_t size = 0;
  Payload in = Payload::Inline;
  llvm::StringRef inlineBytes; ///< Payload::Inline.
  uint64_t arenaSize = 0;      ///< Payload::NewArena.

  void write(transport::ByteWriter &out) const;
  /// Reads one of the kinds `allowed`; `inlineBytes` points into `in`'s bytes. A malformed one
  /// leaves `in` failed.
  static BodyHead read(transport::ByteReader &in, std::initializer_list<Payload> allowed);
};

/// Writes a body of `size` bytes that `fill` writes: {size, Inline, str} up to kInlineBytes,
/// else {size, Memfd} with the bytes in a sealed memfd named `name`, which `shared` keeps until
/// the message is sent with its descriptor.
llvm::Error writeBody(transport::ByteWriter &out, uint64_t size,
                      llvm::function_ref<void(char *)> fill, SharedBuffer &shared,
                      const char *name);
inline llvm::Error writeBody(transport::ByteWriter &out, llvm::StringRef body, SharedBuffer &shared,
                             const char *name) {
  // An empty body may have no bytes at all: memcpy must not see its null pointer.
  auto copy = [&](char *to) {
    if (!body.empty())
      std::memcpy(to, body.data(), body.size());
  };
  return writeBody(out, body.size(), copy, shared, name);
}

/// Reads a body writeBody wrote: its bytes, in the message or in the sealed memfd `message`
/// carries (mapped into `storage`, which keeps it alive). A body over `limit` bytes, of
/// another kind, or malformed is refused.
llvm::Expected<llvm::StringRef> readBody(transport::ByteReader &in, Message &message,
                                         SharedBuffer &storage, uint64_t limit);

/// A tensor's place in a body: its element size and sizes, and where its bytes lie.
struct PlacedTensor {
  int64_t elemSize = 0;
  std::vector<int64_t> sizes;
  uint64_t offset = 0, bytes = 0;
};

/// An arena a launch names: its id (0: none), and whether its descriptor comes with the
/// launch (the executor sends it only to a worker that has not mapped it).
struct ArenaRef {
  uint64_t id = 0;
  bool sent = false;
};

/// MessageKind::Launch: run `entry` of the object `object` on `inputs`, whose bytes are inline
/// or in an input arena, its results into the result arena when one is lent. The descriptors
/// of the arenas sent come with the message, the input arena's first.
struct LaunchRequest {
  llvm::StringRef object, entry;
  std::vector<PlacedTensor> inputs;
  std::vector<transport::ResultSpec> results;
  uint64_t total = 0;                 ///< Bytes the inputs' body spans.
  Payload inputsIn = Payload::Inline; ///< Inline (inlineBytes) or Arena (inputArena).
  llvm::StringRef inlineBytes;
  ArenaRef inputArena, resultArena;
  std::vector<uint64_t> keep; ///< The arenas the worker keeps mapped; it unmaps the others.

  void write(MessageWriter &out) const;
  /// Reads one; its strings point into `in`'s bytes. A malformed one leaves `in` failed.
  static LaunchRequest read(MessageReader &in);
};

/// A launch's answer (Done): where each result lies in the body, then the body: inline, in a
/// sealed memfd (writeBody), or in the result arena the launch lent ({total, Payload::Arena}).
struct LaunchAnswer {
  std::vector<PlacedTensor> results; ///< Their `bytes` are not sent: the reader computes them.
  uint64_t total = 0;                ///< Bytes the body spans.
  Payload bodyIn = Payload::Inline;
  llvm::StringRef inlineBytes; ///< Payload::Inline.

  /// Writes the results' places; the body follows.
  void writePlaces(MessageWriter &out) const;
  /// Reads the places and the body's size and kind (and inline bytes, pointing into `in`'s).
  /// A malformed one leaves `in` failed.
  static LaunchAnswer read(MessageReader &in);
};

/// Whether `size` bytes at `offset` lie within a body of `total` bytes, without overflowing.
inline bool liesWithin(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && total - offset >= size;
}

/// A module's tensor in a body (an isolated module's Invoke and its answer,
/// jit/ModuleProtocol.h): its dtype (the DType's value), shape, and where its bytes lie.
struct TensorPlace {
  uint64_t dtype = 0;
  std::vector<int64_t> shape;
  uint64_t offset = 0, size = 0;
};

/// An isolated module's Invoke inputs, or its answer's results: their places, then the body's
/// size and where it lies: inline, in the arena the receiver keeps mapped from an earlier
/// message, or in a new sealed arena sent as the message's descriptor, its size given.
struct TensorBlock {
  std::vector<TensorPlace> tensors;
  uint64_t total = 0; ///< Bytes the body spans.
  Payload bodyIn = Payload::Inline;
  llvm::StringRef inlineBytes; ///< Payload::Inline.
  uint64_t arenaSize = 0;      ///< Payload::NewArena.

  void write(MessageWriter &out) const;
  /// Reads one; `inlineBytes` points into `in`'s bytes. A malformed one leaves `in` failed.
  static TensorBlock read(MessageReader &in);
  /// Whether every tensor lies within the body's `total` bytes and, with `disjoint`, no two
  /// overlap (results that overlap would multiply what their receiver allocates).
  bool placesWithin(bool disjoint) const;
};

/// Every request ends with a sequence number (a trailing u64) that its answer repeats, so the
/// executor can tell an answer from bytes a kernel wrote to the channel on its own. Strips
/// the trailing sequence number; nothing if the message is too short to hold one.
std::optional<uint64_t> takeSequence(std::string &bytes);

/// Sends the Ready message: the worker is started, sandboxed or not, and of this build.
llvm::Error sendReady(int socket, bool sandboxed);
/// Checks a Ready message, its kind read already, from `program`: an error naming both
/// versions when the worker is of another Courier (or one whose Ready carried none).
llvm::Error checkReady(MessageReader &ready, llvm::StringRef program);

/// Sends one message (and up to kMaxMessageFds descriptors) on the worker channel.
inline llvm::Error sendMessage(int socket, llvm::StringRef bytes, llvm::ArrayRef<int> fds = {}) {
  return transport::sendMessage(socket, bytes, fds);
}

/// Receives one message of at most kMaxMessageBytes from the worker channel
/// (transport::receiveMessage).
inline llvm::Expected<ReceiveStatus>
receiveMessage(int socket, Message &out,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
               std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  return transport::receiveMessage(socket, out, kMaxMessageBytes, deadline, spin);
}

/// The page the executor shares with a worker once it has started: a request slot and a reply
/// slot with a futex word each, so a request that brings no descriptors crosses without a
/// socket round trip. The executor bumps `request` once the request is in its slot (or, with
/// `requestBytes` 0, on the socket); the worker sets `reply` to the same number once its
/// answer is in its slot (or, with `replyBytes` 0, on the socket). Any other change of `reply`
/// (the crash reporter makes one) sends the executor to the socket. The worker writes this
/// page, so the executor copies what it reads once and checks it like a socket message.
struct DoorbellPage {
  std::atomic<uint32_t> request;
  std::atomic<uint32_t> reply;
  std::atomic<uint32_t> requestBytes;
  std::atomic<uint32_t> replyBytes;
  /// Set while the side waiting on request (the worker) or reply (the executor) may be
  /// asleep: the other rings only then (doorbell::set).
  std::atomic<uint32_t> requestSleeping;
  std::atomic<uint32_t> replySleeping;
  char requestSlot[kMaxMessageBytes];
  char replySlot[kMaxMessageBytes];
  /// What the worker's kernels did with its kernel-thread team, kept by the worker for the
  /// executor's metrics (read as a worker's word: checked, never trusted). On a cache line of
  /// its own, away from the words each launch waits on.
  alignas(64) KernelThreadTally kernelThreads;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "doorbells need lock-free words");

/// A worker's end of its channel: requests on the socket until the executor sends a
/// doorbell page, then through the page.
class WorkerChannel {
public:
  explicit WorkerChannel(int socket) : socket(socket) {}
  /// Waits for the next request (a Doorbell request is taken here) and strips its sequence
  /// number. False once the executor has closed the channel or broken the protocol.
  bool next(Message &request);
  /// Sends the answer to the current request.
  llvm::Error answer(MessageWriter &message, llvm::ArrayRef<int> fds = {});

  /// Watches a same-host channel's request word beside the executor's requests: next() calls
  /// `serve` whenever `word` differs from `*seen` (serve answers it and updates `*seen`) or
  /// `*closed` is set (serve lets the channel go), and sets `*sleeping` while it may sleep.
  /// Only with a doorbell page.
  void watch(std::atomic<uint32_t> *word, std::atomic<uint32_t> *sleeping, const uint32_t *seen,
             const std::atomic<uint32_t> *closed, std::function<void()> serve);
  void unwatch() { watched = {}; }

private:
  struct Watched {
    std::atomic<uint32_t> *word = nullptr;
    std::atomic<uint32_t> *sleeping = nullptr;
    const uint32_t *seen = nullptr;
    const std::atomic<uint32_t> *closed = nullptr;
    std::function<void()> serve;
  };
  Watched watched;
  bool installDoorbell(Message &request);
  /// Waits until the executor's request word moves, answering the watched channel's launches
  /// meanwhile. False once the executor closed the channel.
  bool awaitRequest();
  int socket;
  SharedBuffer pageBuffer;
  DoorbellPage *page = nullptr;
  uint32_t ticket = 0;   ///< Of the request being served.
  uint64_t sequence = 0; ///< The current request's sequence number.
};

/// Bytes of a Crashed message: the signal, its si_code, the fault address and, for SIGSYS,
/// the system call number; fixed-size so the signal handler needs no allocation.
struct CrashReport {
  int32_t signal = 0;
  int32_t code = 0;
  uint64_t address = 0;
  int32_t syscall = -1;
  /// The kernel thread it happened on: 0 for the launching thread, else its index in the
  /// kernel-thread team (executor/KernelThreads.h).
  int32_t thread = 0;
};

/// CrashReport::code of a worker that ran out of memory (its allocator gave up) and aborts.
inline constexpr int32_t kOutOfMemoryCode = 0x4f4f4d;

/// "SIGSEGV (address 0x0)", "SIGSYS (system call openat)", "SIGABRT", "out of memory".
std::string describeCrash(const CrashReport &report);
/// "SIGKILL", "signal 42" for the signals describeCrash has no name for.
std::string signalName(int signal);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERPROTOCOL_H
