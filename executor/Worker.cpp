// The worker process: loads plugins, confines itself, then dispatches the one session's
// requests it serves to that session's kernels (executor/InProcessKernels.h), answering each
// on its channel; a same-host channel it is handed it answers itself (executor/WorkerDirect.h).
#include "executor/Worker.h"

#include "executor/InProcessKernels.h"
#include "executor/KernelThreads.h"
#include "executor/Sandbox.h"
#include "executor/WorkerDirect.h"
#include "executor/WorkerMemory.h"
#include "executor/WorkerProtocol.h"
#include "transport/ServerMain.h"
#include "transport/Wire.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sys/prctl.h>
#include <tuple>
#include <unistd.h>

namespace courier::executor {

using transport::ObjectBlob;
using transport::OwnedTensor;
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

/// Serves the executor's messages for one session: each one read as its struct
/// (executor/WorkerProtocol.h) and run on the session's kernels, which this process holds
/// in its sandbox as the in-process executor holds them in its own.
class Worker {
public:
  Worker(int channel, std::shared_ptr<InProcessKernels> kernels)
      : channel(channel), kernels(std::move(kernels)) {}

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
      kernels->detach(sha);
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
    if (llvm::Error error = kernels->attach(blob))
      return error;
    // What the executor checks launches against without asking again.
    std::optional<ObjectInfo> info = kernels->describe(sha);
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
    llvm::Expected<std::vector<OwnedTensor>> outcome =
        kernels->launch(launch.object, launch.entry, views, launch.results, arena);
    if (!outcome)
      return outcome.takeError();
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
    llvm::Expected<std::unique_ptr<WorkerDirect>> next = WorkerDirect::map(in, request);
    if (!next)
      return next.takeError();
    channel.unwatch();
    direct = std::move(*next);
    direct->watchOn(channel, [this] { serveDirect(); });
    MessageWriter done(MessageKind::Done);
    return answer(done);
  }

  /// Answers the channel's launch that is waiting, or lets the channel go once it is closed.
  void serveDirect() {
    if (direct->closed()) {
      channel.unwatch();
      direct.reset();
      return;
    }
    direct->answerWaiting(*kernels);
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
    llvm::Expected<std::string> output = kernels->call(symbol, *input, outputSize);
    if (!output)
      return output.takeError();
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

  WorkerChannel channel;
  std::shared_ptr<InProcessKernels> kernels;
  std::unique_ptr<WorkerDirect> direct;
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
  llvm::Expected<std::shared_ptr<InProcessKernels>> kernels =
      InProcessKernels::create(*plugins, ObjectHostOptions{options->allowUnsigned});
  if (!kernels)
    return fail(llvm::toString(kernels.takeError()));
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
  Worker worker(kWorkerChannelFd, std::move(*kernels));
  return worker.serve();
}

} // namespace courier::executor
