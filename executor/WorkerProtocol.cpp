// Messages between the executor and its workers: sequence numbers and the names of the
// signals a worker dies of (the encoding and shared memory are transport/SharedMemory.h).
#include "executor/WorkerProtocol.h"

#include "llvm/Support/FormatVariadic.h"

#include <seccomp.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

namespace courier::executor {

std::optional<uint64_t> takeSequence(std::string &bytes) {
  if (bytes.size() < 9)
    return std::nullopt;
  uint64_t sequence = 0;
  for (int i = 0; i < 8; ++i)
    sequence |= uint64_t(static_cast<unsigned char>(bytes[bytes.size() - 8 + i])) << (8 * i);
  bytes.resize(bytes.size() - 8);
  return sequence;
}

std::string signalName(int signal) {
  switch (signal) {
  case SIGSEGV:
    return "SIGSEGV";
  case SIGBUS:
    return "SIGBUS";
  case SIGILL:
    return "SIGILL";
  case SIGFPE:
    return "SIGFPE";
  case SIGABRT:
    return "SIGABRT";
  case SIGSYS:
    return "SIGSYS";
  case SIGKILL:
    return "SIGKILL";
  case SIGTERM:
    return "SIGTERM";
  case SIGXCPU:
    return "SIGXCPU";
  case SIGXFSZ:
    return "SIGXFSZ";
  case SIGTRAP:
    return "SIGTRAP";
  case SIGPIPE:
    return "SIGPIPE";
  default:
    return "signal " + std::to_string(signal);
  }
}

std::string describeCrash(const CrashReport &report) {
  if (report.signal == SIGABRT && report.code == kOutOfMemoryCode)
    return "out of memory (SIGABRT)";
  std::string text = signalName(report.signal);
  if (report.signal == SIGSYS && report.syscall >= 0) {
    char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, report.syscall);
    text += llvm::formatv(" (system call {0})",
                          name ? std::string(name) : "number " + std::to_string(report.syscall))
                .str();
    std::free(name);
  } else if (report.signal == SIGSEGV || report.signal == SIGBUS || report.signal == SIGILL ||
             report.signal == SIGFPE) {
    text += llvm::formatv(" (address {0:x})", report.address).str();
  }
  return text;
}

} // namespace courier::executor
