// The same-host channel's messages and its client end.
#include "transport/SharedChannel.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace courier::transport::shm {

namespace {

constexpr uint8_t kRequestVersion = 1;
/// How long a launch waits awake for its reply before sleeping on the doorbell.
constexpr std::chrono::microseconds kAwaitReplyAwake{50};
/// How long it sleeps before it looks at the connection again.
constexpr std::chrono::milliseconds kSleepSlice{10};
/// What the client waits past its request timeout for the executor's own deadline reply.
constexpr std::chrono::seconds kReplyGrace{5};

llvm::Error badFrame(const llvm::Twine &what) {
  return makeCodedError(ErrorCode::BadFrame, "shared-memory launch: " + what);
}

/// Reads a tensor shape (rank and sizes) with the HTTP frame's limits.
bool readShape(ByteReader &in, std::vector<int64_t> &sizes) {
  uint64_t rank = in.count(8);
  if (!in.ok() || rank > wire::kMaxFrameRank)
    return false;
  sizes.resize(rank);
  for (int64_t &size : sizes)
    size = in.i64();
  return in.ok();
}

void writeShape(ByteWriter &out, llvm::ArrayRef<int64_t> sizes) {
  out.u64(sizes.size());
  for (int64_t size : sizes)
    out.i64(size);
}

} // namespace

std::string encodeLaunchRequest(const LaunchRequest &request) {
  ByteWriter out;
  out.u8(kRequestVersion).str(request.launch.object).str(request.launch.entry);
  out.u64(request.deadlineMs).u64(request.launch.inputs.size());
  for (const wire::TensorHeader &t : request.launch.inputs) {
    out.i64(t.elemSize);
    writeShape(out, t.sizes);
    out.u64(t.offset);
  }
  out.u64(request.launch.results.size());
  for (const ResultSpec &r : request.launch.results)
    out.i64(r.rank).i64(r.elemSize);
  return out.take();
}

llvm::Expected<LaunchRequest> decodeLaunchRequest(llvm::StringRef bytes, uint64_t inputBytes) {
  ByteReader in(bytes);
  LaunchRequest request;
  if (in.u8() != kRequestVersion)
    return badFrame("unknown request version");
  request.launch.object = in.str().str();
  request.launch.entry = in.str().str();
  request.deadlineMs = in.u64();
  uint64_t inputs = in.count(24);
  if (!in.ok())
    return badFrame("malformed request");
  if (inputs > wire::kMaxFrameTensors)
    return badFrame(llvm::formatv("{0} inputs; at most {1}", inputs, wire::kMaxFrameTensors));
  if (!wire::isSha256(request.launch.object))
    return badFrame("'object' must be a lowercase hex SHA-256");
  for (uint64_t i = 0; i < inputs; ++i) {
    wire::TensorHeader t;
    t.elemSize = in.i64();
    if (!readShape(in, t.sizes))
      return badFrame(
          llvm::formatv("input {0} is malformed or has a rank above {1}", i, wire::kMaxFrameRank));
    t.offset = in.u64();
    llvm::Expected<uint64_t> need = wire::packedBytes(t.elemSize, t.sizes);
    if (!need)
      return need.takeError();
    t.bytes = *need;
    if (!in.ok() || t.offset % kAlignment != 0 || t.offset > inputBytes ||
        inputBytes - t.offset < t.bytes)
      return badFrame(llvm::formatv("input {0} lies outside the input region", i));
    request.launch.inputs.push_back(std::move(t));
  }
  uint64_t results = in.count(16);
  if (!in.ok() || results > wire::kMaxFrameTensors)
    return badFrame("malformed results");
  for (uint64_t i = 0; i < results; ++i) {
    ResultSpec spec;
    spec.rank = in.i64();
    spec.elemSize = in.i64();
    if (spec.rank < 0 || spec.rank > static_cast<int64_t>(wire::kMaxFrameRank) ||
        spec.elemSize <= 0)
      return badFrame("result rank must be 0 to " + llvm::Twine(wire::kMaxFrameRank) +
                      " and elemSize > 0");
    request.launch.results.push_back(spec);
  }
  if (replyBytes(request.launch.results) > kSlotBytes)
    return badFrame("the results' shapes would not fit the reply slot; launch over HTTP");
  if (!in.atEnd())
    return badFrame("malformed request");
  return request;
}

uint64_t requestBytes(llvm::StringRef entry, llvm::ArrayRef<wire::TensorHeader> inputs,
                      size_t results) {
  uint64_t bytes = 1 + 8 + 64 + 8 + entry.size() + 8 + 8 + 8 + 16 * uint64_t(results);
  for (const wire::TensorHeader &t : inputs)
    bytes += 24 + 8 * t.sizes.size();
  return bytes;
}

uint64_t replyBytes(llvm::ArrayRef<ResultSpec> results) {
  uint64_t bytes = 2 + 8;
  for (const ResultSpec &r : results)
    bytes += 24 + 8 * static_cast<uint64_t>(std::max<int64_t>(r.rank, 0));
  return bytes;
}

std::string encodeLaunchReply(const LaunchReply &reply) {
  ByteWriter out;
  out.u8(static_cast<uint8_t>(ReplyKind::Done)).u8(static_cast<uint8_t>(reply.placement));
  out.u64(reply.results.size());
  for (const wire::TensorHeader &t : reply.results) {
    out.i64(t.elemSize);
    writeShape(out, t.sizes);
    out.u64(t.offset);
  }
  return out.take();
}

std::string encodeRedirect() {
  ByteWriter out;
  out.u8(static_cast<uint8_t>(ReplyKind::Redirect));
  return out.take();
}

std::string encodeFailure(ErrorCode code, llvm::StringRef message) {
  ByteWriter out;
  // The slot bounds the message; what is cut is the end of a long one.
  out.u8(static_cast<uint8_t>(ReplyKind::Failed))
      .str(errorCodeName(code))
      .str(message.take_front(kSlotBytes / 2));
  return out.take();
}

std::string encodeFailure(llvm::Error error, ErrorCode fallback) {
  auto [code, message] = takeCodeAndMessage(std::move(error), fallback);
  return encodeFailure(code, message);
}

llvm::Expected<LaunchRequest> readRequest(const ControlPage &page, uint64_t inputBytes) {
  uint32_t size = page.requestBytes.load(std::memory_order_acquire);
  if (size > kSlotBytes)
    return badFrame("a request larger than its slot");
  return decodeLaunchRequest(std::string(page.requestSlot, size), inputBytes);
}

void answer(ControlPage &page, uint32_t ticket, std::string reply, uint32_t pageVersion) {
  if (reply.size() > kSlotBytes)
    reply = encodeFailure(ErrorCode::PayloadTooLarge,
                          "the reply does not fit the channel's reply slot");
  std::memcpy(page.replySlot, reply.data(), reply.size());
  page.replyBytes.store(static_cast<uint32_t>(reply.size()), std::memory_order_release);
  if (pageVersion >= 2) {
    doorbell::set(page.reply, ticket, page.clientSleeping);
  } else {
    page.reply.store(ticket, std::memory_order_release);
    doorbell::ring(page.reply);
  }
}

llvm::Expected<LaunchReply> decodeLaunchReply(llvm::StringRef bytes, uint64_t regionBytes) {
  ByteReader in(bytes);
  LaunchReply reply;
  uint8_t kind = in.u8();
  if (kind == static_cast<uint8_t>(ReplyKind::Failed)) {
    llvm::StringRef code = in.str();
    llvm::StringRef message = in.str();
    if (!in.atEnd())
      return badFrame("malformed failure reply");
    reply.failure = {parseErrorCode(code).value_or(ErrorCode::Internal), message.str()};
    return reply;
  }
  if (kind == static_cast<uint8_t>(ReplyKind::Redirect)) {
    if (!in.atEnd())
      return badFrame("malformed redirect reply");
    reply.redirect = true;
    return reply;
  }
  if (kind != static_cast<uint8_t>(ReplyKind::Done))
    return badFrame("malformed reply");
  uint8_t placement = in.u8();
  if (placement > static_cast<uint8_t>(Placement::SentBuffer))
    return badFrame("malformed reply");
  reply.placement = static_cast<Placement>(placement);
  uint64_t results = in.count(24);
  if (!in.ok() || results > wire::kMaxFrameTensors)
    return badFrame("malformed reply");
  for (uint64_t i = 0; i < results; ++i) {
    wire::TensorHeader t;
    t.elemSize = in.i64();
    if (!readShape(in, t.sizes))
      return badFrame("malformed reply");
    t.offset = in.u64();
    llvm::Expected<uint64_t> need = wire::packedBytes(t.elemSize, t.sizes);
    if (!need)
      return need.takeError();
    t.bytes = *need;
    if (!in.ok())
      return badFrame("malformed reply");
    reply.results.push_back(std::move(t));
  }
  if (!in.atEnd())
    return badFrame("malformed reply");
  return checkPlaced(reply, regionBytes)
             ? llvm::Expected<LaunchReply>(std::move(reply))
             : badFrame("a result lies outside the region that holds it");
}

bool checkPlaced(const LaunchReply &reply, uint64_t regionBytes) {
  for (const wire::TensorHeader &t : reply.results)
    if (t.offset > regionBytes || regionBytes - t.offset < t.bytes)
      return false;
  return true;
}

std::string hostIdentity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  struct stat net;
  if (::stat("/proc/self/ns/net", &net) != 0)
    return id;
  return id + ":" + std::to_string(static_cast<uint64_t>(net.st_ino));
}

Client::~Client() {
  if (page) {
    page->closed.store(1, std::memory_order_release);
    doorbell::ring(page->request);
  }
}

llvm::Expected<std::unique_ptr<Client>> Client::connect(llvm::StringRef socketName,
                                                        llvm::StringRef token,
                                                        std::chrono::milliseconds timeout,
                                                        uint32_t pageVersion) {
  auto unavailable = [&](const llvm::Twine &what) {
    return makeCodedError(ErrorCode::Unavailable, "shared-memory channel: " + what);
  };
  if (pageVersion < 1 || pageVersion > kPageVersion)
    return unavailable("control page version " + llvm::Twine(pageVersion) +
                       " (this client speaks 1 to " + llvm::Twine(kPageVersion) + ")");
  struct sockaddr_un address {};
  address.sun_family = AF_UNIX;
  if (!socketName.starts_with("@") || socketName.size() < 2 ||
      socketName.size() > sizeof(address.sun_path))
    return unavailable("'" + socketName + "' is not an abstract socket name");
  // An abstract name: a leading NUL, then the name without its '@'.
  std::memcpy(address.sun_path + 1, socketName.data() + 1, socketName.size() - 1);
  socklen_t length =
      static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + socketName.size());
  std::unique_ptr<Client> client(new Client());
  client->connection.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!client->connection)
    return unavailable(llvm::Twine("socket: ") + std::strerror(errno));
  if (::connect(client->connection.get(), reinterpret_cast<struct sockaddr *>(&address), length) !=
      0)
    return unavailable("connecting to " + socketName + ": " + std::strerror(errno));
  if (llvm::Error error = sendMessage(client->connection.get(), token))
    return unavailable("presenting the token: " + llvm::toString(std::move(error)));
  Message granted;
  llvm::Expected<ReceiveStatus> status = receiveMessage(client->connection.get(), granted, 4096,
                                                        std::chrono::steady_clock::now() + timeout);
  if (!status)
    return unavailable(llvm::toString(status.takeError()));
  if (*status != ReceiveStatus::Message)
    return unavailable("the executor did not grant the channel");
  ByteReader in(granted.bytes);
  if (in.u8() != 1) {
    llvm::StringRef code = in.str();
    llvm::StringRef message = in.str();
    return unavailable("refused: " + message + " [" + code + "]");
  }
  client->layout.inputBytes = in.u64();
  client->layout.resultBytes = in.u64();
  // Offered version 3, the grant says which the channel uses: 2 for a session whose kernels
  // run in the executor's own process.
  if (pageVersion >= 3) {
    uint64_t given = in.u64();
    if (given != 2 && given != 3)
      return unavailable("a grant of control page version " + llvm::Twine(given));
    pageVersion = static_cast<uint32_t>(given);
    client->twoProcesses = in.u64() == 2;
  }
  if (!in.atEnd() || granted.fds.size() != (pageVersion >= 3 ? 4u : 3u))
    return unavailable("a malformed grant");
  if (pageVersion >= 3)
    client->workerSocket = std::move(granted.fds[3]);
  // Sealed, so that the executor (or the worker holding the regions) cannot shrink them
  // under this process's mappings.
  llvm::Expected<SharedBuffer> control =
      SharedBuffer::map(std::move(granted.fds[0]), pageBytes(pageVersion), /*requireSealed=*/true);
  if (!control)
    return unavailable("the control page: " + llvm::toString(control.takeError()));
  llvm::Expected<SharedBuffer> inputs = SharedBuffer::map(
      std::move(granted.fds[1]), client->layout.inputBytes, /*requireSealed=*/true);
  if (!inputs)
    return unavailable("the input region: " + llvm::toString(inputs.takeError()));
  llvm::Expected<SharedBuffer> results = SharedBuffer::map(
      std::move(granted.fds[2]), client->layout.resultBytes, /*requireSealed=*/true);
  if (!results)
    return unavailable("the result region: " + llvm::toString(results.takeError()));
  client->control = std::move(*control);
  client->inputs = std::move(*inputs);
  client->results = std::move(*results);
  client->page = reinterpret_cast<ControlPage *>(client->control.data());
  client->version = pageVersion;
  client->ticket = client->page->request.load(std::memory_order_acquire);
  return std::move(client);
}

bool Client::fits(llvm::StringRef entry, llvm::ArrayRef<TensorView> views,
                  llvm::ArrayRef<ResultSpec> specs) const {
  if (views.size() > wire::kMaxFrameTensors || specs.size() > wire::kMaxFrameTensors)
    return false;
  uint64_t total = 0;
  std::vector<wire::TensorHeader> headers;
  for (const TensorView &t : views) {
    llvm::Expected<uint64_t> bytes = wire::packedBytes(t.elemSize, t.sizes);
    if (!bytes) {
      llvm::consumeError(bytes.takeError());
      return false;
    }
    if (*bytes > layout.inputBytes || align(total) > layout.inputBytes - *bytes)
      return false;
    total = align(total) + *bytes;
    headers.push_back(wire::TensorHeader{t.elemSize, t.sizes, 0, *bytes});
  }
  return requestBytes(entry, headers, specs.size()) <= kSlotBytes &&
         replyBytes(specs) <= kSlotBytes;
}

bool Client::awaitReply(uint32_t ticket, std::chrono::steady_clock::time_point until) {
  uint32_t before = ticket - 1;
  // Two processes on the launch's path (the grant says so: the worker answers, or the
  // executor runs kernels itself): each may keep a core for a moment.
  if (doorbell::spin(page->reply, before, kAwaitReplyAwake,
                     twoProcesses ? doorbell::kPauseFirst : std::chrono::nanoseconds(0)))
    return page->reply.load(std::memory_order_acquire) == ticket;
  while (page->reply.load(std::memory_order_acquire) == before) {
    auto now = std::chrono::steady_clock::now();
    if (now >= until || page->closed.load(std::memory_order_acquire))
      return false;
    auto slice = std::min<std::chrono::nanoseconds>(until - now, kSleepSlice);
    if (version >= 2)
      doorbell::sleep(page->reply, before, slice, page->clientSleeping);
    else
      doorbell::sleep(page->reply, before, slice);
    if (page->reply.load(std::memory_order_acquire) != before)
      break;
    struct pollfd gone {
      connection.get(), 0, 0
    };
    if (::poll(&gone, 1, 0) > 0 && (gone.revents & (POLLHUP | POLLERR)))
      return false;
  }
  return page->reply.load(std::memory_order_acquire) == ticket;
}

void Client::dropUnclaimedBuffers() {
  int from = workerSocket ? workerSocket.get() : connection.get();
  // At most one waits, as the sender holds to; a few more reads cost nothing.
  for (int i = 0; i < 4; ++i) {
    Message stale;
    llvm::Expected<ReceiveStatus> status =
        receiveMessage(from, stale, 64, std::chrono::steady_clock::now());
    if (!status) {
      llvm::consumeError(status.takeError());
      return;
    }
    if (*status != ReceiveStatus::Message)
      return;
  }
}

std::optional<llvm::Expected<std::vector<OwnedTensor>>>
Client::launch(const std::string &sha256, llvm::StringRef entry, llvm::ArrayRef<TensorView> views,
               llvm::ArrayRef<ResultSpec> specs, std::chrono::milliseconds timeout,
               const std::string &where) {
  std::unique_lock<std::mutex> lock(busy, std::try_to_lock);
  if (!lock.owns_lock())
    return std::nullopt;
  // Ended by the executor (its session expired or closed, or it is stopping): this launch
  // goes over HTTP, which says what became of the session.
  if (page->closed.load(std::memory_order_acquire)) {
    broken = true;
    return std::nullopt;
  }
  llvm::Expected<std::vector<OwnedTensor>> outcome =
      launchLocked(sha256, entry, views, specs, timeout, where);
  if (redirected) {
    redirected = false;
    llvm::consumeError(outcome.takeError());
    return std::nullopt;
  }
  return std::move(outcome);
}

llvm::Expected<std::vector<OwnedTensor>>
Client::launchLocked(const std::string &sha256, llvm::StringRef entry,
                     llvm::ArrayRef<TensorView> views, llvm::ArrayRef<ResultSpec> specs,
                     std::chrono::milliseconds timeout, const std::string &where) {
  if (broken)
    return lost(where, "the shared-memory channel is closed");
  llvm::Expected<uint32_t> sent = ring(sha256, entry, views, specs, timeout, where);
  if (!sent)
    return sent.takeError();
  auto until = std::chrono::steady_clock::now() + timeout + kReplyGrace;
  if (!awaitReply(*sent, until)) {
    // Out of step with the executor from here on: its late reply must not be taken for the
    // next launch's.
    broken = true;
    if (std::chrono::steady_clock::now() >= until)
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            where + ": no reply within the request timeout (" +
                                llvm::Twine(timeout.count()) + " ms)");
    return lost(where, "the executor ended the shared-memory channel during the launch");
  }
  llvm::Expected<LaunchReply> reply = readReply(specs, where);
  if (!reply)
    return reply.takeError();
  return takeResults(*reply, *sent, where);
}

llvm::Error Client::lost(const std::string &where, const llvm::Twine &what) {
  broken = true;
  return makeCodedError(ErrorCode::ExecutorLost, where + ": " + what);
}

llvm::Expected<uint32_t> Client::ring(const std::string &sha256, llvm::StringRef entry,
                                      llvm::ArrayRef<TensorView> views,
                                      llvm::ArrayRef<ResultSpec> specs,
                                      std::chrono::milliseconds timeout, const std::string &where) {
  LaunchRequest request;
  request.launch.object = sha256;
  request.launch.entry = entry.str();
  request.launch.results.assign(specs.begin(), specs.end());
  request.deadlineMs = static_cast<uint64_t>(timeout.count());
  uint64_t offset = 0;
  for (const TensorView &view : views) {
    wire::TensorHeader t;
    t.elemSize = view.elemSize;
    t.sizes = view.sizes;
    llvm::Expected<uint64_t> bytes = wire::packedBytes(view.elemSize, view.sizes);
    if (!bytes)
      return bytes.takeError();
    t.bytes = *bytes;
    t.offset = align(offset);
    if (t.offset > layout.inputBytes || layout.inputBytes - t.offset < t.bytes)
      return makeCodedError(ErrorCode::PayloadTooLarge,
                            where + ": the inputs do not fit the shared-memory input region");
    // Written once, from the caller's memory into what the kernel reads.
    if (t.bytes)
      wire::packInto(view, inputs.data() + t.offset);
    offset = t.offset + t.bytes;
    request.launch.inputs.push_back(std::move(t));
  }
  std::string bytes = encodeLaunchRequest(request);
  if (bytes.size() > kSlotBytes)
    return makeCodedError(ErrorCode::PayloadTooLarge,
                          where + ": the launch request does not fit the control page");
  std::memcpy(page->requestSlot, bytes.data(), bytes.size());
  page->requestBytes.store(static_cast<uint32_t>(bytes.size()), std::memory_order_release);
  uint32_t sent = ++ticket;
  if (version >= 2) {
    doorbell::set(page->request, sent, page->executorSleeping);
  } else {
    page->request.store(sent, std::memory_order_release);
    doorbell::ring(page->request);
  }
  return sent;
}

llvm::Expected<LaunchReply> Client::readReply(llvm::ArrayRef<ResultSpec> specs,
                                              const std::string &where) {
  uint32_t size = page->replyBytes.load(std::memory_order_acquire);
  if (size > kSlotBytes)
    return lost(where, "a malformed reply on the shared-memory channel");
  std::string replyBytes(page->replySlot, size);
  llvm::Expected<LaunchReply> reply = decodeLaunchReply(replyBytes, UINT64_MAX);
  if (!reply)
    return lost(where, llvm::toString(reply.takeError()));
  if (reply->redirect) {
    redirected = true; // Nothing ran: launch() sends it over HTTP.
    return makeCodedError(ErrorCode::Unavailable, where + ": redirected");
  }
  if (reply->failure) {
    dropUnclaimedBuffers();
    return makeCodedError(reply->failure->first, where + ": " + reply->failure->second);
  }
  if (reply->results.size() != specs.size())
    return lost(where, llvm::formatv("executor returned {0} results, expected {1}",
                                     reply->results.size(), specs.size()));
  for (size_t i = 0; i < specs.size(); ++i)
    if (static_cast<int64_t>(reply->results[i].sizes.size()) != specs[i].rank ||
        reply->results[i].elemSize != specs[i].elemSize)
      return lost(where,
                  llvm::formatv("result {0} has rank {1} and element size {2}, expected rank {3} "
                                "and element size {4}",
                                i, reply->results[i].sizes.size(), reply->results[i].elemSize,
                                specs[i].rank, specs[i].elemSize));
  return reply;
}

llvm::Expected<std::vector<OwnedTensor>> Client::takeResults(LaunchReply &reply, uint32_t sent,
                                                             const std::string &where) {
  // Results larger than the result region come in a buffer of their own, on the connection.
  SharedBuffer separate;
  const SharedBuffer *region = &results;
  if (reply.placement == Placement::SentBuffer) {
    Message carried;
    // Version 3: the worker's socket, each buffer naming its launch; one a launch left
    // behind (its worker was ended after sending it) is dropped here.
    std::string expected = "R";
    if (workerSocket) {
      ByteWriter tag;
      tag.u8('R').u64(sent);
      expected = tag.take();
    }
    int from = workerSocket ? workerSocket.get() : connection.get();
    auto until = std::chrono::steady_clock::now() + kReplyGrace;
    while (true) {
      llvm::Expected<ReceiveStatus> status = receiveMessage(from, carried, 64, until);
      if (!status)
        return lost(where, llvm::toString(status.takeError()));
      if (*status != ReceiveStatus::Message || carried.fds.size() != 1)
        return lost(where, "the executor did not send the buffer its results are in");
      if (carried.bytes == expected)
        break;
      if (!workerSocket || carried.bytes.size() != expected.size() || carried.bytes[0] != 'R')
        return lost(where, "a malformed result buffer message");
    }
    // Sealed, as the worker that sent it runs shipped code: it cannot shrink under the copy.
    llvm::Expected<SharedBuffer> mapped =
        SharedBuffer::mapAll(std::move(carried.fds[0]), /*requireSealed=*/true);
    if (!mapped)
      return lost(where, llvm::toString(mapped.takeError()));
    separate = std::move(*mapped);
    region = &separate;
  }
  if (!checkPlaced(reply, region->size()))
    return lost(where, "a result lies outside the region that holds it");
  std::vector<OwnedTensor> tensors;
  for (wire::TensorHeader &t : reply.results) {
    void *data = wire::allocateTensorBuffer(t.bytes);
    if (!data)
      return makeCodedError(ErrorCode::PayloadTooLarge, where + ": cannot allocate " +
                                                            llvm::Twine(t.bytes) +
                                                            " bytes for a result");
    std::vector<int64_t> strides = wire::packedStrides(t.sizes);
    tensors.emplace_back(data, data, t.elemSize, std::move(t.sizes), std::move(strides));
    std::memcpy(data, region->data() + t.offset, t.bytes);
  }
  return std::move(tensors);
}

} // namespace courier::transport::shm
