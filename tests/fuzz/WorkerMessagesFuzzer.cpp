// Fuzzes what the executor and a worker receive from each other (executor/WorkerProtocol.h,
// transport/SharedMemory.h): one message, with memfds beside it, crosses a real
// SOCK_SEQPACKET socketpair and is read back as its receiver reads it: the kind, the
// trailing sequence number, a Failed reply's code and message, a crash report, counted
// lists of fields, and every descriptor mapped as a shared buffer of the size the message
// claims, a body as executor::readBody reads it, a session's launch and its answer, and an
// isolated module's tensors (executor::TensorBlock). The input's first byte is the number of
// descriptors (0 to one more than a message may bring, which is a refusal), each then described by
// 9 bytes (a size below 1 MiB, sealed or not); the rest is the message.
#include "tests/fuzz/FuzzSupport.h"

#include "executor/WorkerProtocol.h"
#include "transport/SharedMemory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

using namespace courier;
using namespace courier::fuzz;
using courier::transport::UniqueFd;

namespace {

struct Channel {
  UniqueFd sender, receiver;
};

/// One socketpair for the whole run, as a worker keeps its channel.
Channel &channel() {
  static Channel instance = [] {
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0)
      broken("creating a socketpair");
    return Channel{UniqueFd(ends[0]), UniqueFd(ends[1])};
  }();
  return instance;
}

/// A memfd of `size` bytes holding a pattern, its size sealed when `sealed`.
UniqueFd makeBuffer(uint64_t size, bool sealed) {
  UniqueFd fd(::memfd_create("courier-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    broken("creating a memfd");
  if (sealed && ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    broken("sealing a memfd");
  return fd;
}

/// Sends `bytes` with `fds` as one message, however many descriptors there are.
void sendRaw(int socket, llvm::StringRef bytes, const std::vector<UniqueFd> &fds) {
  struct iovec iov {
    const_cast<char *>(bytes.data()), bytes.size()
  };
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    for (size_t i = 0; i < fds.size(); ++i) {
      int fd = fds[i].get();
      std::memcpy(CMSG_DATA(header) + i * sizeof(int), &fd, sizeof(int));
    }
  }
  if (::sendmsg(socket, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
    broken("sending on the socketpair");
}

/// A view the reader returned must lie inside the message it reads.
void checkInside(llvm::StringRef view, llvm::StringRef message) {
  if (view.empty())
    return;
  if (view.begin() < message.begin() || view.end() > message.end())
    broken("a string read from outside its message");
}

/// Reads the message as the receiving side reads its replies and requests.
void readAsReceiver(const std::string &bytes) {
  executor::MessageReader reader(bytes);
  switch (reader.kind()) {
  case executor::MessageKind::Failed: {
    checkInside(reader.str(), bytes);
    checkInside(reader.str(), bytes);
    break;
  }
  case executor::MessageKind::Crashed:
    if (bytes.size() == 1 + sizeof(executor::CrashReport)) {
      executor::CrashReport report;
      std::memcpy(&report, bytes.data() + 1, sizeof(report));
      if (executor::describeCrash(report).empty())
        broken("a crash described by nothing");
    }
    break;
  default: {
    // A counted list of named tables of words: the shape of an object's description.
    uint64_t entries = reader.count(8);
    for (uint64_t i = 0; i < entries && reader.ok(); ++i) {
      checkInside(reader.str(), bytes);
      uint64_t words = reader.count(8);
      for (uint64_t w = 0; w < words; ++w)
        (void)reader.i64();
    }
    break;
  }
  }
  if (!reader.ok() && (reader.u64() != 0 || !reader.str().empty() || reader.count(1) != 0))
    broken("a failed reader that still reads");
  checkInside(reader.rest(), bytes);

  std::string copy = bytes;
  std::optional<uint64_t> sequence = executor::takeSequence(copy);
  if (sequence.has_value() != (bytes.size() >= 9) ||
      copy.size() != (sequence ? bytes.size() - 8 : bytes.size()))
    broken("a sequence number taken from a message too short to hold one, or not taken");
}

/// `value`, read well from a message, written again reads back as the same: the bytes written of
/// it once and of its reading again are equal, and the reading takes them all.
template <typename T> void checkWrittenAgain(const T &value, const char *what) {
  executor::MessageWriter once(executor::MessageKind::Launch);
  value.write(once);
  executor::MessageReader again(once.view());
  executor::MessageWriter twice(executor::MessageKind::Launch);
  T::read(again).write(twice);
  if (!again.atEnd() || once.view() != twice.view())
    broken(llvm::Twine("a ") + what + " that reads differently once written again");
}

/// Reads the message as a launch request and a launch's answer (executor::LaunchRequest,
/// LaunchAnswer): what is read lies in the message, and a request read well reads the same once
/// written again.
void readAsLaunch(const std::string &bytes) {
  executor::MessageReader request(bytes);
  executor::LaunchRequest launch = executor::LaunchRequest::read(request);
  checkInside(launch.object, bytes);
  checkInside(launch.entry, bytes);
  checkInside(launch.inlineBytes, bytes);
  if (request.ok())
    checkWrittenAgain(launch, "launch request");
  executor::MessageReader answer(bytes);
  executor::LaunchAnswer answered = executor::LaunchAnswer::read(answer);
  checkInside(answered.inlineBytes, bytes);
  if (answer.ok() && answered.bodyIn == executor::Payload::NewArena)
    broken("a launch answer of a kind it may not have");
}

/// Brute force: whether every place lies within the body and, with `disjoint`, no two overlap:
/// of each pair, the one that starts first (or, starting together, is shorter) ends before the
/// other starts. A zero-size place overlaps only one it lies strictly inside.
bool placesWithinByPairs(const executor::TensorBlock &block, bool disjoint) {
  const std::vector<executor::TensorPlace> &t = block.tensors;
  for (const executor::TensorPlace &p : t)
    if (p.offset > block.total || p.size > block.total - p.offset)
      return false;
  for (size_t i = 0; disjoint && i < t.size(); ++i)
    for (size_t j = 0; j < t.size(); ++j) {
      auto first = std::make_pair(t[i].offset, t[i].size);
      auto second = std::make_pair(t[j].offset, t[j].size);
      if (i != j && (first < second || (first == second && i < j)) &&
          t[j].offset - t[i].offset < t[i].size)
        return false;
    }
  return true;
}

/// Reads the message as an isolated module's tensors (executor::TensorBlock, an Invoke's
/// inputs or its answer's results): what is read lies in the message, one read well reads the
/// same once written again, and its placement check agrees with a pairwise one.
void readAsTensorBlock(const std::string &bytes) {
  executor::MessageReader in(bytes);
  executor::TensorBlock block = executor::TensorBlock::read(in);
  checkInside(block.inlineBytes, bytes);
  if (!in.ok())
    return;
  if (block.bodyIn == executor::Payload::Memfd)
    broken("a tensor block of a kind it may not have");
  for (bool disjoint : {false, true})
    if (block.placesWithin(disjoint) != placesWithinByPairs(block, disjoint))
      broken("a tensor block whose placement check disagrees with a pairwise one");
  checkWrittenAgain(block, "tensor block");
}

/// Reads the message as a body (executor::readBody): one it accepts is no larger than the
/// limit and lies in the message, or is the memfd beside it mapped at the size claimed; an
/// inline one written again (executor::writeBody) reads back the same.
void readAsBody(const std::string &bytes, const std::vector<UniqueFd> &fds) {
  constexpr uint64_t kLimit = uint64_t(1) << 20;
  transport::Message message;
  message.bytes = bytes;
  for (const UniqueFd &fd : fds)
    message.fds.emplace_back(::dup(fd.get()));
  transport::ByteReader reader(message.bytes);
  transport::SharedBuffer storage;
  llvm::Expected<llvm::StringRef> body = executor::readBody(reader, message, storage, kLimit);
  if (!body) {
    refused(body.takeError());
    return;
  }
  llvm::StringRef whole = message.bytes;
  bool inMessage = body->begin() >= whole.begin() && body->end() <= whole.end();
  bool inBuffer =
      storage.data() && body->data() == storage.data() && body->size() == storage.size();
  if (body->size() > kLimit || !(inMessage || inBuffer || body->empty()))
    broken("a body over its limit, or outside its message and its buffer");
  if (body->size() > executor::kInlineBytes)
    return;
  transport::ByteWriter again;
  transport::SharedBuffer unused;
  if (llvm::Error error = executor::writeBody(again, *body, unused, "courier-fuzz"))
    broken("writing a body that was read");
  transport::Message rewritten;
  rewritten.bytes = again.take();
  transport::ByteReader second(rewritten.bytes);
  llvm::Expected<llvm::StringRef> same = executor::readBody(second, rewritten, unused, kLimit);
  if (!same || *same != *body)
    broken("a body that reads differently once written again");
}

/// Maps each descriptor as a receiver that requires sealed buffers does, with the size the
/// message claims; a buffer it accepts is read to its end, which must not fault.
void mapBuffers(std::vector<UniqueFd> &fds, llvm::StringRef bytes) {
  transport::ByteReader sizes(bytes);
  for (UniqueFd &fd : fds) {
    uint64_t claimed = sizes.u64() % (uint64_t(2) << 20);
    int kept = ::dup(fd.get());
    llvm::Expected<transport::SharedBuffer> mapped =
        transport::SharedBuffer::map(std::move(fd), claimed, /*requireSealed=*/true);
    UniqueFd original(kept);
    if (!mapped) {
      refused(mapped.takeError());
      continue;
    }
    struct stat file;
    if (::fstat(original.get(), &file) != 0)
      broken("inspecting a mapped buffer");
    if (file.st_size > 0 && ::ftruncate(original.get(), file.st_size - 1) == 0)
      broken("a mapped buffer its sender can still shrink");
    volatile char sum = 0;
    for (uint64_t i = 0; i < mapped->size(); i += 4096)
      sum = sum + mapped->data()[i];
    if (mapped->size())
      sum = sum + mapped->data()[mapped->size() - 1];
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return -1;
  size_t count = data[0] % (transport::kMaxMessageFds + 2);
  if (size < 1 + 9 * count)
    return -1;
  std::vector<UniqueFd> sent;
  transport::ByteReader descriptions(bytesOf(data + 1, 9 * count));
  for (size_t i = 0; i < count; ++i) {
    uint64_t bytes = descriptions.u64() % (uint64_t(1) << 20);
    sent.push_back(makeBuffer(bytes, descriptions.u8() & 1));
  }
  llvm::StringRef message = bytesOf(data + 1 + 9 * count, size - 1 - 9 * count);
  if (message.empty())
    return -1; // An empty datagram without descriptors reads as the peer closing.

  Channel &ends = channel();
  sendRaw(ends.sender.get(), message, sent);
  transport::Message received;
  llvm::Expected<transport::ReceiveStatus> status = executor::receiveMessage(
      ends.receiver.get(), received, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  if (!status) {
    // Only more descriptors than a message may bring, or more bytes, are refused.
    refused(status.takeError());
    if (count <= transport::kMaxMessageFds && message.size() <= executor::kMaxMessageBytes)
      broken("a message within the limits refused");
    return 0;
  }
  if (*status != transport::ReceiveStatus::Message)
    broken("a message sent that did not arrive as one");
  if (count > transport::kMaxMessageFds || message.size() > executor::kMaxMessageBytes)
    broken("a message beyond the limits accepted");
  if (received.bytes != message || received.fds.size() != count)
    broken("a message that arrived changed");
  readAsReceiver(received.bytes);
  readAsBody(received.bytes, received.fds);
  readAsLaunch(received.bytes);
  readAsTensorBlock(received.bytes);
  mapBuffers(received.fds, message);
  return 0;
}
