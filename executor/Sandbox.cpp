// The worker's confinement: rlimits, the fatal-signal reporter and the seccomp allow-list.
#include "executor/Sandbox.h"

#include "executor/WorkerProtocol.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"

#include <seccomp.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace courier::executor {

namespace {

llvm::Error systemError(const llvm::Twine &what, int error = errno) {
  return llvm::createStringError(std::error_code(error, std::generic_category()),
                                 what + ": " + std::strerror(error));
}

/// Virtual size of this process now, from /proc/self/statm (pages).
uint64_t currentAddressSpace() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

llvm::Error setLimit(int resource, rlim_t value, const char *name) {
  struct rlimit limit {
    value, value
  };
  if (::setrlimit(resource, &limit) != 0)
    return systemError(llvm::formatv("setting {0} to {1}", name, uint64_t(value)));
  return llvm::Error::success();
}

int crashChannel = -1;
alignas(16) char alternateStack[64 * 1024];

void reportCrash(int signal, siginfo_t *info, void *) {
  char message[1 + sizeof(CrashReport)];
  CrashReport report;
  report.signal = signal;
  report.code = info ? info->si_code : 0;
  report.address = info ? reinterpret_cast<uint64_t>(info->si_addr) : 0;
  if (signal == SIGSYS && info)
    report.syscall = info->si_syscall;
  message[0] = static_cast<char>(MessageKind::Crashed);
  std::memcpy(message + 1, &report, sizeof(report));
  if (crashChannel >= 0)
    (void)::send(crashChannel, message, sizeof(message), MSG_NOSIGNAL | MSG_DONTWAIT);
  // Let the signal end the process the usual way, so the executor's wait sees it too.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

} // namespace

llvm::Error applyLimits(const SandboxLimits &limits) {
  if (limits.memoryBytes) {
    uint64_t base = currentAddressSpace();
    if (llvm::Error error = setLimit(RLIMIT_AS, base + limits.memoryBytes, "RLIMIT_AS"))
      return error;
  }
  if (limits.cpuSeconds)
    if (llvm::Error error = setLimit(RLIMIT_CPU, limits.cpuSeconds, "RLIMIT_CPU"))
      return error;
  if (llvm::Error error = setLimit(RLIMIT_NOFILE, limits.openFiles, "RLIMIT_NOFILE"))
    return error;
  if (llvm::Error error = setLimit(RLIMIT_NPROC, 0, "RLIMIT_NPROC"))
    return error;
  return setLimit(RLIMIT_CORE, 0, "RLIMIT_CORE");
}

llvm::Error installCrashReporter(int channel) {
  crashChannel = channel;
  stack_t stack{};
  stack.ss_sp = alternateStack;
  stack.ss_size = sizeof(alternateStack);
  if (::sigaltstack(&stack, nullptr) != 0)
    return systemError("installing the signal stack");
  struct sigaction action {};
  action.sa_sigaction = reportCrash;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP, SIGXCPU})
    if (::sigaction(signal, &action, nullptr) != 0)
      return systemError("installing the crash reporter");
  return llvm::Error::success();
}

llvm::Error enterSandbox() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return systemError("setting no-new-privs");
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_TRAP);
  if (!filter)
    return llvm::createStringError("seccomp_init failed");
  llvm::scope_exit release([&] { seccomp_release(filter); });
  // What a worker needs to receive work and shared memory, compute, allocate and answer.
  static const char *const allowed[] = {
      // its channel, its log, shared buffers
      "read", "write", "readv", "writev", "recvmsg", "sendmsg", "recvfrom", "sendto", "close",
      "poll", "ppoll", "fstat", "newfstatat", "lseek", "memfd_create", "ftruncate",
      // memory
      "mmap", "munmap", "mprotect", "mremap", "madvise", "brk",
      // synchronisation and time
      "futex", "sched_yield", "clock_gettime", "clock_getres", "gettimeofday", "nanosleep",
      "clock_nanosleep",
      // signals to itself (abort, the crash reporter) and leaving
      "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall", "getpid",
      "gettid", "exit", "exit_group"};
  for (const char *name : allowed) {
    int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR)
      continue; // Not a system call on this architecture (e.g. poll on aarch64).
    if (int rc = seccomp_rule_add(filter, SCMP_ACT_ALLOW, number, 0))
      return systemError(llvm::formatv("allowing {0}", name), -rc);
  }
  // fcntl only to seal a reply's size (the executor maps no unsealed buffer) or read seals.
  for (unsigned command : {F_ADD_SEALS, F_GET_SEALS}) {
    struct scmp_arg_cmp onlyThis = {1, SCMP_CMP_EQ, command, 0};
    if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_ALLOW, SCMP_SYS(fcntl), 1, &onlyThis))
      return systemError("allowing fcntl", -rc);
  }
  // Signals only to itself: raise() is tgkill(getpid(), gettid(), sig).
  struct scmp_arg_cmp toSelf = {0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid()), 0};
  if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, &toSelf))
    return systemError("allowing tgkill", -rc);
  if (int rc = seccomp_load(filter))
    return systemError("loading the seccomp filter", -rc);
  return llvm::Error::success();
}

} // namespace courier::executor
