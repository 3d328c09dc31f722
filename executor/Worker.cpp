// The worker process: loads plugins, confines itself, then links objects and runs launches
// and calls for the one session it serves, answering each request on its channel.
#include "executor/Worker.h"

#include "executor/HostErrors.h"
#include "executor/KernelThreads.h"
#include "executor/ObjectHost.h"
#include "executor/Sandbox.h"
#include "executor/WorkerProtocol.h"
#include "transport/Metrics.h"
#include "transport/ServerMain.h"
#include "transport/SharedChannel.h"
#include "transport/Wire.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sys/prctl.h>
#include <tuple>
#include <unistd.h>

namespace courier::executor {

namespace doorbell = transport::doorbell;
namespace shm = transport::shm;
using transport::ObjectBlob;
using transport::OwnedTensor;
using transport::ResultSpec;
using transport::TensorView;

namespace {

struct WorkerOptions {
  pid_t parent = 0;
  std::vector<std::string> plugins;
  SandboxLimits limits;
  bool sandbox = true;
  bool allowUnsigned = false;
  unsigned kernelThreads = 0; ///< 0: the CPUs the worker may run on.
};

const char *const kWorkerUsage =
    "usage: courier-worker [--parent PID] [--plugin LIB.so]... [--memory-mib N]\n"
    "                      [--cpu-seconds N] [--kernel-threads N] [--no-sandbox]\n"
    "                      [--allow-unsigned-objects]\n"
    "  started by courier-executor with its channel on descriptor 3; see executor/Worker.h\n";

llvm::Expected<WorkerOptions> parseOptions(int argc, char **argv) {
  WorkerOptions options;
  transport::ArgumentReader args(argc, argv, kWorkerUsage);
  while (args.next()) {
    if (args.arg() == "--no-sandbox") {
      options.sandbox = false;
      continue;
    }
    if (args.arg() == "--allow-unsigned-objects") {
      options.allowUnsigned = true;
      continue;
    }
    llvm::StringRef name = args.name();
    if (!llvm::is_contained(
            {"--plugin", "--parent", "--memory-mib", "--cpu-seconds", "--kernel-threads"}, name))
      return args.unknown();
    if (llvm::Error e = args.readValue())
      return std::move(e);
    if (name == "--plugin") {
      options.plugins.push_back(args.value());
      continue;
    }
    uint64_t number = 0;
    if (llvm::Error e = args.number(number))
      return std::move(e);
    if (name == "--parent")
      options.parent = static_cast<pid_t>(number);
    else if (name == "--memory-mib")
      // A memfd a kernel makes counts only while mapped: without a control group of its own
      // (executor/WorkerCgroup.h) the file size limit bounds one.
      options.limits.memoryBytes = options.limits.fileBytes = number << 20;
    else if (name == "--kernel-threads")
      options.kernelThreads = static_cast<unsigned>(std::min<uint64_t>(number, 1024));
    else
      options.limits.cpuSeconds = number;
  }
  return options;
}

uint64_t bytesOf(const OwnedTensor &t) {
  uint64_t bytes = static_cast<uint64_t>(t.elemSize);
  for (int64_t size : t.sizes)
    bytes *= static_cast<uint64_t>(size);
  return bytes;
}

/// Where a launch's results go in a buffer: results the kernel computed in the arena, those
/// the host hands over with no allocation of their own (always packed row-major), may stay
/// where they are, and the others are packed after them.
class ResultLayout {
public:
  ResultLayout(const std::vector<OwnedTensor> &results, llvm::MutableArrayRef<char> arena)
      : results(results), arena(arena), offsets(results.size()), inPlace(results.size(), false) {
    for (size_t i = 0; i < results.size(); ++i) {
      const OwnedTensor &t = results[i];
      if (!arena.empty() && !t.allocated) {
        inPlace[i] = true;
        inPlaceEnd = std::max(
            inPlaceEnd, uint64_t(static_cast<const char *>(t.data) - arena.data()) + bytesOf(t));
      }
    }
    anyInPlace = llvm::is_contained(inPlace, true);
  }

  /// Sets each result's offset, results kept in place at theirs in the arena and the rest laid
  /// out after them; returns the bytes they span.
  uint64_t layOut(bool keepInPlace) {
    uint64_t size = keepInPlace ? inPlaceEnd : 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const OwnedTensor &t = results[i];
      if (keepInPlace && inPlace[i]) {
        offsets[i] = uint64_t(static_cast<const char *>(t.data) - arena.data());
      } else {
        offsets[i] = size = alignPayload(size);
        size += bytesOf(t);
      }
    }
    return size;
  }

  /// Packs the results at their offsets in `out`, but those kept in place.
  void pack(char *out, bool keptInPlace) const {
    for (size_t i = 0; i < results.size(); ++i)
      if (!keptInPlace || !inPlace[i]) {
        const OwnedTensor &t = results[i];
        transport::wire::packInto(TensorView{t.data, t.elemSize, t.sizes, t.strides},
                                  out + offsets[i]);
      }
  }

  const std::vector<OwnedTensor> &results;
  llvm::MutableArrayRef<char> arena;
  std::vector<uint64_t> offsets;
  std::vector<bool> inPlace;
  uint64_t inPlaceEnd = 0;
  bool anyInPlace = false;
};

class Worker {
  struct Direct;

public:
  Worker(int channel, std::unique_ptr<ObjectHost> host) : channel(channel), host(std::move(host)) {}

  /// Serves requests until the executor closes the channel.
  int serve() {
    Message request;
    while (channel.next(request)) {
      llvm::Error handled = handle(request);
      if (handled) {
        auto [code, message] =
            transport::takeCodeAndMessage(std::move(handled), transport::ErrorCode::LaunchFailed);
        if (message.size() > 16 * 1024)
          message.resize(16 * 1024);
        MessageWriter failed(MessageKind::Failed);
        failed.str(transport::errorCodeName(code)).str(message);
        if (llvm::Error e = answer(failed)) {
          llvm::consumeError(std::move(e));
          return 1;
        }
      }
    }
    return 0;
  }

private:
  /// Sends the answer to the current request.
  llvm::Error answer(MessageWriter &message, llvm::ArrayRef<int> fds = {}) {
    return channel.answer(message, fds);
  }

  /// Sends Done with `header` followed by a body of `size` bytes produced by `fill`.
  llvm::Error reply(MessageWriter &header, uint64_t size, llvm::function_ref<void(char *)> fill) {
    SharedBuffer shared;
    if (llvm::Error error = writeBody(header, size, fill, shared, "courier-reply"))
      return transport::makeCodedError(transport::ErrorCode::LaunchFailed,
                                       "cannot allocate the reply: " +
                                           llvm::toString(std::move(error)));
    if (shared.fd() < 0)
      return answer(header);
    return answer(header, {shared.fd()});
  }

  llvm::Error handle(Message &request) {
    MessageReader in(request.bytes);
    switch (in.kind()) {
    case MessageKind::AddObject:
      return addObject(in, request);
    case MessageKind::RemoveObject: {
      std::string sha = in.str().str();
      if (!in.ok())
        return llvm::createStringError("malformed request");
      if (llvm::Error error = host->removeObject(sha))
        return error;
      MessageWriter done(MessageKind::Done);
      return answer(done);
    }
    case MessageKind::Launch:
      return launch(in, request);
    case MessageKind::Call:
      return call(in, request);
    case MessageKind::Channel:
      return installChannel(in, request);
    default:
      return llvm::createStringError("unknown request");
    }
  }

  llvm::Error addObject(MessageReader &in, Message &request) {
    std::string sha = in.str().str();
    SharedBuffer shared;
    llvm::Expected<llvm::StringRef> bytes = readBody(in, request, shared, UINT64_MAX);
    if (!bytes)
      return bytes.takeError();
    ObjectBlob blob{sha, std::make_shared<const std::string>(bytes->str())};
    // The object host's message names the object.
    if (llvm::Error error = host->addObject(blob))
      return classifyHostError(std::move(error), transport::ErrorCode::InvalidObject,
                               transport::ErrorCode::InvalidObject, "");
    // What the executor checks launches against without asking again.
    std::optional<ObjectInfo> info = host->describe(sha);
    MessageWriter done(MessageKind::Done);
    done.u64(info ? info->entries.size() : 0);
    if (info)
      for (const std::string &entry : info->entries) {
        done.str(entry);
        auto table = info->signatures.find(entry);
        if (table == info->signatures.end()) {
          done.u64(0);
          continue;
        }
        done.u64(table->second.size());
        for (int64_t word : table->second)
          done.i64(word);
      }
    return answer(done);
  }

  llvm::Error launch(MessageReader &in, Message &request) {
    LaunchRequest launch = LaunchRequest::read(in);
    if (!in.ok())
      return llvm::createStringError("malformed launch request");
    // What the executor no longer keeps goes first, so what this launch maps fits the bound.
    for (auto it = arenas.begin(); it != arenas.end();)
      it = llvm::is_contained(launch.keep, it->first) ? std::next(it) : arenas.erase(it);
    size_t nextFd = 0;
    // Inline bytes are copied to an aligned buffer: kernels may assume element alignment.
    AlignedBytes aligned;
    SharedBuffer *inputArena = nullptr;
    llvm::Expected<const char *> base = inputBody(launch, request, nextFd, aligned, inputArena);
    if (!base)
      return base.takeError();
    SharedBuffer *resultArena = nullptr;
    if (launch.resultArena.id) {
      llvm::Expected<SharedBuffer *> arena = arenaFor(launch.resultArena, request, nextFd, 0);
      if (!arena)
        return arena.takeError();
      resultArena = *arena;
    }
    std::vector<TensorView> views;
    views.reserve(launch.inputs.size());
    uint64_t total = launch.total;
    for (const PlacedTensor &input : launch.inputs) {
      llvm::Expected<uint64_t> expected = transport::wire::packedBytes(input.elemSize, input.sizes);
      if (!expected)
        return expected.takeError();
      if (*expected != input.bytes || !liesWithin(input.offset, input.bytes, total))
        return llvm::createStringError("launch input lies outside its buffer");
      views.push_back(TensorView{*base + input.offset, input.elemSize, input.sizes,
                                 transport::wire::packedStrides(input.sizes)});
    }
    // Large buffers the kernel allocates go straight into the result arena: a result there is
    // sent from where it was computed.
    llvm::MutableArrayRef<char> arena;
    if (resultArena && resultArena != inputArena) // Never where the inputs are read.
      arena = llvm::MutableArrayRef<char>(resultArena->data(), resultArena->size());
    llvm::StringRef entry = launch.entry;
    llvm::Expected<std::vector<OwnedTensor>> outcome =
        host->launch(launch.object, entry, views, launch.results, arena);
    if (!outcome)
      return classifyHostError(outcome.takeError(), transport::ErrorCode::UnknownEntry,
                               transport::ErrorCode::LaunchFailed, "launching '" + entry + "'");
    if (outcome->size() != launch.results.size())
      return transport::makeCodedError(transport::ErrorCode::LaunchFailed,
                                       llvm::formatv("'{0}' returned {1} results, expected {2}",
                                                     entry, outcome->size(),
                                                     launch.results.size()));
    // Into the arena the executor lent, with no fresh pages and no new descriptor, when it holds
    // them; else inline or in a buffer of its own, the arena's results copied there too.
    ResultLayout layout(*outcome, arena);
    uint64_t size = layout.layOut(layout.anyInPlace);
    bool intoArena =
        resultArena && (layout.anyInPlace || size > kInlineBytes) && size <= resultArena->size();
    if (!intoArena && layout.anyInPlace)
      size = layout.layOut(false);
    LaunchAnswer answered;
    for (size_t i = 0; i < outcome->size(); ++i) {
      const OwnedTensor &t = (*outcome)[i];
      answered.results.push_back(PlacedTensor{t.elemSize, t.sizes, layout.offsets[i], 0});
    }
    MessageWriter done(MessageKind::Done);
    answered.writePlaces(done);
    if (intoArena) {
      layout.pack(resultArena->data(), layout.anyInPlace);
      BodyHead{size, Payload::Arena, {}, 0}.write(done);
      return answer(done);
    }
    return reply(done, size, [&](char *out) { layout.pack(out, false); });
  }

  /// Where a launch's inputs lie: inline (copied to `aligned`), or in an input arena (mapped
  /// once, `inputArena`).
  llvm::Expected<const char *> inputBody(const LaunchRequest &launch, Message &request,
                                         size_t &nextFd, AlignedBytes &aligned,
                                         SharedBuffer *&inputArena) {
    if (launch.inputsIn == Payload::Inline) {
      if (launch.inlineBytes.size() != launch.total)
        return llvm::createStringError("malformed inline payload");
      llvm::Expected<AlignedBytes> copied = copyAligned(launch.inlineBytes);
      if (!copied)
        return copied.takeError();
      aligned = std::move(*copied);
      return aligned.get();
    }
    llvm::Expected<SharedBuffer *> arena =
        arenaFor(launch.inputArena, request, nextFd, launch.total);
    if (!arena)
      return arena.takeError();
    inputArena = *arena;
    return inputArena->data();
  }

  /// Maps a same-host channel the executor hands over, and answers its launches from now on.
  llvm::Error installChannel(MessageReader &in, Message &request) {
    uint64_t maxResultBytes = in.u64();
    if (!in.ok() || request.fds.size() != 5)
      return llvm::createStringError("malformed channel request");
    auto next = std::make_unique<Direct>();
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
    channel.unwatch();
    direct = std::move(next);
    channel.watch(&direct->page().request, &direct->page().executorSleeping, &direct->seen,
                  &direct->page().closed, [this] { serveDirect(); });
    MessageWriter done(MessageKind::Done);
    return answer(done);
  }

  /// Answers the channel's launch that is waiting, or lets the channel go once it is closed.
  void serveDirect() {
    Direct &d = *direct;
    shm::ControlPage &page = d.page();
    if (page.closed.load(std::memory_order_acquire)) {
      channel.unwatch();
      direct.reset();
      return;
    }
    uint32_t ticket = page.request.load(std::memory_order_acquire);
    if (ticket == d.seen)
      return; // Woken to look at `closed`, which the client set and cleared again.
    std::string reply = runDirect(d, ticket);
    if (reply.size() > shm::kSlotBytes) // Answered payload_too_large instead.
      d.counts().failed.fetch_add(1, std::memory_order_relaxed);
    d.seen = ticket;
    shm::answer(page, ticket, std::move(reply), shm::kPageVersion);
  }

  /// Results larger than the result region: packed into a buffer of their own, sent to the
  /// client, which must have received the last one: one buffer at most waits on the socket
  /// for a client that takes none (docs/protocol.md), as the executor holds to when it answers.
  static llvm::Error sendSeparately(Direct &d, ResultLayout &layout, uint64_t total,
                                    uint32_t ticket) {
    using transport::ErrorCode;
    llvm::Expected<uint64_t> unreceived = transport::unreceivedBytes(d.client.get());
    if (!unreceived || *unreceived > 0)
      return transport::makeCodedError(
          ErrorCode::BadRequest,
          "the client has not received the previous launch's results from the worker's "
          "socket, and one buffer of results at most waits there" +
              (unreceived ? std::string() : " (" + llvm::toString(unreceived.takeError()) + ")"));
    llvm::Expected<SharedBuffer> separate = SharedBuffer::create(total, "courier-shm-reply");
    if (!separate)
      return transport::makeCodedError(
          ErrorCode::PayloadTooLarge,
          "cannot allocate " + llvm::Twine(total) +
              " bytes for the results: " + llvm::toString(separate.takeError()));
    layout.pack(separate->data(), false);
    if (llvm::Error error = separate->sealSize())
      return error;
    transport::ByteWriter tag; // Names the launch: a client drops one left behind.
    tag.u8('R').u64(ticket);
    if (llvm::Error error = transport::sendMessage(d.client.get(), tag.view(), {separate->fd()}))
      return transport::makeCodedError(ErrorCode::BadRequest,
                                       "sending the results to the client: " +
                                           llvm::toString(std::move(error)));
    return llvm::Error::success();
  }

  /// Runs the launch in the channel's request slot and returns its reply.
  std::string runDirect(Direct &d, uint32_t ticket) {
    using transport::ErrorCode;
    auto failed = [&](llvm::Error error) {
      d.counts().failed.fetch_add(1, std::memory_order_relaxed);
      return shm::encodeFailure(std::move(error), ErrorCode::LaunchFailed);
    };
    SharedBuffer &inputs = d.inputs->buffer;
    SharedBuffer &results = d.results->buffer;
    llvm::Expected<shm::LaunchRequest> request = shm::readRequest(d.page(), inputs.size());
    if (!request)
      return failed(request.takeError());
    transport::wire::LaunchRequest &launch = request->launch;
    // An object the executor has not loaded here yet goes through it, over HTTP.
    if (!host->hasObject(launch.object))
      return shm::encodeRedirect();
    d.counts().started.fetch_add(1, std::memory_order_relaxed);
    llvm::scope_exit finished([&] { d.counts().finished.fetch_add(1, std::memory_order_release); });
    std::vector<TensorView> views;
    views.reserve(launch.inputs.size());
    for (const transport::wire::TensorHeader &t : launch.inputs)
      views.push_back(TensorView{inputs.data() + t.offset, t.elemSize, t.sizes,
                                 transport::wire::packedStrides(t.sizes)});
    llvm::MutableArrayRef<char> arena(results.data(), results.size());
    auto started = std::chrono::steady_clock::now();
    llvm::Expected<std::vector<OwnedTensor>> outcome =
        host->launch(launch.object, launch.entry, views, launch.results, arena);
    countDuration(d, std::chrono::steady_clock::now() - started);
    if (!outcome)
      return failed(classifyHostError(outcome.takeError(), transport::ErrorCode::UnknownEntry,
                                      transport::ErrorCode::LaunchFailed,
                                      "launching '" + launch.entry + "'"));
    if (outcome->size() != launch.results.size())
      return failed(transport::makeCodedError(
          transport::ErrorCode::LaunchFailed,
          llvm::formatv("'{0}' returned {1} results, expected {2}", launch.entry, outcome->size(),
                        launch.results.size())));
    ResultLayout layout(*outcome, arena);
    uint64_t total = layout.layOut(layout.anyInPlace);
    bool inRegion = total <= results.size();
    if (!inRegion)
      total = layout.layOut(false);
    if (total > d.maxResultBytes)
      return failed(transport::makeCodedError(
          ErrorCode::PayloadTooLarge,
          llvm::formatv("'{0}' returned {1} bytes of results; this executor sends at most {2}",
                        launch.entry, total, d.maxResultBytes)));
    shm::LaunchReply reply;
    if (inRegion) {
      layout.pack(results.data(), layout.anyInPlace);
    } else {
      if (llvm::Error error = sendSeparately(d, layout, total, ticket))
        return failed(std::move(error));
      reply.placement = shm::Placement::SentBuffer;
    }
    for (size_t i = 0; i < outcome->size(); ++i) {
      const OwnedTensor &t = (*outcome)[i];
      transport::wire::TensorHeader header;
      header.elemSize = t.elemSize;
      header.sizes = t.sizes;
      header.offset = layout.offsets[i];
      header.bytes = bytesOf(t);
      reply.results.push_back(std::move(header));
    }
    return shm::encodeLaunchReply(reply);
  }

  static void countDuration(Direct &d, std::chrono::steady_clock::duration took) {
    const prometheus::Histogram::BucketBoundaries &bounds = transport::durationBuckets();
    double seconds = std::chrono::duration<double>(took).count();
    // The first bucket whose bound is at least the value (le), as a histogram counts it.
    size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
    d.counts().buckets[std::min<size_t>(bucket, std::size(d.counts().buckets) - 1)].fetch_add(
        1, std::memory_order_relaxed);
    d.counts().nanoseconds.fetch_add(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
        std::memory_order_relaxed);
    d.counts().timed.fetch_add(1, std::memory_order_relaxed);
  }

  llvm::Error call(MessageReader &in, Message &request) {
    std::string symbol = in.str().str();
    uint64_t outputSize = in.u64();
    if (!in.ok())
      return llvm::createStringError("malformed call request");
    SharedBuffer shared;
    llvm::Expected<llvm::StringRef> input = readBody(in, request, shared, UINT64_MAX);
    if (!input)
      return input.takeError();
    llvm::Expected<std::string> output = host->call(symbol, *input, outputSize);
    if (!output)
      return classifyHostError(output.takeError(), transport::ErrorCode::UnknownSymbol,
                               transport::ErrorCode::CallFailed, "calling '" + symbol + "'");
    MessageWriter done(MessageKind::Done);
    return reply(done, output->size(),
                 [&](char *out) { std::memcpy(out, output->data(), output->size()); });
  }

  /// The session's arena `ref.id`, mapped once and kept until the executor leaves it out of a
  /// launch's list: its pages then need no faulting in on later launches.
  llvm::Expected<SharedBuffer *> arenaFor(const ArenaRef &ref, Message &request, size_t &nextFd,
                                          uint64_t atLeast) {
    auto found = arenas.find(ref.id);
    if (ref.sent) {
      if (nextFd >= request.fds.size())
        return llvm::createStringError("a launch names an arena it did not send");
      UniqueFd fd = std::move(request.fds[nextFd++]);
      // Already mapped (the executor forgot after a failure): the descriptor is dropped.
      if (found == arenas.end()) {
        if (arenas.size() >= kMaxMappedArenas)
          return llvm::createStringError("a launch maps more arenas than a worker keeps");
        llvm::Expected<SharedBuffer> mapped = SharedBuffer::mapAll(std::move(fd));
        if (!mapped)
          return mapped.takeError();
        found = arenas
                    .emplace(std::piecewise_construct, std::forward_as_tuple(ref.id),
                             std::forward_as_tuple(std::move(*mapped)))
                    .first;
      }
    } else if (found == arenas.end()) {
      return llvm::createStringError("a launch names an arena this worker has not mapped");
    }
    if (found->second.buffer.size() < atLeast)
      return llvm::createStringError("an arena is smaller than the launch says");
    return &found->second.buffer;
  }

  /// A mapped arena, known to the object host for as long as it is mapped (rememberArena).
  struct KnownArena {
    explicit KnownArena(SharedBuffer mapped) : buffer(std::move(mapped)) {
      rememberArena(buffer.data(), buffer.size());
    }
    ~KnownArena() { forgetArena(buffer.data()); }
    KnownArena(const KnownArena &) = delete;
    KnownArena &operator=(const KnownArena &) = delete;
    SharedBuffer buffer;
  };

  /// A same-host channel this worker answers (MessageKind::Channel).
  struct Direct {
    SharedBuffer control;
    std::unique_ptr<KnownArena> inputs, results;
    SharedBuffer countsBuffer;
    UniqueFd client;
    uint64_t maxResultBytes = 0;
    uint32_t seen = 0; ///< The request answered last.

    shm::ControlPage &page() const { return *reinterpret_cast<shm::ControlPage *>(control.data()); }
    shm::WorkerCounts &counts() const {
      return *reinterpret_cast<shm::WorkerCounts *>(countsBuffer.data());
    }
  };

  WorkerChannel channel;
  std::unique_ptr<ObjectHost> host;
  std::unique_ptr<Direct> direct;
  /// The executor keeps 8 mapped (executor/ExecutorCore.cpp); more is a broken request.
  static constexpr size_t kMaxMappedArenas = 16;
  std::map<uint64_t, KnownArena> arenas;
};

} // namespace

int runWorker(int argc, char **argv) {
  auto fail = [](const llvm::Twine &message) {
    // The executor reads this from its log; the channel closes with the process.
    llvm::errs() << "courier-worker: error: " << message << "\n";
    // A Failed message before Ready tells the executor why the worker could not start.
    MessageWriter failed(MessageKind::Failed);
    failed.str("worker_unavailable").str(message.str());
    llvm::consumeError(sendMessage(kWorkerChannelFd, failed.view()));
    return 2;
  };
  llvm::Expected<WorkerOptions> options = parseOptions(argc, argv);
  if (!options)
    return fail(llvm::toString(options.takeError()));
  // First, while this is the only thread: every thread started later has none either. A
  // sandboxed worker of a root server runs as nobody.
  if (options->sandbox)
    if (llvm::Error error = leaveRoot())
      return fail(llvm::toString(std::move(error)));
  if (llvm::Error error = dropCapabilities())
    return fail(llvm::toString(std::move(error)));
  // Die with the executor, even while a kernel spins and never reads the channel again.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
      (options->parent && ::getppid() != options->parent))
    return 3;
  // Nothing but the standard streams and the channel: descriptors the executor holds must
  // not reach shipped code.
  ::close_range(kWorkerChannelFd + 1, ~0U, 0);

  llvm::Expected<std::shared_ptr<PluginSet>> plugins = PluginSet::load(options->plugins);
  if (!plugins)
    return fail(llvm::toString(plugins.takeError()));
  llvm::Expected<std::unique_ptr<ObjectHost>> host =
      ObjectHost::create(*plugins, ObjectHostOptions{options->allowUnsigned});
  if (!host)
    return fail("creating the object host: " + llvm::toString(host.takeError()));
  if (llvm::Error error = installCrashReporter(kWorkerChannelFd))
    return fail(llvm::toString(std::move(error)));
  // Kernels' threads, from the thread that runs launches, before the limits (RLIMIT_NPROC 0)
  // and the filter (no clone) forbid making them; their stacks are mapped before RLIMIT_AS
  // is set from the worker's size, so they are not taken from what kernels may allocate.
  setKernelThreads(options->kernelThreads);
  if (llvm::Error error = startKernelThreads())
    return fail("starting kernel threads: " + llvm::toString(std::move(error)));
  if (llvm::Error error = applyLimits(options->limits))
    return fail(llvm::toString(std::move(error)));
  if (options->sandbox)
    if (llvm::Error error = enterSandbox())
      return fail("cannot enter the sandbox: " + llvm::toString(std::move(error)));

  if (llvm::Error error = sendReady(kWorkerChannelFd, options->sandbox)) {
    llvm::consumeError(std::move(error));
    return 1;
  }
  Worker worker(kWorkerChannelFd, std::move(*host));
  return worker.serve();
}

} // namespace courier::executor
