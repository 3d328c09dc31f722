// A same-host channel answered by the session's worker: the client's launches run here, on
// inputs where the client wrote them, with results packed where it reads them.
#include "executor/WorkerDirect.h"

#include "executor/InProcessKernels.h"
#include "transport/Metrics.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace courier::executor {

namespace shm = transport::shm;
using transport::ErrorCode;
using transport::makeCodedError;
using transport::OwnedTensor;
using transport::SharedBuffer;
using transport::TensorView;

llvm::Expected<std::unique_ptr<WorkerDirect>> WorkerDirect::map(MessageReader &in,
                                                                Message &request) {
  uint64_t maxResultBytes = in.u64();
  if (!in.ok() || request.fds.size() != 5)
    return llvm::createStringError("malformed channel request");
  std::unique_ptr<WorkerDirect> next(new WorkerDirect);
  llvm::Expected<SharedBuffer> control =
      SharedBuffer::map(std::move(request.fds[0]), sizeof(shm::ControlPage));
  if (!control)
    return control.takeError();
  llvm::Expected<SharedBuffer> inputs = SharedBuffer::mapAll(std::move(request.fds[1]));
  if (!inputs)
    return inputs.takeError();
  llvm::Expected<SharedBuffer> results = SharedBuffer::mapAll(std::move(request.fds[2]));
  if (!results)
    return results.takeError();
  llvm::Expected<SharedBuffer> counts =
      SharedBuffer::map(std::move(request.fds[3]), sizeof(shm::WorkerCounts));
  if (!counts)
    return counts.takeError();
  next->control = std::move(*control);
  next->inputs = std::make_unique<KnownArena>(std::move(*inputs));
  next->results = std::make_unique<KnownArena>(std::move(*results));
  next->countsBuffer = std::move(*counts);
  next->client = std::move(request.fds[4]);
  next->maxResultBytes = maxResultBytes;
  // Launches up to the last answer are done; one rung since is this worker's to answer.
  next->seen = next->page().reply.load(std::memory_order_acquire);
  return next;
}

WorkerDirect::~WorkerDirect() = default;

shm::ControlPage &WorkerDirect::page() const {
  return *reinterpret_cast<shm::ControlPage *>(control.data());
}

shm::WorkerCounts &WorkerDirect::counts() const {
  return *reinterpret_cast<shm::WorkerCounts *>(countsBuffer.data());
}

void WorkerDirect::watchOn(WorkerChannel &channel, std::function<void()> serve) {
  channel.watch(&page().request, &page().executorSleeping, &seen, &page().closed, std::move(serve));
}

bool WorkerDirect::closed() const { return page().closed.load(std::memory_order_acquire); }

void WorkerDirect::answerWaiting(InProcessKernels &kernels) {
  uint32_t ticket = page().request.load(std::memory_order_acquire);
  if (ticket == seen)
    return; // Woken to look at `closed`, which the client set and cleared again.
  std::string reply = run(kernels, ticket);
  if (reply.size() > shm::kSlotBytes) // Answered payload_too_large instead.
    counts().failed.fetch_add(1, std::memory_order_relaxed);
  seen = ticket;
  shm::answer(page(), ticket, std::move(reply), shm::kPageVersion);
}

/// One buffer at most waits on the socket for a client that takes none (docs/protocol.md),
/// as the executor holds to when it answers: the client must have received the last one.
llvm::Error WorkerDirect::sendSeparately(ResultLayout &layout, uint64_t total, uint32_t ticket) {
  llvm::Expected<uint64_t> unreceived = transport::unreceivedBytes(client.get());
  if (!unreceived || *unreceived > 0)
    return makeCodedError(
        ErrorCode::BadRequest,
        "the client has not received the previous launch's results from the worker's "
        "socket, and one buffer of results at most waits there" +
            (unreceived ? std::string() : " (" + llvm::toString(unreceived.takeError()) + ")"));
  llvm::Expected<SharedBuffer> separate = SharedBuffer::create(total, "courier-shm-reply");
  if (!separate)
    return makeCodedError(ErrorCode::PayloadTooLarge,
                          "cannot allocate " + llvm::Twine(total) +
                              " bytes for the results: " + llvm::toString(separate.takeError()));
  layout.pack(separate->data(), false);
  if (llvm::Error error = separate->sealSize())
    return error;
  transport::ByteWriter tag; // Names the launch: a client drops one left behind.
  tag.u8('R').u64(ticket);
  if (llvm::Error error = transport::sendMessage(client.get(), tag.view(), {separate->fd()}))
    return makeCodedError(ErrorCode::BadRequest,
                          "sending the results to the client: " + llvm::toString(std::move(error)));
  return llvm::Error::success();
}

std::string WorkerDirect::run(InProcessKernels &kernels, uint32_t ticket) {
  auto failed = [&](llvm::Error error) {
    counts().failed.fetch_add(1, std::memory_order_relaxed);
    return shm::encodeFailure(std::move(error), ErrorCode::LaunchFailed);
  };
  SharedBuffer &in = inputs->buffer;
  SharedBuffer &out = results->buffer;
  llvm::Expected<shm::LaunchRequest> request = shm::readRequest(page(), in.size());
  if (!request)
    return failed(request.takeError());
  transport::wire::LaunchRequest &launch = request->launch;
  // An object the executor has not loaded here yet goes through it, over HTTP.
  if (!kernels.attached(launch.object))
    return shm::encodeRedirect();
  counts().started.fetch_add(1, std::memory_order_relaxed);
  llvm::scope_exit finished([&] { counts().finished.fetch_add(1, std::memory_order_release); });
  std::vector<TensorView> views;
  views.reserve(launch.inputs.size());
  for (const transport::wire::TensorHeader &t : launch.inputs)
    views.push_back(TensorView{in.data() + t.offset, t.elemSize, t.sizes,
                               transport::wire::packedStrides(t.sizes)});
  llvm::MutableArrayRef<char> arena(out.data(), out.size());
  auto started = std::chrono::steady_clock::now();
  llvm::Expected<std::vector<OwnedTensor>> outcome =
      kernels.launch(launch.object, launch.entry, views, launch.results, arena);
  countDuration(std::chrono::steady_clock::now() - started);
  if (!outcome)
    return failed(outcome.takeError());
  ResultLayout layout(*outcome, arena);
  uint64_t total = layout.layOut(layout.anyInPlace);
  bool inRegion = total <= out.size();
  if (!inRegion)
    total = layout.layOut(false);
  if (total > maxResultBytes)
    return failed(makeCodedError(
        ErrorCode::PayloadTooLarge,
        llvm::formatv("'{0}' returned {1} bytes of results; this executor sends at most {2}",
                      launch.entry, total, maxResultBytes)));
  shm::LaunchReply reply;
  if (inRegion) {
    layout.pack(out.data(), layout.anyInPlace);
  } else {
    if (llvm::Error error = sendSeparately(layout, total, ticket))
      return failed(std::move(error));
    reply.placement = shm::Placement::SentBuffer;
  }
  for (size_t i = 0; i < outcome->size(); ++i) {
    const OwnedTensor &t = (*outcome)[i];
    transport::wire::TensorHeader header;
    header.elemSize = t.elemSize;
    header.sizes = t.sizes;
    header.offset = layout.offsets[i];
    header.bytes = packedBytesOf(t);
    reply.results.push_back(std::move(header));
  }
  return shm::encodeLaunchReply(reply);
}

void WorkerDirect::countDuration(std::chrono::steady_clock::duration took) {
  const prometheus::Histogram::BucketBoundaries &bounds = transport::durationBuckets();
  double seconds = std::chrono::duration<double>(took).count();
  // The first bucket whose bound is at least the value (le), as a histogram counts it.
  size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
  shm::WorkerCounts &c = counts();
  c.buckets[std::min<size_t>(bucket, std::size(c.buckets) - 1)].fetch_add(
      1, std::memory_order_relaxed);
  c.nanoseconds.fetch_add(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
      std::memory_order_relaxed);
  c.timed.fetch_add(1, std::memory_order_relaxed);
}

} // namespace courier::executor
