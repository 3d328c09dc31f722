// The messages of isolated modules that a server (jit/IsolatedModule.cpp) and a module's worker
// (tools/courier-module-worker) both read and write: options, entries, phase times, outcomes
// and bodies.
#include "jit/ModuleProtocol.h"

#include "jit/DiskCache.h"
#include "jit/Internal.h"

#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

namespace courier {

using executor::Message;
using executor::SharedBuffer;

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
  out.u64(static_cast<uint64_t>(options.executors.connectTimeout.count()));
  out.u64(static_cast<uint64_t>(options.executors.requestTimeout.count()));
  out.str(options.executors.bearerToken).u64(options.executors.plugins.size());
  for (const std::string &plugin : options.executors.plugins)
    out.str(plugin);
  out.str(options.extraPipeline).u64(options.printIRAfterAll ? 1 : 0);
  out.u64(options.maxConstantBytes).u64(options.maxObjectBytes).u64(options.cacheMaxBytes);
  out.str(options.executors.tls.caFile)
      .str(options.executors.tls.certFile)
      .str(options.executors.tls.keyFile);
  out.u64(options.jobs).u64(static_cast<uint64_t>(options.executors.sharedMemory));
}

EngineOptions readOptions(MessageReader &in) {
  EngineOptions options;
  options.optLevel = static_cast<unsigned>(std::min<uint64_t>(in.u64(), 3));
  options.cacheDir = in.str().str();
  options.diskCache = in.u64() != 0;
  options.executorOverride = in.str().str();
  options.executors.connectTimeout = std::chrono::milliseconds(in.u64());
  options.executors.requestTimeout = std::chrono::milliseconds(in.u64());
  options.executors.bearerToken = in.str().str();
  options.executors.plugins.resize(in.count(8));
  for (std::string &plugin : options.executors.plugins)
    plugin = in.str().str();
  options.extraPipeline = in.str().str();
  options.printIRAfterAll = in.u64() != 0;
  options.maxConstantBytes = in.u64();
  options.maxObjectBytes = in.u64();
  options.cacheMaxBytes = in.u64();
  options.executors.tls.caFile = in.str().str();
  options.executors.tls.certFile = in.str().str();
  options.executors.tls.keyFile = in.str().str();
  options.jobs = static_cast<unsigned>(std::min<uint64_t>(in.u64(), EngineOptions::kMaxJobs));
  uint64_t sharedMemory = in.u64();
  options.executors.sharedMemory =
      sharedMemory <= static_cast<uint64_t>(transport::SharedMemory::Off)
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
    out.u64(static_cast<uint64_t>(OutcomeStatus::Success));
    return;
  }
  llvm::handleAllErrors(
      std::move(error),
      [&](const CompileError &e) {
        out.u64(static_cast<uint64_t>(OutcomeStatus::CompileError))
            .str(e.summary)
            .u64(e.diagnostics.size());
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
        out.u64(static_cast<uint64_t>(OutcomeStatus::CodedError))
            .str(e.code)
            .str(e.message)
            .str(e.cause ? transport::errorCodeName(*e.cause) : "");
      },
      [&](const llvm::ErrorInfoBase &e) {
        out.u64(static_cast<uint64_t>(OutcomeStatus::OtherError)).str(e.message());
      });
}

llvm::Error readOutcome(MessageReader &in) {
  switch (static_cast<OutcomeStatus>(in.u64())) {
  case OutcomeStatus::Success:
    return in.ok() ? llvm::Error::success()
                   : llvm::createStringError("the module worker sent a malformed answer");
  case OutcomeStatus::CompileError: {
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
  case OutcomeStatus::CodedError: {
    llvm::StringRef code = in.str();
    std::string message = in.str().str();
    llvm::StringRef cause = in.str();
    std::optional<ErrorCode> known = transport::parseErrorCode(code);
    std::optional<ErrorCode> knownCause = transport::parseErrorCode(cause);
    if (!in.ok() || !known || (!cause.empty() && !knownCause))
      break;
    return engineError(*known, std::move(message), knownCause);
  }
  case OutcomeStatus::OtherError: {
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

} // namespace moduleproto

} // namespace courier
