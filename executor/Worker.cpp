// The worker process: loads plugins, confines itself, then links objects and runs launches
// and calls for the one session it serves, answering each request on its channel.
#include "executor/Worker.h"

#include "executor/HostErrors.h"
#include "executor/ObjectHost.h"
#include "executor/Sandbox.h"
#include "executor/WorkerProtocol.h"
#include "transport/ServerMain.h"
#include "transport/Wire.h"

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

using transport::forgetArena;
using transport::ObjectBlob;
using transport::ObjectHost;
using transport::OwnedTensor;
using transport::PluginSet;
using transport::rememberArena;
using transport::ResultSpec;
using transport::TensorView;

namespace {

struct WorkerOptions {
  pid_t parent = 0;
  std::vector<std::string> plugins;
  SandboxLimits limits;
  bool sandbox = true;
  bool allowUnsigned = false;
};

const char *const kWorkerUsage =
    "usage: courier-worker [--parent PID] [--plugin LIB.so]... [--memory-mib N]\n"
    "                      [--cpu-seconds N] [--no-sandbox] [--allow-unsigned-objects]\n"
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
    if (!llvm::is_contained({"--plugin", "--parent", "--memory-mib", "--cpu-seconds"}, name))
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
      options.limits.memoryBytes = number << 20;
    else
      options.limits.cpuSeconds = number;
  }
  return options;
}

class Worker {
public:
  Worker(int channel, std::unique_ptr<ObjectHost> host) : channel(channel), host(std::move(host)) {}

  /// Serves requests until the executor closes the channel.
  int serve() {
    Message request;
    while (channel.next(request)) {
      llvm::Error handled = handle(request);
      if (handled) {
        auto [code, message] = describeError(std::move(handled), "launch_failed");
        if (message.size() > 16 * 1024)
          message.resize(16 * 1024);
        MessageWriter failed(MessageKind::Failed);
        failed.str(code).str(message);
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

  /// The payload of a request: inline bytes or a shared buffer of `size` bytes.
  llvm::Expected<llvm::StringRef> payload(MessageReader &in, Message &request, uint64_t size,
                                          SharedBuffer &shared) {
    bool inlined = in.u64() != 0;
    if (inlined) {
      llvm::StringRef bytes = in.str();
      if (!in.ok() || bytes.size() != size)
        return llvm::createStringError("malformed inline payload");
      return bytes;
    }
    if (size == 0)
      return llvm::StringRef();
    if (request.fds.size() != 1)
      return llvm::createStringError("expected one shared buffer");
    llvm::Expected<SharedBuffer> mapped = SharedBuffer::map(std::move(request.fds[0]), size);
    if (!mapped)
      return mapped.takeError();
    shared = std::move(*mapped);
    return llvm::StringRef(shared.data(), size);
  }

  /// Sends Done with `header` followed by `size` payload bytes produced by `fill`.
  template <typename Fill> llvm::Error reply(MessageWriter &header, uint64_t size, Fill fill) {
    if (size <= kInlineBytes) {
      std::string bytes(size, '\0');
      fill(bytes.data());
      header.u64(1).str(bytes);
      return answer(header);
    }
    llvm::Expected<SharedBuffer> shared = SharedBuffer::create(size, "courier-reply");
    if (!shared)
      return transport::wire::makeWireError(
          "launch_failed", "cannot allocate the reply: " + llvm::toString(shared.takeError()));
    fill(shared->data());
    // The executor maps only sealed buffers: a file it reads must not shrink under it.
    if (llvm::Error error = shared->sealSize())
      return error;
    header.u64(0);
    return answer(header, {shared->fd()});
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
    default:
      return llvm::createStringError("unknown request");
    }
  }

  llvm::Error addObject(MessageReader &in, Message &request) {
    std::string sha = in.str().str();
    uint64_t size = in.u64();
    SharedBuffer shared;
    llvm::Expected<llvm::StringRef> bytes = payload(in, request, size, shared);
    if (!bytes)
      return bytes.takeError();
    ObjectBlob blob{sha, std::make_shared<const std::string>(bytes->str())};
    // The object host's message names the object.
    if (llvm::Error error = host->addObject(blob))
      return classifyHostError(std::move(error), "invalid_object", "invalid_object", "");
    // What the executor checks launches against without asking again.
    std::optional<transport::ObjectInfo> info = host->describe(sha);
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
    std::string sha = in.str().str();
    std::string entry = in.str().str();
    struct Input {
      int64_t elemSize;
      std::vector<int64_t> sizes;
      uint64_t offset, bytes;
    };
    std::vector<Input> inputs(in.count(24));
    for (Input &input : inputs) {
      input.elemSize = in.i64();
      input.sizes.resize(in.count(8));
      for (int64_t &s : input.sizes)
        s = in.i64();
      input.offset = in.u64();
      input.bytes = in.u64();
    }
    std::vector<ResultSpec> results(in.count(16));
    for (ResultSpec &r : results) {
      r.rank = in.i64();
      r.elemSize = in.i64();
    }
    uint64_t total = in.u64();
    uint64_t mode = in.u64();
    size_t nextFd = 0;
    // Inline bytes are copied to an aligned buffer: kernels may assume element alignment.
    AlignedBytes aligned;
    const char *base = nullptr;
    std::vector<uint64_t> inUse;
    SharedBuffer *inputArena = nullptr;
    if (mode == 1) {
      llvm::StringRef bytes = in.str();
      if (!in.ok() || bytes.size() != total)
        return llvm::createStringError("malformed inline payload");
      llvm::Expected<AlignedBytes> copied = copyAligned(bytes);
      if (!copied)
        return copied.takeError();
      aligned = std::move(*copied);
      base = aligned.get();
    } else if (mode == 2) {
      uint64_t id = in.u64();
      llvm::Expected<SharedBuffer *> arena = arenaFor(id, request, nextFd, total, inUse);
      if (!arena)
        return arena.takeError();
      base = (*arena)->data();
      inputArena = *arena;
      inUse.push_back(id);
    } else {
      return llvm::createStringError("malformed launch request");
    }
    SharedBuffer *resultArena = nullptr;
    if (uint64_t id = in.u64()) {
      llvm::Expected<SharedBuffer *> arena = arenaFor(id, request, nextFd, 0, inUse);
      if (!arena)
        return arena.takeError();
      resultArena = *arena;
      inUse.push_back(id);
    }
    uint64_t droppedCount = in.count(8);
    for (uint64_t i = 0; i < droppedCount; ++i) {
      uint64_t id = in.u64();
      if (!llvm::is_contained(inUse, id))
        arenas.erase(id);
    }
    if (!in.ok())
      return llvm::createStringError("malformed launch request");
    std::vector<TensorView> views;
    views.reserve(inputs.size());
    for (const Input &input : inputs) {
      llvm::Expected<uint64_t> expected = transport::wire::packedBytes(input.elemSize, input.sizes);
      if (!expected)
        return expected.takeError();
      if (*expected != input.bytes || input.offset > total || total - input.offset < input.bytes)
        return llvm::createStringError("launch input lies outside its buffer");
      views.push_back(TensorView{base + input.offset, input.elemSize, input.sizes,
                                 transport::wire::packedStrides(input.sizes)});
    }
    // Large buffers the kernel allocates go straight into the result arena: a result there is
    // sent from where it was computed.
    llvm::MutableArrayRef<char> arena;
    if (resultArena && resultArena != inputArena) // Never where the inputs are read.
      arena = llvm::MutableArrayRef<char>(resultArena->data(), resultArena->size());
    llvm::Expected<std::vector<OwnedTensor>> outcome =
        host->launch(sha, entry, views, results, arena);
    if (!outcome)
      return classifyHostError(outcome.takeError(), "unknown_entry", "launch_failed",
                               "launching '" + entry + "'");
    if (outcome->size() != results.size())
      return transport::wire::makeWireError(
          "launch_failed", llvm::formatv("'{0}' returned {1} results, expected {2}", entry,
                                         outcome->size(), results.size()));
    auto bytesOf = [](const OwnedTensor &t) {
      uint64_t bytes = static_cast<uint64_t>(t.elemSize);
      for (int64_t s : t.sizes)
        bytes *= static_cast<uint64_t>(s);
      return bytes;
    };
    // Results the kernel computed in the arena, those the host hands over with no allocation
    // of their own (always packed row-major), stay where they are; the others are packed after
    // them.
    std::vector<bool> inPlace(outcome->size(), false);
    uint64_t inPlaceEnd = 0;
    for (size_t i = 0; i < outcome->size(); ++i) {
      const OwnedTensor &t = (*outcome)[i];
      if (!arena.empty() && !t.allocated) {
        inPlace[i] = true;
        inPlaceEnd = std::max(
            inPlaceEnd, uint64_t(static_cast<const char *>(t.data) - arena.data()) + bytesOf(t));
      }
    }
    bool anyInPlace = llvm::is_contained(inPlace, true);
    // Each result's offset, results kept in place at theirs in the arena and the rest laid out
    // after them; returns the bytes they span.
    std::vector<uint64_t> offsets(outcome->size());
    auto layOut = [&](bool keepInPlace) {
      uint64_t size = keepInPlace ? inPlaceEnd : 0;
      for (size_t i = 0; i < outcome->size(); ++i) {
        const OwnedTensor &t = (*outcome)[i];
        if (keepInPlace && inPlace[i]) {
          offsets[i] = uint64_t(static_cast<const char *>(t.data) - arena.data());
        } else {
          offsets[i] = size = alignPayload(size);
          size += bytesOf(t);
        }
      }
      return size;
    };
    auto pack = [&](char *out, bool keptInPlace) {
      for (size_t i = 0; i < outcome->size(); ++i)
        if (!keptInPlace || !inPlace[i]) {
          const OwnedTensor &t = (*outcome)[i];
          transport::wire::packInto(TensorView{t.data, t.elemSize, t.sizes, t.strides},
                                    out + offsets[i]);
        }
    };
    // Into the arena the executor lent, with no fresh pages and no new descriptor, when it holds
    // them; else inline or in a buffer of its own, the arena's results copied there too.
    uint64_t size = layOut(anyInPlace);
    bool intoArena =
        resultArena && (anyInPlace || size > kInlineBytes) && size <= resultArena->size();
    if (!intoArena && anyInPlace)
      size = layOut(false);
    MessageWriter done(MessageKind::Done);
    done.u64(outcome->size());
    for (size_t i = 0; i < outcome->size(); ++i) {
      const OwnedTensor &t = (*outcome)[i];
      done.i64(t.elemSize).u64(t.sizes.size());
      for (int64_t s : t.sizes)
        done.i64(s);
      done.u64(offsets[i]);
    }
    done.u64(size);
    if (intoArena) {
      pack(resultArena->data(), anyInPlace);
      done.u64(2);
      return answer(done);
    }
    return reply(done, size, [&](char *out) { pack(out, false); });
  }

  llvm::Error call(MessageReader &in, Message &request) {
    std::string symbol = in.str().str();
    uint64_t outputSize = in.u64();
    uint64_t inputSize = in.u64();
    if (!in.ok())
      return llvm::createStringError("malformed call request");
    SharedBuffer shared;
    llvm::Expected<llvm::StringRef> input = payload(in, request, inputSize, shared);
    if (!input)
      return input.takeError();
    llvm::Expected<std::string> output = host->call(symbol, *input, outputSize);
    if (!output)
      return classifyHostError(output.takeError(), "unknown_symbol", "call_failed",
                               "calling '" + symbol + "'");
    MessageWriter done(MessageKind::Done);
    done.u64(output->size());
    return reply(done, output->size(),
                 [&](char *out) { std::memcpy(out, output->data(), output->size()); });
  }

  /// The session's arena `id`, mapped once and kept: its pages then need no faulting in on
  /// later launches. The descriptor that comes with each use is dropped when already mapped.
  llvm::Expected<SharedBuffer *> arenaFor(uint64_t id, Message &request, size_t &nextFd,
                                          uint64_t atLeast, llvm::ArrayRef<uint64_t> inUse) {
    if (nextFd >= request.fds.size())
      return llvm::createStringError("a launch names an arena it did not send");
    UniqueFd fd = std::move(request.fds[nextFd++]);
    auto found = arenas.find(id);
    if (found == arenas.end()) {
      // Arenas an executor no longer uses are dropped by id; a cap bounds the rest.
      for (auto it = arenas.begin(); arenas.size() >= kMappedArenas && it != arenas.end();)
        it = llvm::is_contained(inUse, it->first) ? std::next(it) : arenas.erase(it);
      llvm::Expected<SharedBuffer> mapped = SharedBuffer::mapAll(std::move(fd));
      if (!mapped)
        return mapped.takeError();
      found = arenas
                  .emplace(std::piecewise_construct, std::forward_as_tuple(id),
                           std::forward_as_tuple(std::move(*mapped)))
                  .first;
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

  WorkerChannel channel;
  std::unique_ptr<ObjectHost> host;
  static constexpr size_t kMappedArenas = 8;
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
      ObjectHost::create(*plugins, transport::ObjectHostOptions{options->allowUnsigned});
  if (!host)
    return fail("creating the object host: " + llvm::toString(host.takeError()));
  if (llvm::Error error = installCrashReporter(kWorkerChannelFd))
    return fail(llvm::toString(std::move(error)));
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
