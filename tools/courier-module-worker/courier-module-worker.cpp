// courier-module-worker: one module version's worker process, started by the engine with its
// channel on descriptor 3 (jit/ModuleProtocol.h). It compiles the module in-process, confined,
// and serves its calls with tensors in shared memory. Not meant to be run by hand.
#include "jit/ModuleProtocol.h"

#include "jit/DiskCache.h"
#include "jit/Internal.h"
#include "jit/ParseGuard.h"

#include "executor/KernelThreads.h"
#include "executor/Sandbox.h"
#include "executor/Worker.h"
#include "transport/ServerMain.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace courier {

using executor::Message;
using executor::MessageKind;
using executor::ReceiveStatus;
using executor::SharedBuffer;
using executor::UniqueFd;

namespace {

using moduleproto::MessageReader;
using moduleproto::MessageWriter;

struct Flags {
  pid_t parent = 0;
  executor::SandboxLimits limits;
  unsigned kernelThreads = 0; ///< 0: the CPUs the worker may run on.
  bool sandbox = true;
};

const char *const kUsage =
    "usage: courier-module-worker [--parent PID] [--memory-mib N] [--cpu-seconds N]\n"
    "                             [--kernel-threads N] [--no-sandbox]\n"
    "  started by the engine with its channel on descriptor 3; see jit/ModuleProtocol.h\n";

llvm::Expected<Flags> parseFlags(int argc, char **argv) {
  Flags flags;
  // Compiles read and write the cache and keep a few files open; calls open executor
  // sockets. Far more than a session worker, still bounded.
  flags.limits.openFiles = 1024;
  flags.limits.noNewProcesses = false;
  transport::ArgumentReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.arg() == "--no-sandbox") {
      flags.sandbox = false;
      continue;
    }
    llvm::StringRef name = args.name();
    if (!llvm::is_contained({"--parent", "--memory-mib", "--cpu-seconds", "--kernel-threads"},
                            name))
      return args.unknown();
    if (llvm::Error e = args.readValue())
      return std::move(e);
    uint64_t number = 0;
    if (llvm::Error e = args.number(number))
      return std::move(e);
    if (name == "--parent")
      flags.parent = static_cast<pid_t>(number);
    else if (name == "--memory-mib")
      // The compile's stack is reserved whole but touched only as deep as the text nests
      // (jit/ParseGuard.h): the reservation is not the module's to pay for.
      flags.limits.memoryBytes = (number << 20) + kCompileStackBytes;
    else if (name == "--kernel-threads")
      flags.kernelThreads = static_cast<unsigned>(std::min<uint64_t>(number, 1024));
    else
      flags.limits.cpuSeconds = number;
  }
  return flags;
}

/// Whether this worker runs as root until lockFileSystem, then as `unprivileged`.
bool leaveRootBeforeModuleCode = false;
executor::Identity unprivileged;
/// The server, this worker's parent (0 when not told).
pid_t server = 0;

/// Arms the parent-death signal on the calling thread. Linux keeps it per thread, clears it on
/// every thread when the process changes user, and sends it when the parent dies only if a
/// thread of this process still holds it: lockFileSystem, which changes user, may run on a
/// compiler thread that ends after the compile, so the thread that serves calls arms it again
/// once the compile is over. A server gone before the signal was armed is not waited for.
void armParentDeathSignal() {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || (server && ::getppid() != server))
    std::_Exit(3);
}

/// A module's code runs as nobody where the server is root (lockFileSystem), and the TLS
/// files that reach executors may be root's alone: a path of `tls` (or of its environment
/// default) becomes a memfd holding the file's bytes, read now, named by its
/// /proc/self/fd path. A file that cannot be read keeps its path, for the connection to name.
void holdTlsFiles(transport::TlsClientOptions &tls) {
  for (auto [path, variable] : {std::pair{&tls.caFile, "COURIER_TLS_CA"},
                                std::pair{&tls.certFile, "COURIER_TLS_CLIENT_CERT"},
                                std::pair{&tls.keyFile, "COURIER_TLS_CLIENT_KEY"}}) {
    if (path->empty())
      if (const char *fromEnvironment = std::getenv(variable))
        *path = fromEnvironment;
    if (path->empty())
      continue;
    auto file = llvm::MemoryBuffer::getFile(*path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
    if (!file)
      continue;
    int held = ::memfd_create("courier-tls", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (held < 0)
      continue;
    llvm::StringRef bytes = (*file)->getBuffer();
    bool written = ::write(held, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    if (!written ||
        ::fcntl(held, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
      ::close(held);
      continue;
    }
    *path = "/proc/self/fd/" + std::to_string(held);
  }
}

/// Forbids file writes from here on (executor::forbidFileWrites), becoming `unprivileged`
/// first where this worker should, or ends the worker.
void lockFileSystem();

/// What the compile in progress does before the module's own code first runs: whether it
/// locks the file system, and the sequence number of its request, for the Progress message.
bool lockBeforeModuleCode = false;
uint64_t compileSequence = 0;

/// The engine's hook before a module's code first runs: the file system is locked, then the
/// server is told the compile is over and setup() is starting, so that a death from here on
/// is the module's setup's, not the compiler's.
void beforeModuleCode(bool runsSetup) {
  if (lockBeforeModuleCode)
    lockFileSystem();
  if (!runsSetup)
    return;
  MessageWriter progress(MessageKind::Progress);
  progress.u64(moduleproto::kPhaseSetup).u64(compileSequence);
  // A server that is gone hears nothing; the compile's answer will fail the same way.
  llvm::consumeError(executor::sendMessage(executor::kWorkerChannelFd, progress.view()));
}

class ModuleWorker {
public:
  ModuleWorker(int channel, bool sandboxed) : channel(channel), sandboxed(sandboxed) {}

  int serve() {
    Message request;
    while (true) {
      llvm::Expected<ReceiveStatus> status = executor::receiveMessage(channel, request);
      if (!status || *status != ReceiveStatus::Message) {
        llvm::consumeError(status.takeError());
        return 0;
      }
      std::optional<uint64_t> number = executor::takeSequence(request.bytes);
      if (!number)
        return 1;
      sequence = *number;
      MessageReader in(request.bytes);
      llvm::Error failed = llvm::Error::success();
      switch (in.kind()) {
      case MessageKind::Compile:
        failed = compile(in, request);
        break;
      case MessageKind::Invoke:
        failed = invoke(in, request);
        break;
      case MessageKind::KernelTally:
        failed = shareKernelTally(request);
        break;
      case MessageKind::Unload: {
        // teardown() runs and the module's sessions close before the answer.
        module.reset();
        MessageWriter done(MessageKind::Done);
        moduleproto::writeOutcome(done, llvm::Error::success());
        failed = answer(done);
        break;
      }
      default:
        failed = answerError(llvm::createStringError("an unknown request"));
        break;
      }
      if (failed) {
        // Only the channel can fail an answer: nobody is listening any more.
        llvm::consumeError(std::move(failed));
        return 1;
      }
    }
  }

private:
  llvm::Error answer(MessageWriter &message, llvm::ArrayRef<int> fds = {}) {
    message.u64(sequence);
    return executor::sendMessage(channel, message.view(), fds);
  }

  llvm::Error answerError(llvm::Error error) {
    MessageWriter done(MessageKind::Done);
    moduleproto::writeOutcome(done, std::move(error));
    return answer(done);
  }

  llvm::Error compile(MessageReader &in, Message &request) {
    if (module)
      return answerError(llvm::createStringError("this worker already holds a module"));
    EngineOptions options = moduleproto::readOptions(in);
    if (leaveRootBeforeModuleCode)
      holdTlsFiles(options.executors.tls);
    std::string name = in.str().str();
    CompileOptions compileOptions;
    compileOptions.sourceName = in.str().str();
    SharedBuffer storage;
    llvm::Expected<llvm::StringRef> text = executor::readBody(in, request, storage, ~0ULL);
    if (!text)
      return answerError(text.takeError());
    if (!in.ok())
      return answerError(llvm::createStringError("a malformed compile request"));
    engine = std::make_unique<Engine>(std::move(options));
    // Once the compile has written the cache, the module's code may write no file: it
    // cannot plant another module's objects there, replace a program the server starts, nor
    // write anything anywhere else. The lock holds in every thread before setup() runs.
    lockBeforeModuleCode = sandboxed;
    compileSequence = sequence;
    setBeforeModuleCode(beforeModuleCode);
    llvm::Expected<std::shared_ptr<Module>> compiled = engine->compile(*text, name, compileOptions);
    if (leaveRootBeforeModuleCode)
      armParentDeathSignal(); // The user may have changed on a compiler thread.
    if (!compiled)
      return answerError(compiled.takeError());
    // A module without host code to run (no setup) locks here, before its first call.
    if (sandboxed)
      lockFileSystem();
    module = std::move(*compiled);
    const Module::Impl &impl = ModuleInternals::impl(*module);
    MessageWriter body(MessageKind::Done);
    moduleproto::writeEntries(body, impl.entries);
    body.u64(impl.unsupported.size());
    for (const auto &item : impl.unsupported)
      body.str(item.getKey()).str(item.getValue());
    moduleproto::writeTimes(body, impl.times);
    MessageWriter done(MessageKind::Done);
    moduleproto::writeOutcome(done, llvm::Error::success());
    SharedBuffer shared;
    // The body is a message of its own, read with a MessageReader.
    if (llvm::Error error = executor::writeBody(done, body.view(), shared, "courier-module-body"))
      return answerError(std::move(error));
    if (shared.fd() >= 0)
      return answer(done, {shared.fd()});
    return answer(done);
  }

  llvm::Error invoke(MessageReader &in, Message &request) {
    if (!module)
      return answerError(llvm::createStringError("this worker holds no module"));
    std::string entry = in.str().str();
    executor::TensorBlock block = executor::TensorBlock::read(in);
    if (!in.ok())
      return answerError(llvm::createStringError("a malformed invoke request"));
    if (!block.placesWithin(/*disjoint=*/false))
      return answerError(llvm::createStringError("an invoke input lies outside its buffer"));
    // Inline bytes are copied to an aligned buffer: compiled code may assume alignment.
    executor::AlignedBytes aligned;
    llvm::Expected<const uint8_t *> base = inputBody(block, request, aligned);
    if (!base)
      return answerError(base.takeError());
    std::vector<TensorRef> refs;
    refs.reserve(block.tensors.size());
    for (const executor::TensorPlace &input : block.tensors) {
      std::optional<DType> dtype = dtypeFromCode(input.dtype);
      if (!dtype)
        return answerError(llvm::createStringError("an invoke input of an unknown dtype"));
      refs.push_back(TensorRef::of(*dtype, input.shape, *base ? *base + input.offset : nullptr,
                                   static_cast<size_t>(input.size)));
    }

    MessageWriter done(MessageKind::Done);
    llvm::Error packed = llvm::Error::success();
    bool sendArena = false;
    llvm::Error failure = invokeInProcess(ModuleInternals::impl(*module), entry, refs,
                                          [&](llvm::ArrayRef<ResultRef> results) {
                                            moduleproto::writeOutcome(done, llvm::Error::success());
                                            packed = packResults(results, done, sendArena);
                                          });
    if (failure)
      return answerError(std::move(failure));
    if (packed)
      return answerError(std::move(packed));
    if (sendArena)
      return answer(done, {resultArena.fd()});
    return answer(done);
  }

  /// Where an invoke's inputs lie: inline (copied to `aligned`), or in the server's input arena,
  /// sent once (NewArena) and kept mapped until it sends a larger one. Sealed: a server that
  /// shrank it would kill this worker at its next read.
  llvm::Expected<const uint8_t *> inputBody(const executor::TensorBlock &block, Message &request,
                                            executor::AlignedBytes &aligned) {
    if (block.bodyIn == executor::Payload::Inline) {
      if (block.inlineBytes.size() != block.total)
        return llvm::createStringError("a malformed invoke request");
      llvm::Expected<executor::AlignedBytes> copied = executor::copyAligned(block.inlineBytes);
      if (!copied)
        return copied.takeError();
      aligned = std::move(*copied);
      return reinterpret_cast<const uint8_t *>(aligned.get());
    }
    if (block.bodyIn == executor::Payload::NewArena) {
      if (request.fds.size() != 1)
        return llvm::createStringError("an invoke without its input arena");
      llvm::Expected<SharedBuffer> mapped =
          SharedBuffer::map(std::move(request.fds[0]), block.arenaSize, /*requireSealed=*/true);
      if (!mapped)
        return mapped.takeError();
      inputArena = std::move(*mapped);
    }
    if (inputArena.size() < block.total)
      return llvm::createStringError("the input arena is smaller than the inputs");
    return reinterpret_cast<const uint8_t *>(inputArena.data());
  }

  /// Writes an invoke's results after its outcome: inline when small, else in this worker's
  /// result arena, sealed so the server can map it safely and replaced (`sendArena`) only when
  /// a call's results outgrow it.
  llvm::Error packResults(llvm::ArrayRef<ResultRef> results, MessageWriter &done, bool &sendArena) {
    executor::TensorBlock block;
    for (const ResultRef &r : results) {
      block.total = executor::alignPayload(block.total);
      block.tensors.push_back(executor::TensorPlace{static_cast<uint64_t>(r.dtype),
                                                    {r.shape.begin(), r.shape.end()},
                                                    block.total,
                                                    r.packedBytes()});
      block.total += r.packedBytes();
    }
    auto pack = [&](char *to) {
      for (size_t i = 0; i < results.size(); ++i)
        results[i].pack(reinterpret_cast<uint8_t *>(to) + block.tensors[i].offset);
    };
    std::string inlined;
    if (block.total <= executor::kInlineBytes) {
      inlined.resize(block.total);
      pack(inlined.data());
      block.inlineBytes = inlined;
      block.write(done);
      return llvm::Error::success();
    }
    if (resultArena.size() < block.total) {
      llvm::Expected<SharedBuffer> created = SharedBuffer::create(
          std::max<uint64_t>(block.total, resultArena.size() * 2), "courier-module-results");
      if (!created)
        return created.takeError();
      if (llvm::Error error = created->sealSize())
        return error;
      resultArena = std::move(*created);
      sendArena = true;
    }
    pack(resultArena.data());
    block.bodyIn = sendArena ? executor::Payload::NewArena : executor::Payload::Arena;
    block.arenaSize = resultArena.size();
    block.write(done);
    return llvm::Error::success();
  }

  int channel;
  bool sandboxed;
  uint64_t sequence = 0;
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Module> module;
  SharedBuffer inputArena, resultArena;
  /// The page the server reads this worker's kernel-thread tally from, mapped for good.
  SharedBuffer tallyPage;

  /// Counts the kernel-thread team's work in the page the server sent from now on.
  llvm::Error shareKernelTally(Message &request) {
    if (request.fds.size() != 1)
      return answerError(llvm::createStringError("a kernel-thread tally page without its page"));
    llvm::Expected<SharedBuffer> mapped =
        SharedBuffer::map(std::move(request.fds[0]), sizeof(executor::KernelThreadTally),
                          /*requireSealed=*/true);
    if (!mapped)
      return answerError(mapped.takeError());
    tallyPage = std::move(*mapped);
    // From zero: the warm-up's launch was this worker's own, not a module's.
    executor::publishKernelThreadTally(
        reinterpret_cast<executor::KernelThreadTally *>(tallyPage.data()), /*carryOver=*/false);
    MessageWriter done(MessageKind::Done);
    return answer(done);
  }
};

void outOfMemory() { executor::reportOutOfMemoryAndAbort(); }

void lockFileSystem() {
  static bool locked = false;
  if (locked)
    return;
  // A module must not run with its file system open when it was meant to be closed: the
  // compile fails (compile_crashed, SIGABRT) and this says why in the server's log.
  auto failed = [](llvm::Error error) {
    llvm::errs() << "courier-module-worker: " << llvm::toString(std::move(error)) << "\n";
    std::abort();
  };
  // Module code runs as nobody in every thread; changing user clears the parent-death
  // signal, so it is armed again, on this thread now and on the serving one after the
  // compile (armParentDeathSignal).
  if (leaveRootBeforeModuleCode) {
    if (llvm::Error error = executor::becomeUser(unprivileged))
      failed(std::move(error));
    armParentDeathSignal();
  }
  // Every thread: the compiler's, and any a signal handler of the module's may run on.
  if (llvm::Error error = executor::forbidFileWritesInAllThreads())
    failed(std::move(error));
  // A second lock on this thread where the kernel has Landlock.
  llvm::Expected<bool> landlocked = executor::forbidFileWrites();
  if (!landlocked)
    failed(landlocked.takeError());
  locked = true;
}

/// Compiled once before the worker says it is ready: the first compile in a process pays for
/// loading dialects, registering passes and translations, and faulting in the compiler's
/// code. A warm worker has paid it before any module arrives, as a server that compiles in
/// its own process has after its first module.
constexpr llvm::StringLiteral kWarmUp = R"(module @warm {
  func.func public @main(%x: tensor<4xf64>) -> tensor<4xf64> {
    %y = catalyst.launch_kernel @dev::@twice(%x) : (tensor<4xf64>) -> tensor<4xf64>
    return %y : tensor<4xf64>
  }
  module @dev attributes {catalyst.target = {}, catalyst.dispatch = {address = "local"}} {
    func.func public @twice(%x: tensor<4xf64>) -> tensor<4xf64> {
      %r = arith.addf %x, %x : tensor<4xf64>
      return %r : tensor<4xf64>
    }
  }
})";

void warmUp() {
  EngineOptions options;
  options.diskCache = false;
  Engine engine(options);
  llvm::Expected<std::shared_ptr<Module>> warm = engine.compile(kWarmUp, "warm-up");
  if (!warm) {
    // Not fatal: the real compile reports whatever is wrong.
    llvm::consumeError(warm.takeError());
    return;
  }
  Tensor x = Tensor::fromDoubles(DType::F64, {4}, {1, 2, 3, 4});
  llvm::consumeError((*warm)->invoke("main", x).takeError());
}

/// The worker's life: flags, privileges, crash reporter, kernel threads, warm-up, limits and
/// sandbox, then serving the server's requests until it closes the channel. Flags:
///   --parent PID      exit if that process is gone (set by the server)
///   --memory-mib N    address space compiles and calls may add (RLIMIT_AS)
///   --cpu-seconds N   RLIMIT_CPU
///   --kernel-threads N  threads of kernels' parallel loops (default: the CPUs it may run
///                     on), started before the limits and the sandbox
///   --no-sandbox      skip no-new-privs and the seccomp filter
int runModuleWorker(int argc, char **argv) {
  constexpr int channel = executor::kWorkerChannelFd;
  auto fail = [](const llvm::Twine &message) {
    llvm::errs() << "courier-module-worker: error: " << message << "\n";
    MessageWriter failed(MessageKind::Failed);
    failed.str("worker_unavailable").str(message.str());
    llvm::consumeError(executor::sendMessage(channel, failed.view()));
    return 2;
  };
  llvm::Expected<Flags> flags = parseFlags(argc, argv);
  if (!flags)
    return fail(llvm::toString(flags.takeError()));
  // First, while this is the only thread: the compiler's threads, started later, hold none.
  // A sandboxed worker of a root server compiles as root, into the server's cache, and keeps
  // only what it needs to become nobody before any module code runs (lockFileSystem).
  leaveRootBeforeModuleCode = flags->sandbox && ::geteuid() == 0;
  if (leaveRootBeforeModuleCode) {
    unprivileged = executor::unprivilegedIdentity();
    if (llvm::Error error = executor::dropCapabilitiesButIdentity())
      return fail(llvm::toString(std::move(error)));
  } else if (llvm::Error error = executor::dropCapabilities()) {
    return fail(llvm::toString(std::move(error)));
  }
  server = flags->parent;
  armParentDeathSignal(); // Ends the worker when the server is already gone.
  // Nothing but the standard streams and the channel: the server's sockets must not reach a
  // module's code.
  ::close_range(channel + 1, ~0U, 0);
  if (llvm::Error error = executor::installCrashReporter(channel))
    return fail(llvm::toString(std::move(error)));
  std::set_new_handler(outOfMemory);
  // Kernels' threads, as a session worker starts them (executor/Worker.cpp): from the thread
  // that serves calls, before the limits and the filter, their stacks mapped before RLIMIT_AS.
  executor::setKernelThreads(flags->kernelThreads);
  if (llvm::Error error = executor::startKernelThreads())
    return fail("starting kernel threads: " + llvm::toString(std::move(error)));
  warmUp();
  if (llvm::Error error = executor::applyLimits(flags->limits))
    return fail(llvm::toString(std::move(error)));
  if (flags->sandbox)
    if (llvm::Error error = executor::enterModuleSandbox(leaveRootBeforeModuleCode))
      return fail("cannot enter the sandbox: " + llvm::toString(std::move(error)));
  if (llvm::Error error = executor::sendReady(channel, flags->sandbox)) {
    llvm::consumeError(std::move(error));
    return 1;
  }
  return ModuleWorker(channel, flags->sandbox).serve();
}

} // namespace

} // namespace courier

int main(int argc, char **argv) {
  // What kernels print (vector.print, printMemrefF32) reaches the log a line at a time, not
  // when a buffer fills or the worker ends.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return courier::runModuleWorker(argc, argv);
}
