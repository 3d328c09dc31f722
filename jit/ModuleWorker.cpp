// The module worker: compiles one module version in-process, confined, and serves its calls
// with tensors in shared memory; and the message bodies it shares with the server side
// (jit/IsolatedModule.cpp).
#include "jit/ModuleWorker.h"

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

namespace moduleproto {

namespace {

uint64_t bitsOf(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

double doubleOf(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void writeSpecs(MessageWriter &out, const std::vector<TensorSpec> &specs) {
  out.u64(specs.size());
  for (const TensorSpec &spec : specs) {
    out.u64(static_cast<uint64_t>(spec.dtype)).u64(spec.isScalar ? 1 : 0).u64(spec.shape.size());
    for (int64_t d : spec.shape)
      out.i64(d);
  }
}

std::vector<TensorSpec> readSpecs(MessageReader &in) {
  std::vector<TensorSpec> specs(in.count(24));
  for (TensorSpec &spec : specs) {
    std::optional<DType> dtype = dtypeFromCode(in.u64());
    spec.dtype = dtype.value_or(DType::F32);
    spec.isScalar = in.u64() != 0;
    spec.shape.resize(in.count(8));
    for (int64_t &d : spec.shape)
      d = in.i64();
    if (!dtype)
      in.count(~uint64_t(0)); // Fails the reader: a dtype this build does not know.
  }
  return specs;
}

} // namespace

void writeOptions(MessageWriter &out, const EngineOptions &options) {
  // Resolved here: a worker starts without the server's environment (HOME, XDG_CACHE_HOME).
  out.u64(options.optLevel)
      .str(options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir)
      .u64(options.diskCache ? 1 : 0);
  out.str(options.executorOverride);
  out.u64(static_cast<uint64_t>(options.connectTimeout.count()));
  out.u64(static_cast<uint64_t>(options.requestTimeout.count()));
  out.str(options.authToken).u64(options.plugins.size());
  for (const std::string &plugin : options.plugins)
    out.str(plugin);
  out.str(options.extraPipeline).u64(options.printIRAfterAll ? 1 : 0);
  out.u64(options.maxConstantBytes).u64(options.maxObjectBytes).u64(options.cacheMaxBytes);
  out.str(options.tls.caFile).str(options.tls.certFile).str(options.tls.keyFile);
  out.u64(options.jobs).u64(static_cast<uint64_t>(options.sharedMemory));
}

EngineOptions readOptions(MessageReader &in) {
  EngineOptions options;
  options.optLevel = static_cast<unsigned>(std::min<uint64_t>(in.u64(), 3));
  options.cacheDir = in.str().str();
  options.diskCache = in.u64() != 0;
  options.executorOverride = in.str().str();
  options.connectTimeout = std::chrono::milliseconds(in.u64());
  options.requestTimeout = std::chrono::milliseconds(in.u64());
  options.authToken = in.str().str();
  options.plugins.resize(in.count(8));
  for (std::string &plugin : options.plugins)
    plugin = in.str().str();
  options.extraPipeline = in.str().str();
  options.printIRAfterAll = in.u64() != 0;
  options.maxConstantBytes = in.u64();
  options.maxObjectBytes = in.u64();
  options.cacheMaxBytes = in.u64();
  options.tls.caFile = in.str().str();
  options.tls.certFile = in.str().str();
  options.tls.keyFile = in.str().str();
  options.jobs = static_cast<unsigned>(std::min<uint64_t>(in.u64(), EngineOptions::kMaxJobs));
  uint64_t sharedMemory = in.u64();
  options.sharedMemory = sharedMemory <= static_cast<uint64_t>(transport::SharedMemory::Off)
                             ? static_cast<transport::SharedMemory>(sharedMemory)
                             : transport::SharedMemory::Off;
  return options;
}

void writeEntries(MessageWriter &out, const std::vector<EntrySignature> &entries) {
  out.u64(entries.size());
  for (const EntrySignature &entry : entries) {
    out.str(entry.name);
    writeSpecs(out, entry.inputs);
    writeSpecs(out, entry.outputs);
    for (const std::vector<std::string> *names : {&entry.inputNames, &entry.outputNames}) {
      out.u64(names->size());
      for (const std::string &name : *names)
        out.str(name);
    }
  }
}

std::vector<EntrySignature> readEntries(MessageReader &in) {
  std::vector<EntrySignature> entries(in.count(24));
  for (EntrySignature &entry : entries) {
    entry.name = in.str().str();
    entry.inputs = readSpecs(in);
    entry.outputs = readSpecs(in);
    for (std::vector<std::string> *names : {&entry.inputNames, &entry.outputNames}) {
      names->resize(in.count(8));
      for (std::string &name : *names)
        name = in.str().str();
    }
  }
  return entries;
}

void writeTimes(MessageWriter &out, const PhaseTimes &t) {
  for (double ms : {t.parse, t.passes, t.crossCompile, t.link, t.ship, t.run})
    out.u64(bitsOf(ms));
  out.u64(t.cacheHit ? 1 : 0).u64(t.targetsCompiled).u64(t.targetsReused);
  out.u64(t.hostReused ? 1 : 0);
}

PhaseTimes readTimes(MessageReader &in) {
  PhaseTimes t;
  for (double *ms : {&t.parse, &t.passes, &t.crossCompile, &t.link, &t.ship, &t.run})
    *ms = doubleOf(in.u64());
  t.cacheHit = in.u64() != 0;
  t.targetsCompiled = static_cast<unsigned>(in.u64());
  t.targetsReused = static_cast<unsigned>(in.u64());
  t.hostReused = in.u64() != 0;
  return t;
}

void writeOutcome(MessageWriter &out, llvm::Error error) {
  if (!error) {
    out.u64(0);
    return;
  }
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) {
        out.u64(1).str(e.summary).u64(e.diagnostics.size());
        for (const Diagnostic &d : e.diagnostics)
          out.str(d.file)
              .u64(d.line)
              .u64(d.column)
              .str(d.severity)
              .str(d.message)
              .u64(d.sourceLine ? 1 : 0)
              .str(d.sourceLine.value_or(""));
      },
      [&](const transport::CodedError &e) {
        out.u64(2).str(e.code).str(e.message).str(e.cause ? transport::errorCodeName(*e.cause)
                                                          : "");
      },
      [&](const llvm::ErrorInfoBase &e) { out.u64(3).str(e.message()); });
}

llvm::Error readOutcome(MessageReader &in) {
  uint64_t status = in.u64();
  switch (status) {
  case 0:
    return in.ok() ? llvm::Error::success()
                   : llvm::createStringError("the module worker sent a malformed answer");
  case 1: {
    std::string summary = in.str().str();
    std::vector<Diagnostic> diagnostics(in.count(56));
    for (Diagnostic &d : diagnostics) {
      d.file = in.str().str();
      d.line = static_cast<unsigned>(in.u64());
      d.column = static_cast<unsigned>(in.u64());
      d.severity = in.str().str();
      d.message = in.str().str();
      bool hasSourceLine = in.u64() != 0;
      std::string sourceLine = in.str().str();
      if (hasSourceLine)
        d.sourceLine = std::move(sourceLine);
    }
    if (!in.ok())
      break;
    return llvm::make_error<CompileError>(std::move(summary), std::move(diagnostics));
  }
  case 2: {
    llvm::StringRef code = in.str();
    std::string message = in.str().str();
    llvm::StringRef cause = in.str();
    std::optional<ErrorCode> known = transport::parseErrorCode(code);
    std::optional<ErrorCode> knownCause = transport::parseErrorCode(cause);
    if (!in.ok() || !known || (!cause.empty() && !knownCause))
      break;
    return engineError(*known, std::move(message), knownCause);
  }
  case 3: {
    std::string message = in.str().str();
    if (!in.ok())
      break;
    return llvm::createStringError(message);
  }
  default:
    break;
  }
  return llvm::createStringError("the module worker sent a malformed answer");
}

llvm::Error writeBody(MessageWriter &out, llvm::StringRef body, SharedBuffer &fd) {
  if (body.size() <= executor::kInlineBytes) {
    out.u64(1).str(body);
    return llvm::Error::success();
  }
  llvm::Expected<SharedBuffer> shared = SharedBuffer::create(body.size(), "courier-module-body");
  if (!shared)
    return shared.takeError();
  std::memcpy(shared->data(), body.data(), body.size());
  if (llvm::Error error = shared->sealSize())
    return error;
  out.u64(0).u64(body.size());
  fd = std::move(*shared);
  return llvm::Error::success();
}

llvm::Expected<llvm::StringRef> readBody(MessageReader &in, Message &message, SharedBuffer &storage,
                                         uint64_t limit) {
  if (in.u64() != 0) {
    llvm::StringRef body = in.str();
    if (!in.ok())
      return llvm::createStringError("a malformed message body");
    return body;
  }
  uint64_t size = in.u64();
  if (!in.ok() || message.fds.size() != 1)
    return llvm::createStringError("a message body without its shared buffer");
  if (size > limit)
    return llvm::createStringError("a message body of " + llvm::Twine(size) +
                                   " bytes, more than the limit of " + llvm::Twine(limit));
  llvm::Expected<SharedBuffer> mapped =
      SharedBuffer::map(std::move(message.fds[0]), size, /*requireSealed=*/true);
  if (!mapped)
    return mapped.takeError();
  storage = std::move(*mapped);
  return llvm::StringRef(storage.data(), size);
}

} // namespace moduleproto

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
    "  started by the engine with its channel on descriptor 3; see jit/ModuleWorker.h\n";

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
        done.u64(0);
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
      holdTlsFiles(options.tls);
    std::string name = in.str().str();
    CompileOptions compileOptions;
    compileOptions.sourceName = in.str().str();
    SharedBuffer storage;
    llvm::Expected<llvm::StringRef> text = moduleproto::readBody(in, request, storage, ~0ULL);
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
    done.u64(0);
    SharedBuffer shared;
    // The body is a message of its own, read with a MessageReader.
    if (llvm::Error error = moduleproto::writeBody(done, body.view(), shared))
      return answerError(std::move(error));
    if (shared.fd() >= 0)
      return answer(done, {shared.fd()});
    return answer(done);
  }

  llvm::Error invoke(MessageReader &in, Message &request) {
    if (!module)
      return answerError(llvm::createStringError("this worker holds no module"));
    std::string entry = in.str().str();
    struct Input {
      uint64_t dtype;
      std::vector<int64_t> shape;
      uint64_t offset, size;
    };
    std::vector<Input> inputs(in.count(32));
    for (Input &input : inputs) {
      input.dtype = in.u64();
      input.shape.resize(in.count(8));
      for (int64_t &d : input.shape)
        d = in.i64();
      input.offset = in.u64();
      input.size = in.u64();
    }
    uint64_t total = in.u64();
    uint64_t mode = in.u64();
    const uint8_t *base = nullptr;
    // Inline bytes are copied to an aligned buffer: compiled code may assume alignment.
    executor::AlignedBytes aligned;
    size_t nextFd = 0;
    if (mode == 1) {
      llvm::StringRef bytes = in.str();
      if (!in.ok() || bytes.size() != total)
        return answerError(llvm::createStringError("a malformed invoke request"));
      llvm::Expected<executor::AlignedBytes> copied = executor::copyAligned(bytes);
      if (!copied)
        return answerError(copied.takeError());
      aligned = std::move(*copied);
      base = reinterpret_cast<const uint8_t *>(aligned.get());
    } else if (mode == 2) {
      // The server's input arena: sent once, kept mapped until it sends a larger one.
      bool fresh = in.u64() != 0;
      if (fresh) {
        if (request.fds.size() <= nextFd)
          return answerError(llvm::createStringError("an invoke without its input arena"));
        llvm::Expected<SharedBuffer> mapped =
            SharedBuffer::mapAll(std::move(request.fds[nextFd++]));
        if (!mapped)
          return answerError(mapped.takeError());
        inputArena = std::move(*mapped);
      }
      if (inputArena.size() < total)
        return answerError(llvm::createStringError("the input arena is smaller than the inputs"));
      base = reinterpret_cast<const uint8_t *>(inputArena.data());
    } else {
      return answerError(llvm::createStringError("a malformed invoke request"));
    }
    if (!in.ok())
      return answerError(llvm::createStringError("a malformed invoke request"));
    std::vector<TensorRef> refs;
    refs.reserve(inputs.size());
    for (const Input &input : inputs) {
      std::optional<DType> dtype = dtypeFromCode(input.dtype);
      if (!dtype || input.offset > total || total - input.offset < input.size)
        return answerError(llvm::createStringError("an invoke input lies outside its buffer"));
      refs.push_back(TensorRef::of(*dtype, input.shape, base ? base + input.offset : nullptr,
                                   static_cast<size_t>(input.size)));
    }

    MessageWriter done(MessageKind::Done);
    llvm::Error packed = llvm::Error::success();
    bool sendArena = false;
    llvm::Error failure = invokeInProcess(
        ModuleInternals::impl(*module), entry, refs, [&](llvm::ArrayRef<ResultRef> results) {
          done.u64(0).u64(results.size());
          uint64_t size = 0;
          std::vector<uint64_t> offsets;
          for (const ResultRef &r : results) {
            done.u64(static_cast<uint64_t>(r.dtype)).u64(r.shape.size());
            for (int64_t d : r.shape)
              done.i64(d);
            size = executor::alignPayload(size);
            offsets.push_back(size);
            done.u64(size).u64(r.packedBytes());
            size += r.packedBytes();
          }
          done.u64(size);
          if (size <= executor::kInlineBytes) {
            std::string bytes(size, '\0');
            for (size_t i = 0; i < results.size(); ++i)
              results[i].pack(reinterpret_cast<uint8_t *>(bytes.data()) + offsets[i]);
            done.u64(1).str(bytes);
            return;
          }
          // The result arena is this worker's, sealed so the server can map it safely; it
          // is replaced only when a call's results outgrow it.
          if (resultArena.size() < size) {
            llvm::Expected<SharedBuffer> created = SharedBuffer::create(
                std::max<uint64_t>(size, resultArena.size() * 2), "courier-module-results");
            if (created)
              packed = created->sealSize();
            else
              packed = created.takeError();
            if (packed)
              return;
            resultArena = std::move(*created);
            sendArena = true;
          }
          for (size_t i = 0; i < results.size(); ++i)
            results[i].pack(reinterpret_cast<uint8_t *>(resultArena.data()) + offsets[i]);
          done.u64(sendArena ? 3 : 2);
          if (sendArena)
            done.u64(resultArena.size());
        });
    if (failure)
      return answerError(std::move(failure));
    if (packed)
      return answerError(std::move(packed));
    if (sendArena)
      return answer(done, {resultArena.fd()});
    return answer(done);
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

} // namespace

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

} // namespace courier
