// Isolated modules, the server's side: a module version compiled, linked and run in a worker
// process of its own (jit/ModuleProtocol.h), with tensors in shared memory, deadlines that end
// the worker, and a fresh worker for the next call after one dies.
#include "jit/Internal.h"
#include "jit/ModuleProtocol.h"

#include "executor/WorkerPool.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unistd.h>

#ifndef COURIER_INSTALL_BINDIR
#define COURIER_INSTALL_BINDIR "/usr/local/bin"
#endif

namespace courier {

using executor::Clock;
using executor::EndReason;
using executor::Message;
using executor::MessageKind;
using executor::SharedBuffer;
using executor::WorkerPool;
using executor::WorkerProcess;
using moduleproto::MessageReader;
using moduleproto::MessageWriter;

namespace {

/// How long an unloading worker may take for teardown() and closing its sessions.
constexpr auto kUnloadTimeout = std::chrono::seconds(5);
/// Stands for "no deadline": far enough away never to pass, near enough not to overflow.
constexpr auto kNoDeadline = std::chrono::hours(24 * 365);
/// Compile answers (entries, diagnostics) larger than this are refused.
constexpr uint64_t kMaxAnswerBytes = uint64_t(64) << 20;
/// The most result bytes a call of a worker without a memory limit may claim.
constexpr uint64_t kUnlimitedResults = uint64_t(64) << 30;

std::string workerProgram(const std::string &configured) {
  if (!configured.empty())
    return configured;
  if (std::optional<std::string> env = llvm::sys::Process::GetEnv("COURIER_MODULE_WORKER");
      env && !env->empty())
    return *env;
  // Beside the program: the build tree, or an install that keeps its tools together.
  std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  if (!self.empty()) {
    llvm::SmallString<256> beside(llvm::sys::path::parent_path(self));
    llvm::sys::path::append(beside, "courier-module-worker");
    if (llvm::sys::fs::can_execute(beside))
      return std::string(beside);
  }
  return COURIER_INSTALL_BINDIR "/courier-module-worker";
}

Clock::time_point deadlineAfter(std::optional<std::chrono::milliseconds> timeout) {
  if (!timeout || timeout->count() <= 0)
    return Clock::now() + kNoDeadline;
  return Clock::now() + *timeout;
}

std::string describeTimeout(std::optional<std::chrono::milliseconds> timeout) {
  return timeout ? std::to_string(timeout->count()) + " ms" : "its deadline";
}

} // namespace

llvm::Error unloadedError(llvm::StringRef name, llvm::StringRef entry) {
  return engineError(ErrorCode::UnknownModule,
                     "module '" + name.str() + "' was unloaded; '" + entry.str() + "' did not run");
}

/// One worker of an isolated module version (started again after it dies), its arenas and
/// what it knows of the worker's life. Requests are serialized: a worker runs one at a time.
class WorkerLane {
public:
  WorkerLane(std::shared_ptr<WorkerPool> pool, EngineOptions options, std::string name,
             std::string sourceName, std::string text)
      : pool(std::move(pool)), options(std::move(options)), name(std::move(name)),
        sourceName(std::move(sourceName)), text(std::move(text)) {}

  ~WorkerLane() {
    std::lock_guard<std::mutex> lock(requestMutex);
    unload();
  }

  struct Loaded {
    std::vector<EntrySignature> entries;
    llvm::StringMap<std::string> unsupported;
    PhaseTimes times;
  };

  /// Starts a worker and compiles the module in it, all before `deadline` (`limit` says what
  /// it is, for messages). Called with requestMutex held, or before the module is shared.
  llvm::Expected<Loaded> load(Clock::time_point deadline, llvm::StringRef limit) {
    // The warm worker taken is replaced once the module is compiled and set up in it.
    executor::WorkerPool::RefillHold hold(*pool);
    llvm::Expected<std::unique_ptr<WorkerProcess>> taken = pool->take(deadline);
    if (!taken) {
      ErrorCode kind = ErrorCode::WorkerUnavailable;
      std::string why;
      llvm::handleAllErrors(taken.takeError(), [&](const llvm::ErrorInfoBase &e) {
        kind = transport::codeOf(e, ErrorCode::WorkerUnavailable);
        why = e.message();
      });
      if (kind == ErrorCode::DeadlineExceeded)
        return engineError(kind, "compiling module '" + name + "' took longer than " + limit.str() +
                                     ": no worker was ready in time");
      return engineError(ErrorCode::WorkerUnavailable,
                         "cannot start a worker for module '" + name + "': " + why);
    }
    if (!adopt(std::move(*taken)))
      return engineError(ErrorCode::UnknownModule, "module '" + name + "' was unloaded");
    MessageWriter request(MessageKind::Compile);
    moduleproto::writeOptions(request, options);
    request.str(name).str(sourceName);
    SharedBuffer body;
    if (llvm::Error error = executor::writeBody(request, text, body, "courier-module-body"))
      return engineError(ErrorCode::WorkerUnavailable,
                         "passing module '" + name +
                             "' to its worker: " + toString(std::move(error)));
    std::vector<int> fds;
    if (body.fd() >= 0)
      fds.push_back(body.fd());
    std::string what = "compiling";
    llvm::Expected<Message> reply = worker->request(request, fds, deadline, what);
    if (!reply) {
      // The worker says when the compile is over and setup() starts: a death after that is
      // the module's setup's.
      bool inSetup = worker && worker->phase() == moduleproto::kPhaseSetup;
      llvm::Error error =
          inSetup ? workerFailure(reply.takeError(), "running its setup()", limit,
                                  ErrorCode::SetupCrashed)
                  : workerFailure(reply.takeError(), what, limit, ErrorCode::CompileCrashed);
      drop();
      return std::move(error);
    }
    MessageReader in(reply->bytes);
    if (llvm::Error error = moduleproto::readOutcome(in)) {
      drop();
      return std::move(error);
    }
    SharedBuffer storage;
    llvm::Expected<llvm::StringRef> answer =
        executor::readBody(in, *reply, storage, kMaxAnswerBytes);
    if (!answer) {
      drop();
      return engineError(ErrorCode::Internal,
                         "the worker of module '" + name +
                             "' sent a malformed answer: " + toString(answer.takeError()));
    }
    MessageReader out(*answer);
    Loaded loaded;
    loaded.entries = moduleproto::readEntries(out);
    uint64_t unsupported = out.count(16);
    for (uint64_t i = 0; i < unsupported; ++i) {
      std::string function = out.str().str();
      loaded.unsupported[function] = out.str().str();
    }
    loaded.times = moduleproto::readTimes(out);
    if (!out.ok()) {
      drop();
      return engineError(ErrorCode::Internal,
                         "the worker of module '" + name + "' sent a malformed answer");
    }
    return std::move(loaded);
  }

  llvm::Expected<std::vector<Tensor>>
  invoke(llvm::StringRef entry, llvm::ArrayRef<TensorRef> inputs, const InvokeOptions &call) {
    std::lock_guard<std::mutex> lock(requestMutex);
    if (terminated)
      return terminatedError(entry);
    if (worker && !worker->quiet()) {
      // Died while idle (killed from outside, say): not this call's doing.
      noteDeath(worker->end().cause + " while idle", /*crashed=*/false);
      drop();
    }
    if (!worker) {
      std::optional<std::chrono::milliseconds> compileLimit;
      if (options.compileTimeout.count() > 0)
        compileLimit = options.compileTimeout;
      // A restart is a compile, bounded as one: were it bounded by the call's deadline, a
      // module whose calls are short but whose compile is not could never come back.
      llvm::Expected<Loaded> restarted =
          load(deadlineAfter(compileLimit), describeTimeout(compileLimit));
      if (!restarted)
        return llvm::handleErrors(restarted.takeError(),
                                  [&](std::unique_ptr<EngineError> e) -> llvm::Error {
                                    e->message = "restarting the worker of module '" + name +
                                                 "' for '" + entry.str() + "': " + e->message;
                                    return llvm::Error(std::move(e));
                                  });
      std::lock_guard<std::mutex> state(stateMutex);
      current.restarts++;
    }

    std::optional<std::chrono::milliseconds> timeout = call.timeout;
    if (!timeout && options.invokeTimeout.count() > 0)
      timeout = options.invokeTimeout;
    Clock::time_point deadline = deadlineAfter(timeout);
    MessageWriter request(MessageKind::Invoke);
    std::vector<int> fds;
    if (llvm::Error error = writeInvoke(request, entry, inputs, fds))
      return std::move(error);

    std::string what = "invoking '" + entry.str() + "'";
    // Leave room for the sequence number the request gains.
    if (request.view().size() + 8 > executor::kMaxMessageBytes)
      return engineError(ErrorCode::InvalidInput,
                         llvm::formatv("the inputs of '{0}' take {1} bytes to describe, more "
                                       "than a worker request holds ({2}): too many inputs or "
                                       "dimensions",
                                       entry, request.view().size(), executor::kMaxMessageBytes));
    llvm::Expected<Message> reply = worker->request(request, fds, deadline, what);
    if (!reply) {
      llvm::Error error = workerFailure(reply.takeError(), what, describeTimeout(timeout),
                                        ErrorCode::KernelCrashed);
      drop();
      return std::move(error);
    }
    // The worker maps a new arena before it answers anything else; it kept the old one if
    // it failed, so only a success says the new one is in place.
    if (!fds.empty() && MessageReader(reply->bytes).u64() == 0)
      workerHasInputs = true;
    return readResults(*reply, entry);
  }

  WorkerState state() {
    std::lock_guard<std::mutex> lock(stateMutex);
    WorkerState copy = current;
    copy.isolated = true;
    // quiet() also notices a worker that died while idle (its channel hung up).
    copy.pid = live && live->quiet() ? live->pid() : 0;
    return copy;
  }

  /// An idle worker unloads (teardown() runs, sessions close); a busy one is ended, and
  /// the call it runs fails.
  void terminate() {
    terminated = true;
    if (requestMutex.try_lock()) {
      std::lock_guard<std::mutex> lock(requestMutex, std::adopt_lock);
      unload();
      return;
    }
    std::lock_guard<std::mutex> lock(stateMutex);
    if (live)
      live->kill(EndReason::Closed);
  }

  bool isTerminated() const { return terminated; }

private:
  /// With requestMutex held: teardown() and the module's sessions close in the worker; one
  /// that does not answer in time is ended anyway.
  void unload() {
    if (worker && worker->quiet()) {
      MessageWriter request(MessageKind::Unload);
      llvm::consumeError(
          worker->request(request, {}, Clock::now() + kUnloadTimeout, "unloading").takeError());
    }
    drop();
  }

  /// Takes `next` as the worker, unless the module was terminated meanwhile.
  bool adopt(std::unique_ptr<WorkerProcess> next) {
    std::lock_guard<std::mutex> lock(stateMutex);
    if (terminated)
      return false; // `next` is ended as it goes.
    worker = std::move(next);
    live = worker.get();
    workerHasInputs = false;
    resultArena = SharedBuffer();
    return true;
  }

  /// Ends and forgets the worker (the next call starts another).
  void drop() {
    std::unique_ptr<WorkerProcess> ending;
    {
      std::lock_guard<std::mutex> lock(stateMutex);
      ending = std::move(worker);
      live = nullptr;
    }
    workerHasInputs = false;
    resultArena = SharedBuffer();
    // Killed and reaped here, outside the state lock.
    ending.reset();
  }

  void noteDeath(std::string cause, bool crashed) {
    std::lock_guard<std::mutex> lock(stateMutex);
    current.lastDeath = std::move(cause);
    if (crashed)
      current.crashes++;
  }

  llvm::Error terminatedError(llvm::StringRef entry) { return unloadedError(name, entry); }

  /// The error of a request the worker did not answer, by why it ended: the codes are the
  /// WorkerProcess's, turned into the engine's kinds and messages.
  llvm::Error workerFailure(llvm::Error cause, llvm::StringRef what, llvm::StringRef limit,
                            ErrorCode crashCode) {
    ErrorCode kind = ErrorCode::WorkerUnavailable;
    std::string said;
    llvm::handleAllErrors(std::move(cause), [&](const llvm::ErrorInfoBase &e) {
      kind = transport::codeOf(e, ErrorCode::WorkerUnavailable);
      said = e.message();
    });
    std::string died = worker ? worker->death().cause : "ended";
    // A compile (or setup) that fails leaves no module behind to call again.
    bool setup = crashCode == ErrorCode::SetupCrashed;
    bool compiling = crashCode == ErrorCode::CompileCrashed || setup;
    llvm::StringRef next = compiling ? "" : "; the module's next call starts a fresh worker";
    switch (kind) {
    case ErrorCode::KernelCrashed:
      noteDeath(died + " while " + what.str(), /*crashed=*/true);
      return engineError(crashCode,
                         llvm::formatv("the worker of module '{0}' died while {1}: {2}{3}", name,
                                       what, died, next));
    case ErrorCode::DeadlineExceeded:
      noteDeath("ended at its deadline (" + limit.str() + ") while " + what.str(),
                /*crashed=*/false);
      if (setup)
        return engineError(ErrorCode::DeadlineExceeded,
                           llvm::formatv("the setup() of module '{0}' ran longer than {1}; its "
                                         "worker was ended",
                                         name, limit));
      return engineError(ErrorCode::DeadlineExceeded,
                         llvm::formatv("{0} module '{1}' took longer than {2}; its worker was "
                                       "ended{3}",
                                       compiling ? what.str() : what + " of", name, limit, next));
    case ErrorCode::UnknownSession:
      return engineError(ErrorCode::UnknownModule,
                         "module '" + name + "' was unloaded while " + what.str() + " ran");
    default:
      return engineError(ErrorCode::WorkerUnavailable,
                         "the worker of module '" + name + "' is unavailable: " + said);
    }
  }

  /// Writes an Invoke of `entry` on `inputs`: inline when small, else in the input arena,
  /// sent to the worker (in `fds`) when it is new.
  llvm::Error writeInvoke(MessageWriter &request, llvm::StringRef entry,
                          llvm::ArrayRef<TensorRef> inputs, std::vector<int> &fds) {
    executor::TensorBlock block;
    for (const TensorRef &t : inputs) {
      block.total = executor::alignPayload(block.total);
      block.tensors.push_back(executor::TensorPlace{
          static_cast<uint64_t>(t.dtype), {t.shape.begin(), t.shape.end()}, block.total, t.size});
      block.total += t.size;
    }
    auto copyInputs = [&](char *to) {
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].size > 0)
          std::memcpy(to + block.tensors[i].offset, inputs[i].data, inputs[i].size);
    };
    std::string inlined;
    if (block.total <= executor::kInlineBytes) {
      inlined.resize(block.total);
      copyInputs(inlined.data());
      block.inlineBytes = inlined;
    } else {
      if (inputArena.size() < block.total) {
        llvm::Expected<SharedBuffer> created = SharedBuffer::create(
            std::max<uint64_t>(block.total, inputArena.size() * 2), "courier-module-inputs");
        // Sealed: the worker keeps the descriptor, and a module that shrank the file would
        // kill this process with SIGBUS at its next write.
        llvm::Error sealed = created ? created->sealSize() : created.takeError();
        if (sealed)
          return engineError(ErrorCode::Internal, "allocating the inputs of '" + entry.str() +
                                                      "': " + toString(std::move(sealed)));
        inputArena = std::move(*created);
        workerHasInputs = false;
      }
      copyInputs(inputArena.data());
      block.bodyIn = workerHasInputs ? executor::Payload::Arena : executor::Payload::NewArena;
      block.arenaSize = inputArena.size();
      if (!workerHasInputs)
        fds.push_back(inputArena.fd());
    }
    request.str(entry);
    block.write(request);
    return llvm::Error::success();
  }

  llvm::Expected<std::vector<Tensor>> readResults(Message &reply, llvm::StringRef entry) {
    MessageReader in(reply.bytes);
    if (llvm::Error error = moduleproto::readOutcome(in))
      return std::move(error);
    auto malformed = [&](llvm::StringRef why) {
      // A worker that answers nonsense is not trusted with the next call.
      drop();
      return engineError(ErrorCode::Internal, "the worker of module '" + name +
                                                  "' sent malformed results for '" + entry.str() +
                                                  "': " + why.str());
    };
    executor::TensorBlock block = executor::TensorBlock::read(in);
    if (!in.ok())
      return malformed("a truncated answer");
    struct Result {
      DType dtype;
      const std::vector<int64_t> &shape;
      uint64_t offset, size;
    };
    std::vector<Result> results;
    for (const executor::TensorPlace &place : block.tensors) {
      std::optional<DType> dtype = dtypeFromCode(place.dtype);
      if (!dtype)
        return malformed("an unknown dtype");
      results.push_back(Result{*dtype, place.shape, place.offset, place.size});
    }
    uint64_t total = block.total;
    // What an honest worker could have produced: no more than its address space. This side
    // allocates what the answer claims, so a claim beyond it is refused before any is.
    uint64_t limit = options.workerMemoryMiB ? options.workerMemoryMiB << 20 : kUnlimitedResults;
    if (total > limit)
      return malformed("results of " + std::to_string(total) +
                       " bytes, more than the worker "
                       "could hold");
    if (!block.placesWithin(/*disjoint=*/true))
      return malformed("results that overlap or lie outside the answer");
    llvm::StringRef bytes;
    if (block.bodyIn == executor::Payload::Inline) {
      bytes = block.inlineBytes;
    } else {
      if (block.bodyIn == executor::Payload::NewArena) {
        uint64_t size = block.arenaSize;
        if (reply.fds.size() != 1)
          return malformed("a new result arena without its descriptor");
        // The worker doubles its arena as results grow: never more than twice the limit.
        if (size > 2 * limit)
          return malformed("a result arena larger than the worker could fill");
        // Sealed, or the worker could shrink it under this mapping.
        llvm::Expected<SharedBuffer> mapped =
            SharedBuffer::map(std::move(reply.fds[0]), size, /*requireSealed=*/true);
        if (!mapped)
          return malformed(toString(mapped.takeError()));
        resultArena = std::move(*mapped);
      }
      if (resultArena.size() < total)
        return malformed("results outside the result arena");
      bytes = llvm::StringRef(resultArena.data(), total);
    }
    if (bytes.size() != total)
      return malformed("a truncated answer");
    std::vector<Tensor> outputs;
    outputs.reserve(results.size());
    for (const Result &r : results) {
      std::optional<int64_t> count = checkedElementCount(r.shape, dtypeSize(r.dtype));
      if (!count || static_cast<uint64_t>(*count) * dtypeSize(r.dtype) != r.size ||
          r.offset > total || total - r.offset < r.size)
        return malformed("a result that does not match its shape");
      Tensor t{r.dtype, r.shape, TensorBytes::uninitialized(r.size)};
      if (r.size)
        std::memcpy(t.bytes.data(), bytes.data() + r.offset, r.size);
      outputs.push_back(std::move(t));
    }
    return outputs;
  }

  std::shared_ptr<WorkerPool> pool;
  const EngineOptions options;
  /// The module's name, what its diagnostics call the text (empty: the name), and the text.
  const std::string name, sourceName, text;

  /// Held for a request's whole length: the worker runs one at a time.
  std::mutex requestMutex;
  std::unique_ptr<WorkerProcess> worker;
  SharedBuffer inputArena, resultArena;
  bool workerHasInputs = false;

  /// Guards what other threads read or do while a request runs.
  std::mutex stateMutex;
  WorkerProcess *live = nullptr;
  WorkerState current;
  std::atomic<bool> terminated{false};
};

/// An isolated module version's workers: EngineOptions::workersPerModule of them, each with
/// the module compiled and set up in it. A call runs in whichever is idle, or waits for one.
class IsolatedWorker {
public:
  using Loaded = WorkerLane::Loaded;

  IsolatedWorker(std::shared_ptr<WorkerPool> pool, EngineOptions options, std::string name,
                 std::string sourceName, std::string text)
      : pool(std::move(pool)), options(std::move(options)), name(std::move(name)),
        sourceName(std::move(sourceName)), text(std::move(text)) {}

  /// Compiles and sets up the module in each worker, one after the other, all before
  /// `deadline`; what the first compile found. Called before the module is shared.
  llvm::Expected<Loaded> load(Clock::time_point deadline, llvm::StringRef limit) {
    unsigned count = std::clamp(options.workersPerModule, 1u, EngineOptions::kMaxWorkersPerModule);
    std::optional<Loaded> first;
    for (unsigned i = 0; i < count; ++i) {
      auto lane = std::make_unique<WorkerLane>(pool, options, name, sourceName, text);
      llvm::Expected<Loaded> loaded = lane->load(deadline, limit);
      if (!loaded)
        return loaded.takeError();
      if (!first)
        first = std::move(*loaded);
      lanes.push_back(std::move(lane));
      busy.push_back(false);
    }
    return std::move(*first);
  }

  llvm::Expected<std::vector<Tensor>>
  invoke(llvm::StringRef entry, llvm::ArrayRef<TensorRef> inputs, const InvokeOptions &call) {
    size_t chosen = 0;
    auto arrived = Clock::now();
    {
      std::unique_lock<std::mutex> lock(mutex);
      auto idle = [&] { return std::find(busy.begin(), busy.end(), false); };
      freed.wait(lock, [&] { return terminated || idle() != busy.end(); });
      if (terminated)
        return unloadedError(name, entry);
      chosen = idle() - busy.begin();
      busy[chosen] = true;
    }
    if (call.queued)
      *call.queued = Clock::now() - arrived;
    llvm::Expected<std::vector<Tensor>> results = lanes[chosen]->invoke(entry, inputs, call);
    {
      std::lock_guard<std::mutex> lock(mutex);
      busy[chosen] = false;
    }
    freed.notify_one();
    return results;
  }

  WorkerState state() {
    WorkerState all;
    all.isolated = true;
    for (const std::unique_ptr<WorkerLane> &lane : lanes) {
      WorkerState one = lane->state();
      if (!all.pid)
        all.pid = one.pid;
      all.restarts += one.restarts;
      all.crashes += one.crashes;
      if (!one.lastDeath.empty())
        all.lastDeath = one.lastDeath;
    }
    return all;
  }

  void terminate() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      terminated = true;
    }
    freed.notify_all();
    for (const std::unique_ptr<WorkerLane> &lane : lanes)
      lane->terminate();
  }

  bool isTerminated() const { return terminated; }

private:
  std::shared_ptr<WorkerPool> pool;
  const EngineOptions options;
  const std::string name, sourceName, text;
  /// Filled by load(), before the module is shared; then only `busy` changes.
  std::vector<std::unique_ptr<WorkerLane>> lanes;
  std::mutex mutex; ///< Guards `busy` and `terminated`'s changes.
  std::condition_variable freed;
  std::vector<bool> busy;
  std::atomic<bool> terminated{false};
};

namespace {
/// A module's code in its workers.
class IsolatedCode final : public ModuleCode {
public:
  explicit IsolatedCode(std::unique_ptr<IsolatedWorker> worker) : worker(std::move(worker)) {}

  llvm::Expected<std::vector<Tensor>> invoke(const Module::Impl &, llvm::StringRef entry,
                                             llvm::ArrayRef<TensorRef> inputs,
                                             const InvokeOptions &options) const override {
    llvm::Expected<std::vector<Tensor>> results = worker->invoke(entry, inputs, options);
    if (!results || options.outputs.empty())
      return results;
    if (llvm::Error error = writeIntoOutputs(entry, *results, options.outputs))
      return std::move(error);
    return results;
  }
  WorkerState workerState() const override { return worker->state(); }
  void terminate() const override { worker->terminate(); }
  bool terminated() const override { return worker->isTerminated(); }

private:
  std::unique_ptr<IsolatedWorker> worker;
};
} // namespace

WorkerLauncher::WorkerLauncher(const EngineOptions &options) {
  executor::WorkerSettings settings;
  settings.program = workerProgram(options.workerProgram);
  settings.memoryMiB = options.workerMemoryMiB;
  settings.sandbox = options.workerSandbox;
  settings.kernelThreads = options.kernelThreads;
  settings.kernelTally = true;
  // Engines whose workers start alike share one pool: a server with an engine per option
  // set (courier-serve) keeps one warm worker, not one per set a client ever named. What
  // differs between the engines travels in each Compile request.
  static std::mutex poolsMutex;
  static std::map<std::tuple<std::string, uint64_t, bool, unsigned>, std::weak_ptr<WorkerPool>>
      pools;
  std::lock_guard<std::mutex> lock(poolsMutex);
  std::weak_ptr<WorkerPool> &shared =
      pools[{settings.program, settings.memoryMiB, settings.sandbox, settings.kernelThreads}];
  pool = shared.lock();
  if (!pool) {
    pool = std::make_shared<WorkerPool>(std::move(settings), options.warmWorkers);
    shared = pool;
  }
}

WorkerLauncher::~WorkerLauncher() = default;

llvm::Expected<std::shared_ptr<Module>>
WorkerLauncher::compile(const EngineOptions &options, llvm::StringRef text, llvm::StringRef name,
                        llvm::StringRef sourceName,
                        std::optional<std::chrono::milliseconds> timeout) {
  auto isolated =
      std::make_unique<IsolatedWorker>(pool, options, name.str(), sourceName.str(), text.str());
  llvm::Expected<IsolatedWorker::Loaded> loaded =
      isolated->load(deadlineAfter(timeout), describeTimeout(timeout));
  if (!loaded) {
    // The sink sees the diagnostics the worker collected, as an in-process compile's would.
    if (!options.diagnosticSink)
      return loaded.takeError();
    return llvm::handleErrors(loaded.takeError(),
                              [&](std::unique_ptr<CompileError> error) -> llvm::Error {
                                for (const Diagnostic &d : error->diagnostics)
                                  options.diagnosticSink(d);
                                return llvm::Error(std::move(error));
                              });
  }
  auto impl = std::make_unique<Module::Impl>();
  impl->name = name.str();
  impl->entries = std::move(loaded->entries);
  impl->unsupported = std::move(loaded->unsupported);
  impl->times = loaded->times;
  impl->code = std::make_unique<IsolatedCode>(std::move(isolated));
  return ModuleInternals::make(std::move(impl));
}

} // namespace courier
