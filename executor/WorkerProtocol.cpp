// Messages between the executor and its workers: sequence numbers and the names of the
// signals a worker dies of (the encoding and shared memory are transport/SharedMemory.h).
#include "executor/WorkerProtocol.h"

#include "executor/Sandbox.h"

#include "Version.h"

#include "llvm/Support/FormatVariadic.h"

#include <seccomp.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <poll.h>

namespace courier::executor {

namespace doorbell = transport::doorbell;

namespace {
/// How long a worker waits awake for its next request before sleeping on the doorbell.
constexpr std::chrono::microseconds kAwaitRequestAwake{50};
} // namespace

std::optional<uint64_t> takeSequence(std::string &bytes) {
  if (bytes.size() < 9)
    return std::nullopt;
  uint64_t sequence = 0;
  for (int i = 0; i < 8; ++i)
    sequence |= uint64_t(static_cast<unsigned char>(bytes[bytes.size() - 8 + i])) << (8 * i);
  bytes.resize(bytes.size() - 8);
  return sequence;
}

bool WorkerChannel::awaitRequest() {
  auto hungUp = [&] {
    struct pollfd closed {
      socket, POLLIN, 0
    };
    return ::poll(&closed, 1, 0) > 0 && (closed.revents & (POLLHUP | POLLERR));
  };
  while (page->request.load(std::memory_order_acquire) == ticket) {
    // Awake briefly for the next request: a client launching in a loop rings again within
    // microseconds, and a worker woken from sleep costs most of a small launch
    // (docs/performance.md).
    if (watched.word && watched.closed->load(std::memory_order_acquire)) {
      watched.serve(); // Lets the ended channel go: ending it rang the word this waits on.
      continue;
    }
    if (watched.word) {
      // A same-host client's launches come straight here: two processes on their path, so
      // this one may poll without yielding for a moment.
      int which = doorbell::spinEither(page->request, ticket, *watched.word, *watched.seen,
                                       kAwaitRequestAwake, doorbell::kPauseFirst);
      if (which == 2) {
        watched.serve(); // May unwatch.
        continue;
      }
      if (which == 1)
        break;
      doorbell::sleepEither(page->request, ticket, page->requestSleeping, *watched.word,
                            *watched.seen, *watched.sleeping, std::chrono::seconds(1));
    } else {
      // Yielding the core between looks: the executor's doorbell has three processes on its
      // path, and a third polling one would take the core the one with work needs.
      if (doorbell::spin(page->request, ticket, kAwaitRequestAwake))
        break;
      doorbell::sleep(page->request, ticket, std::chrono::seconds(1), page->requestSleeping);
    }
    if (page->request.load(std::memory_order_acquire) == ticket && hungUp())
      return false;
  }
  return true;
}

bool WorkerChannel::next(Message &request) {
  while (true) {
    request.fds.clear();
    if (page) {
      if (!awaitRequest())
        return false;
      ticket = page->request.load(std::memory_order_acquire);
      uint32_t size = page->requestBytes.load(std::memory_order_acquire);
      if (size > kMaxMessageBytes)
        return false;
      if (size) {
        request.bytes.assign(page->requestSlot, size);
      } else {
        llvm::Expected<ReceiveStatus> status = receiveMessage(socket, request);
        if (!status || *status != ReceiveStatus::Message) {
          llvm::consumeError(status.takeError());
          return false;
        }
      }
    } else {
      llvm::Expected<ReceiveStatus> status = receiveMessage(socket, request);
      if (!status || *status != ReceiveStatus::Message) {
        llvm::consumeError(status.takeError());
        return false;
      }
    }
    // Every request ends with its sequence number, which its answer repeats: the executor
    // can then tell an answer from something a kernel wrote to the channel.
    std::optional<uint64_t> number = takeSequence(request.bytes);
    if (!number)
      return false;
    sequence = *number;
    if (MessageReader(request.bytes).kind() != MessageKind::Doorbell)
      return true;
    if (!installDoorbell(request))
      return false;
  }
}

bool WorkerChannel::installDoorbell(Message &request) {
  if (page || request.fds.size() != 1)
    return false;
  llvm::Expected<SharedBuffer> mapped =
      SharedBuffer::map(std::move(request.fds[0]), sizeof(DoorbellPage));
  if (!mapped) {
    llvm::consumeError(mapped.takeError());
    return false;
  }
  // Where requests start counting, read before the answer: once it is sent the executor
  // may ring at once.
  auto *shared = reinterpret_cast<DoorbellPage *>(mapped->data());
  uint32_t first = shared->request.load(std::memory_order_acquire);
  // Answered on the socket, where the executor waits for this one answer.
  MessageWriter done(MessageKind::Done);
  if (llvm::Error error = answer(done)) {
    llvm::consumeError(std::move(error));
    return false;
  }
  pageBuffer = std::move(*mapped);
  page = shared;
  ticket = first;
  ringOnCrash(page->request, page->reply);
  publishKernelThreadTally(&page->kernelThreads);
  return true;
}

void WorkerChannel::watch(std::atomic<uint32_t> *word, std::atomic<uint32_t> *sleeping,
                          const uint32_t *seen, const std::atomic<uint32_t> *closed,
                          std::function<void()> serve) {
  watched = Watched{word, sleeping, seen, closed, std::move(serve)};
}

llvm::Error WorkerChannel::answer(MessageWriter &message, llvm::ArrayRef<int> fds) {
  message.u64(sequence);
  const std::string &bytes = message.view();
  if (!page)
    return sendMessage(socket, bytes, fds);
  bool inSlot = fds.empty() && bytes.size() <= kMaxMessageBytes;
  if (inSlot)
    std::memcpy(page->replySlot, bytes.data(), bytes.size());
  // The word first, the socket after: the executor reads the socket only once the word says
  // the answer is there, or once the socket holds something (a crash report).
  page->replyBytes.store(inSlot ? static_cast<uint32_t>(bytes.size()) : 0,
                         std::memory_order_release);
  doorbell::set(page->reply, ticket, page->replySleeping);
  if (!inSlot)
    return sendMessage(socket, bytes, fds);
  return llvm::Error::success();
}

std::string signalName(int signal) {
  switch (signal) {
  case SIGSEGV:
    return "SIGSEGV";
  case SIGBUS:
    return "SIGBUS";
  case SIGILL:
    return "SIGILL";
  case SIGFPE:
    return "SIGFPE";
  case SIGABRT:
    return "SIGABRT";
  case SIGSYS:
    return "SIGSYS";
  case SIGKILL:
    return "SIGKILL";
  case SIGTERM:
    return "SIGTERM";
  case SIGXCPU:
    return "SIGXCPU";
  case SIGXFSZ:
    return "SIGXFSZ";
  case SIGTRAP:
    return "SIGTRAP";
  case SIGPIPE:
    return "SIGPIPE";
  default:
    return "signal " + std::to_string(signal);
  }
}

std::string describeCrash(const CrashReport &report) {
  if (report.signal == SIGABRT && report.code == kOutOfMemoryCode)
    return "out of memory (SIGABRT)";
  std::string text = signalName(report.signal);
  if (report.signal == SIGSYS && report.syscall >= 0) {
    char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, report.syscall);
    text += llvm::formatv(" (system call {0})",
                          name ? std::string(name) : "number " + std::to_string(report.syscall))
                .str();
    std::free(name);
  } else if (report.signal == SIGSEGV || report.signal == SIGBUS || report.signal == SIGILL ||
             report.signal == SIGFPE) {
    text += llvm::formatv(" (address {0:x})", report.address).str();
  }
  if (report.thread > 0)
    text += llvm::formatv(" on kernel thread {0}", report.thread).str();
  return text;
}

llvm::Error sendReady(int socket, bool sandboxed) {
  MessageWriter ready(MessageKind::Ready);
  ready.u64(sandboxed ? 1 : 0).str(COURIER_VERSION);
  return sendMessage(socket, ready.view());
}

llvm::Error checkReady(MessageReader &ready, llvm::StringRef program) {
  ready.u64();
  llvm::StringRef version = ready.str();
  if (ready.ok() && version == COURIER_VERSION)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::formatv("{0} is a worker of {1}, not of this Courier ({2}): its protocol is "
                    "another; use the worker installed with this build",
                    program,
                    ready.ok() ? "Courier " + version.str() : std::string("an older Courier"),
                    COURIER_VERSION)
          .str());
}

Payload readPayload(transport::ByteReader &in, std::initializer_list<Payload> allowed) {
  uint64_t value = in.u64();
  for (Payload kind : allowed)
    if (value == static_cast<uint64_t>(kind))
      return kind;
  in.fail();
  return Payload::Inline;
}

void BodyHead::write(transport::ByteWriter &out) const {
  writePayload(out.u64(size), in);
  if (in == Payload::Inline)
    out.str(inlineBytes);
  else if (in == Payload::NewArena)
    out.u64(arenaSize);
}

BodyHead BodyHead::read(transport::ByteReader &in, std::initializer_list<Payload> allowed) {
  BodyHead head;
  head.size = in.u64();
  head.in = readPayload(in, allowed);
  if (!in.ok())
    return head;
  if (head.in == Payload::Inline)
    head.inlineBytes = in.str();
  else if (head.in == Payload::NewArena)
    head.arenaSize = in.u64();
  return head;
}

llvm::Error writeBody(transport::ByteWriter &out, uint64_t size,
                      llvm::function_ref<void(char *)> fill, SharedBuffer &shared,
                      const char *name) {
  if (size <= kInlineBytes) {
    std::string bytes(size, '\0');
    fill(bytes.data());
    BodyHead{size, Payload::Inline, bytes, 0}.write(out);
    return llvm::Error::success();
  }
  llvm::Expected<SharedBuffer> created = SharedBuffer::create(size, name);
  if (!created)
    return created.takeError();
  fill(created->data());
  // The receiver maps only sealed buffers: a file it reads must not shrink under it.
  if (llvm::Error error = created->sealSize())
    return error;
  shared = std::move(*created);
  BodyHead{size, Payload::Memfd, {}, 0}.write(out);
  return llvm::Error::success();
}

llvm::Expected<llvm::StringRef> readBody(transport::ByteReader &in, Message &message,
                                         SharedBuffer &storage, uint64_t limit) {
  BodyHead head = BodyHead::read(in, {Payload::Inline, Payload::Memfd});
  uint64_t size = head.size;
  if (!in.ok())
    return llvm::createStringError("a malformed message body");
  if (size > limit)
    return llvm::createStringError("a message body of " + llvm::Twine(size) +
                                   " bytes, more than the limit of " + llvm::Twine(limit));
  if (head.in == Payload::Inline) {
    if (head.inlineBytes.size() != size)
      return llvm::createStringError("a malformed message body");
    return head.inlineBytes;
  }
  if (message.fds.size() != 1)
    return llvm::createStringError("a message body without its shared buffer");
  if (size == 0)
    return llvm::StringRef();
  llvm::Expected<SharedBuffer> mapped =
      SharedBuffer::map(std::move(message.fds[0]), size, /*requireSealed=*/true);
  if (!mapped)
    return mapped.takeError();
  storage = std::move(*mapped);
  return llvm::StringRef(storage.data(), size);
}

namespace {

void writePlace(MessageWriter &out, const PlacedTensor &t) {
  out.i64(t.elemSize).u64(t.sizes.size());
  for (int64_t size : t.sizes)
    out.i64(size);
  out.u64(t.offset);
}

PlacedTensor readPlace(MessageReader &in) {
  PlacedTensor t;
  t.elemSize = in.i64();
  t.sizes.resize(in.count(8));
  for (int64_t &size : t.sizes)
    size = in.i64();
  t.offset = in.u64();
  return t;
}

void writeArenaRef(MessageWriter &out, const ArenaRef &ref) {
  out.u64(ref.id).u64(ref.sent ? 1 : 0);
}

ArenaRef readArenaRef(MessageReader &in) {
  ArenaRef ref;
  ref.id = in.u64();
  ref.sent = in.u64() != 0;
  return ref;
}

} // namespace

void LaunchRequest::write(MessageWriter &out) const {
  out.str(object).str(entry).u64(inputs.size());
  for (const PlacedTensor &t : inputs) {
    writePlace(out, t);
    out.u64(t.bytes);
  }
  out.u64(results.size());
  for (const transport::ResultSpec &r : results)
    out.i64(r.rank).i64(r.elemSize);
  BodyHead{total, inputsIn, inlineBytes, 0}.write(out);
  if (inputsIn == Payload::Arena)
    writeArenaRef(out, inputArena);
  // The result arena's id, 0 for none, and whether it is sent only when there is one.
  out.u64(resultArena.id);
  if (resultArena.id)
    out.u64(resultArena.sent ? 1 : 0);
  out.u64(keep.size());
  for (uint64_t id : keep)
    out.u64(id);
}

LaunchRequest LaunchRequest::read(MessageReader &in) {
  LaunchRequest r;
  r.object = in.str();
  r.entry = in.str();
  r.inputs.resize(in.count(32));
  for (PlacedTensor &t : r.inputs) {
    t = readPlace(in);
    t.bytes = in.u64();
  }
  r.results.resize(in.count(16));
  for (transport::ResultSpec &spec : r.results) {
    spec.rank = in.i64();
    spec.elemSize = in.i64();
  }
  BodyHead inputs = BodyHead::read(in, {Payload::Inline, Payload::Arena});
  r.total = inputs.size;
  r.inputsIn = inputs.in;
  r.inlineBytes = inputs.inlineBytes;
  if (r.inputsIn == Payload::Arena)
    r.inputArena = readArenaRef(in);
  r.resultArena.id = in.u64();
  if (r.resultArena.id)
    r.resultArena.sent = in.u64() != 0;
  r.keep.resize(in.count(8));
  for (uint64_t &id : r.keep)
    id = in.u64();
  return r;
}

void LaunchAnswer::writePlaces(MessageWriter &out) const {
  out.u64(results.size());
  for (const PlacedTensor &t : results)
    writePlace(out, t);
}

LaunchAnswer LaunchAnswer::read(MessageReader &in) {
  LaunchAnswer a;
  a.results.resize(in.count(24));
  for (PlacedTensor &t : a.results)
    t = readPlace(in);
  BodyHead body = BodyHead::read(in, {Payload::Memfd, Payload::Inline, Payload::Arena});
  a.total = body.size;
  a.bodyIn = body.in;
  a.inlineBytes = body.inlineBytes;
  return a;
}

void TensorBlock::write(MessageWriter &out) const {
  out.u64(tensors.size());
  for (const TensorPlace &t : tensors) {
    out.u64(t.dtype).u64(t.shape.size());
    for (int64_t d : t.shape)
      out.i64(d);
    out.u64(t.offset).u64(t.size);
  }
  BodyHead{total, bodyIn, inlineBytes, arenaSize}.write(out);
}

TensorBlock TensorBlock::read(MessageReader &in) {
  TensorBlock block;
  block.tensors.resize(in.count(32));
  for (TensorPlace &t : block.tensors) {
    t.dtype = in.u64();
    t.shape.resize(in.count(8));
    for (int64_t &d : t.shape)
      d = in.i64();
    t.offset = in.u64();
    t.size = in.u64();
  }
  BodyHead body = BodyHead::read(in, {Payload::Inline, Payload::Arena, Payload::NewArena});
  block.total = body.size;
  block.bodyIn = body.in;
  block.inlineBytes = body.inlineBytes;
  block.arenaSize = body.arenaSize;
  return block;
}

bool TensorBlock::placesWithin(bool disjoint) const {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const TensorPlace &place : tensors) {
    if (!liesWithin(place.offset, place.size, total))
      return false;
    spans.emplace_back(place.offset, place.size);
  }
  if (!disjoint)
    return true;
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first - spans[i - 1].first < spans[i - 1].second)
      return false;
  return true;
}

} // namespace courier::executor
