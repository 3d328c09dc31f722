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
#include <grp.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/securebits.h>
#include <linux/sockios.h>
#include <pwd.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <termios.h>
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
std::atomic<uint32_t> *crashRequest = nullptr, *crashReply = nullptr;
/// Set once a report has been sent, so the abort that follows it does not replace it.
volatile sig_atomic_t crashReported = 0;
/// The calling thread's index in the kernel-thread team (0: not one of its helpers).
thread_local volatile sig_atomic_t crashThreadIndex = 0;

void sendReport(const CrashReport &report) {
  char message[1 + sizeof(CrashReport)];
  message[0] = static_cast<char>(MessageKind::Crashed);
  std::memcpy(message + 1, &report, sizeof(report));
  if (crashChannel >= 0)
    (void)::send(crashChannel, message, sizeof(message), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (crashReply) {
    // Lock-free atomics and a futex wake: both safe in a signal handler.
    crashReply->store(crashRequest->load() ^ 0x80000000u);
    transport::doorbell::ring(*crashReply);
  }
}
alignas(16) char alternateStack[64 * 1024];

/// Set by enterSandbox: its filter traps newfstatat for the handler below to answer.
volatile sig_atomic_t answerStatAt = 0;

/// Answers a trapped newfstatat: fstat for the C library's form (a descriptor, an empty path
/// and AT_EMPTY_PATH), EACCES for anything naming a path. True when it answered.
bool answerTrappedStatAt(const siginfo_t *info, void *context) {
  if (!answerStatAt || !info || !context || info->si_syscall != SYS_newfstatat)
    return false;
  auto *state = static_cast<ucontext_t *>(context);
#if defined(__x86_64__)
  greg_t *registers = state->uc_mcontext.gregs;
  long fd = registers[REG_RDI], flags = registers[REG_R10];
  auto *path = reinterpret_cast<const char *>(registers[REG_RSI]);
  void *status = reinterpret_cast<void *>(registers[REG_RDX]);
  greg_t &result = registers[REG_RAX];
#elif defined(__aarch64__)
  auto *registers = state->uc_mcontext.regs;
  long fd = static_cast<long>(registers[0]), flags = static_cast<long>(registers[3]);
  auto *path = reinterpret_cast<const char *>(registers[1]);
  void *status = reinterpret_cast<void *>(registers[2]);
  auto &result = registers[0];
#else
  return false;
#endif
  long answer = -EACCES;
  if ((flags & AT_EMPTY_PATH) && path && path[0] == '\0') {
    int saved = errno;
    answer = ::syscall(SYS_fstat, fd, status);
    if (answer < 0)
      answer = -errno;
    errno = saved;
  }
  result = static_cast<std::remove_reference_t<decltype(result)>>(answer);
  return true;
}

void reportCrash(int signal, siginfo_t *info, void *context) {
  if (signal == SIGSYS && answerTrappedStatAt(info, context))
    return;
  CrashReport report;
  report.signal = signal;
  report.code = info ? info->si_code : 0;
  report.address = info ? reinterpret_cast<uint64_t>(info->si_addr) : 0;
  if (signal == SIGSYS && info)
    report.syscall = info->si_syscall;
  report.thread = crashThreadIndex;
  if (!crashReported)
    sendReport(report);
  // Let the signal end the process the usual way, so the executor's wait sees it too.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

/// A seccomp filter that allows what it does not name, loaded into every thread of the
/// process (those started before, and those a signal handler may run on).
class AllThreadsFilter {
public:
  AllThreadsFilter() : filter(seccomp_init(SCMP_ACT_ALLOW)) {}
  ~AllThreadsFilter() {
    if (filter)
      seccomp_release(filter);
  }
  AllThreadsFilter(const AllThreadsFilter &) = delete;
  AllThreadsFilter &operator=(const AllThreadsFilter &) = delete;

  /// The filter, or the error that kept it from being made.
  llvm::Expected<scmp_filter_ctx> get() {
    if (!filter)
      return llvm::createStringError("seccomp_init failed");
    if (int rc = seccomp_attr_set(filter, SCMP_FLTATR_CTL_TSYNC, 1))
      return systemError("synchronising the filter to every thread", -rc);
    return filter;
  }

private:
  scmp_filter_ctx filter;
};

/// Empties the capability bounding set (needs CAP_SETPCAP).
/// Changes of user, group or capabilities.
const char *const kIdentityCalls[] = {"setuid",    "setgid",    "setreuid", "setregid", "setresuid",
                                      "setresgid", "setgroups", "setfsuid", "setfsgid", "capset"};

llvm::Error dropBoundingSet() {
  for (int capability = 0; ::prctl(PR_CAPBSET_READ, capability, 0, 0, 0) >= 0; ++capability)
    if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0)
      return systemError(
          llvm::formatv("dropping capability {0} from the bounding set", capability));
  return llvm::Error::success();
}

} // namespace

void setCrashThreadIndex(int index) { crashThreadIndex = index; }

void ringOnCrash(std::atomic<uint32_t> &request, std::atomic<uint32_t> &reply) {
  crashRequest = &request;
  crashReply = &reply;
}

void reportOutOfMemoryAndAbort() {
  CrashReport report;
  report.signal = SIGABRT;
  report.code = kOutOfMemoryCode;
  sendReport(report);
  crashReported = 1;
  ::signal(SIGABRT, SIG_DFL);
  ::raise(SIGABRT);
  ::_exit(134);
}

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
  if (limits.noNewProcesses)
    if (llvm::Error error = setLimit(RLIMIT_NPROC, 0, "RLIMIT_NPROC"))
      return error;
  if (limits.fileBytes) {
    if (llvm::Error error = setLimit(RLIMIT_FSIZE, limits.fileBytes, "RLIMIT_FSIZE"))
      return error;
    // Growing a file past it then fails with EFBIG instead of killing the worker.
    ::signal(SIGXFSZ, SIG_IGN);
  }
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
  // Into every thread: the kernel threads, started before (executor/KernelThreads.h), run
  // kernels' code too. No thread may be created after it: clone is not allowed.
  if (int rc = seccomp_attr_set(filter, SCMP_FLTATR_CTL_TSYNC, 1))
    return systemError("synchronising the filter to every thread", -rc);
  // What a worker needs to receive work and shared memory, compute, allocate and answer.
  static const char *const allowed[] = {
      // its channel, its log, shared buffers
      "read", "write", "readv", "writev", "recvmsg", "sendmsg", "recvfrom", "sendto", "close",
      "poll", "ppoll", "fstat", "lseek", "memfd_create", "ftruncate",
      // memory
      "mmap", "munmap", "mprotect", "mremap", "madvise", "brk",
      // synchronisation and time
      "futex", "futex_waitv", "sched_yield", "clock_gettime", "clock_getres", "gettimeofday",
      "nanosleep", "clock_nanosleep",
      // signals to itself (abort, the crash reporter) and leaving
      "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall", "getpid",
      "gettid", "exit", "exit_group"};
  for (const char *name : allowed) {
    int number = seccomp_syscall_resolve_name(name);
#ifdef __NR_futex_waitv
    // Known to the kernel headers the worker was built with, maybe not to libseccomp (before
    // 2.5.4): the worker calls it when it sleeps with a same-host channel to watch.
    if (number == __NR_SCMP_ERROR && llvm::StringRef(name) == "futex_waitv")
      number = __NR_futex_waitv;
#endif
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
  // ioctl only to read how much of what it sent a same-host client has not received
  // (SIOCOUTQ): a client that takes no result buffers is left one at most.
  struct scmp_arg_cmp outputQueue = {1, SCMP_CMP_EQ, SIOCOUTQ, 0};
  if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, &outputQueue))
    return systemError("allowing ioctl", -rc);
  // Signals only to itself: raise() is tgkill(getpid(), gettid(), sig).
  struct scmp_arg_cmp toSelf = {0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid()), 0};
  if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, &toSelf))
    return systemError("allowing tgkill", -rc);
  // newfstatat is left to trap: the crash reporter answers it (answerTrappedStatAt).
  answerStatAt = 1;
  if (int rc = seccomp_load(filter))
    return systemError("loading the seccomp filter", -rc);
  return llvm::Error::success();
}

Identity unprivilegedIdentity() {
  Identity nobody;
  if (const struct passwd *entry = ::getpwnam("nobody")) {
    nobody.uid = entry->pw_uid;
    nobody.gid = entry->pw_gid;
  }
  return nobody;
}

llvm::Error becomeUser(Identity who) {
  if (::geteuid() != 0)
    return llvm::Error::success();
  if (::setgroups(0, nullptr) != 0)
    return systemError("dropping supplementary groups");
  if (::setresgid(who.gid, who.gid, who.gid) != 0)
    return systemError(llvm::formatv("becoming group {0}", who.gid));
  if (::setresuid(who.uid, who.uid, who.uid) != 0)
    return systemError(llvm::formatv("becoming user {0}", who.uid));
  if (who.uid == 0)
    return llvm::Error::success();
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct held[2] = {};
  if (::syscall(SYS_capget, &header, held) != 0)
    return systemError("reading capabilities");
  if (held[0].permitted || held[1].permitted || held[0].effective || held[1].effective)
    return llvm::createStringError(
        llvm::formatv("capabilities survived becoming user {0}", who.uid).str());
  return llvm::Error::success();
}

namespace {

/// Sets the secure bits `bits`, then empties the bounding set while this process may still.
llvm::Error lockSecureBits(unsigned long bits) {
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0)
    return systemError("setting the secure bits");
  return dropBoundingSet();
}

/// Clears the ambient set (kernels without one answer EINVAL: nothing to clear).
llvm::Error clearAmbientCapabilities() {
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return systemError("clearing ambient capabilities");
  return llvm::Error::success();
}

} // namespace

llvm::Error leaveRoot() {
  if (::geteuid() != 0)
    return llvm::Error::success();
  // The bounding set while this process may still change it.
  if (llvm::Error error = dropBoundingSet())
    return error;
  return becomeUser(unprivilegedIdentity());
}

llvm::Error dropCapabilitiesButIdentity() {
  if (::geteuid() != 0)
    return dropCapabilities();
  // No capabilities for root at exec, no ambient ones ever, and the two rules that would let
  // CAP_SETUID and CAP_SETGID outlive a change of user (SECBIT_KEEP_CAPS and
  // SECBIT_NO_SETUID_FIXUP) locked off.
  constexpr unsigned long kSecureBits =
      SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
      SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (llvm::Error error = lockSecureBits(kSecureBits))
    return error;
  if (llvm::Error error = clearAmbientCapabilities())
    return error;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct kept[2] = {};
  kept[0].permitted = kept[0].effective = (1u << CAP_SETUID) | (1u << CAP_SETGID);
  if (::syscall(SYS_capset, &header, kept) != 0)
    return systemError("dropping capabilities");
  return llvm::Error::success();
}

llvm::Error dropCapabilities() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct held[2] = {};
  if (::syscall(SYS_capget, &header, held) != 0)
    return systemError("reading capabilities");
  bool mayChangeBits = held[0].effective & (1u << CAP_SETPCAP);
  if (mayChangeBits) {
    // Executing a program as root would otherwise grant every capability again.
    constexpr unsigned long kSecureBits = (1ul << 0) | (1ul << 1) | (1ul << 2) | (1ul << 3) |
                                          (1ul << 4) | (1ul << 5) | (1ul << 6) | (1ul << 7);
    if (llvm::Error error = lockSecureBits(kSecureBits))
      return error;
  }
  if (llvm::Error error = clearAmbientCapabilities())
    return error;
  struct __user_cap_data_struct none[2] = {};
  if (::syscall(SYS_capset, &header, none) != 0)
    return systemError("dropping capabilities");
  return llvm::Error::success();
}

llvm::Error forbidFileWritesInAllThreads() {
  AllThreadsFilter allThreads;
  llvm::Expected<scmp_filter_ctx> made = allThreads.get();
  if (!made)
    return made.takeError();
  scmp_filter_ctx filter = *made;
  const uint32_t refused = SCMP_ACT_ERRNO(EACCES);
  static const char *const changesFiles[] = {
      "creat",      "rename",    "renameat",  "renameat2",   "link",         "linkat",
      "symlink",    "symlinkat", "unlink",    "unlinkat",    "mkdir",        "mkdirat",
      "rmdir",      "mknod",     "mknodat",   "truncate",    "chmod",        "fchmod",
      "fchmodat",   "fchmodat2", "chown",     "fchown",      "lchown",       "fchownat",
      "setxattr",   "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
      "utime",      "utimes",    "utimensat", "futimesat",   "bind",         "mount_setattr",
      "move_mount", "open_tree", "fsopen",    "fsmount"};
  for (const char *name : changesFiles) {
    int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR)
      continue; // Not a system call here, or unknown to this libseccomp.
    if (int rc = seccomp_rule_add(filter, refused, number, 0))
      return systemError(llvm::formatv("refusing {0}", name), -rc);
  }
  // Whoever the worker is by now, it stays: no user, group or capability changes.
  for (const char *name : kIdentityCalls) {
    int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR)
      continue;
    if (int rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), number, 0))
      return systemError(llvm::formatv("refusing {0}", name), -rc);
  }
  // openat2 passes its flags in memory a filter cannot read; the C library does not use it.
  if (int rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0))
    return systemError("refusing openat2", -rc);
  // open and openat with any flag that writes, creates or truncates (O_TMPFILE needs one).
  for (scmp_datum_t flag : {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC})
    for (auto [call, argument] : {std::pair{SCMP_SYS(open), 1u}, std::pair{SCMP_SYS(openat), 2u}}) {
      if (call < 0)
        continue; // open is not a system call on aarch64.
      struct scmp_arg_cmp has = {argument, SCMP_CMP_MASKED_EQ, flag, flag};
      if (int rc = seccomp_rule_add_array(filter, refused, call, 1, &has))
        return systemError("refusing writable opens", -rc);
    }
  if (int rc = seccomp_load(filter))
    return systemError("loading the file-write filter", rc < 0 ? -rc : EBUSY);
  return llvm::Error::success();
}

// Landlock ABI 3 (Linux 6.2); older headers lack it, the running kernel may still have it.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

llvm::Expected<bool> forbidFileWrites() {
  int abi = static_cast<int>(
      ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION));
  if (abi < 0)
    return errno == ENOSYS || errno == EOPNOTSUPP ? false
                                                  : llvm::Expected<bool>(systemError("Landlock"));
  struct landlock_ruleset_attr attributes = {};
  attributes.handled_access_fs = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                                 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                                 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                                 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                                 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2)
    attributes.handled_access_fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3)
    attributes.handled_access_fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
  int ruleset =
      static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attributes, sizeof(attributes), 0));
  if (ruleset < 0)
    return systemError("creating a Landlock ruleset");
  // No rule: no path is writable.
  long restricted = ::syscall(SYS_landlock_restrict_self, ruleset, 0);
  int error = errno;
  ::close(ruleset);
  if (restricted != 0)
    return systemError("entering the Landlock ruleset", error);
  return true;
}

namespace {
/// The module sandbox's rules on arguments: clone only for threads, signals only to the
/// process itself, no descriptor or terminal that signals another, and the parent-death
/// signal kept at SIGKILL.
llvm::Error limitModuleReach(scmp_filter_ctx filter) {
  // clone only for threads. clone3 passes its flags in memory a filter cannot read: it fails
  // with ENOSYS, and the C library falls back to clone.
  struct scmp_arg_cmp notThread = {0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0};
  if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_TRAP, SCMP_SYS(clone), 1, &notThread))
    return systemError("limiting clone", -rc);
  if (int rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0))
    return systemError("limiting clone3", -rc);
  // Signals only to itself: kill(0, ...) or kill(getppid(), ...) would reach the server.
  scmp_datum_t self = static_cast<scmp_datum_t>(::getpid());
  struct scmp_arg_cmp other = {0, SCMP_CMP_NE, self, 0};
  for (int call :
       {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)})
    if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_TRAP, call, 1, &other))
      return systemError("limiting signals", -rc);
  // tkill names a thread, which may be another process's; raise() uses tgkill.
  if (int rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, SCMP_SYS(tkill), 0))
    return systemError("denying tkill", -rc);
  // Signals by other routes: a descriptor that signals its owner (F_SETOWN with F_SETSIG
  // SIGKILL aimed at the server), and input pushed into a terminal the worker shares.
  struct Refused {
    int call;
    scmp_datum_t command;
    unsigned argument;
  };
  for (Refused refused :
       {Refused{SCMP_SYS(fcntl), F_SETOWN, 1}, Refused{SCMP_SYS(fcntl), F_SETOWN_EX, 1},
        Refused{SCMP_SYS(fcntl), F_SETSIG, 1}, Refused{SCMP_SYS(ioctl), FIOSETOWN, 1},
        Refused{SCMP_SYS(ioctl), SIOCSPGRP, 1}, Refused{SCMP_SYS(ioctl), TIOCSTI, 1}}) {
    struct scmp_arg_cmp is = {refused.argument, SCMP_CMP_EQ, refused.command, 0};
    if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_TRAP, refused.call, 1, &is))
      return systemError("limiting fcntl and ioctl", -rc);
  }
  // The parent-death signal may be set again (becoming another user clears it) but only to
  // SIGKILL: clearing it would let a spinning worker outlive its server.
  struct scmp_arg_cmp deathSignal[] = {{0, SCMP_CMP_EQ, PR_SET_PDEATHSIG, 0},
                                       {1, SCMP_CMP_NE, SIGKILL, 0}};
  if (int rc = seccomp_rule_add_array(filter, SCMP_ACT_TRAP, SCMP_SYS(prctl), 2, deathSignal))
    return systemError("limiting prctl", -rc);
  return llvm::Error::success();
}
} // namespace

llvm::Error enterModuleSandbox(bool identityChangeLater) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return systemError("setting no-new-privs");
  // Not dumpable: other workers (the same user) cannot open this one's /proc/<pid>/mem; the
  // worker dropped its capabilities when it started (dropCapabilities), so a worker of a
  // root server cannot override that, nor file permissions.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    return systemError("clearing dumpable");
  // Threads started before (the compiler's) are bound as this one is.
  AllThreadsFilter allThreads;
  llvm::Expected<scmp_filter_ctx> made = allThreads.get();
  if (!made)
    return made.takeError();
  scmp_filter_ctx filter = *made;
  static const char *const denied[] = {
      // other programs and processes
      "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
      "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "kcmp",
      // the system itself
      "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_by_handle_at",
      "name_to_handle_at", "init_module", "finit_module", "delete_module", "kexec_load",
      "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
      "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "sethostname", "setdomainname",
      "iopl", "ioperm", "vhangup", "lookup_dcookie", "personality",
      // kernel interfaces a computation has no use for
      "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "io_uring_setup",
      "io_uring_enter", "io_uring_register", "fanotify_init", "mbind", "move_pages",
      "migrate_pages"};
  auto deny = [&](llvm::ArrayRef<const char *> names) -> llvm::Error {
    for (const char *name : names) {
      int number = seccomp_syscall_resolve_name(name);
      if (number == __NR_SCMP_ERROR)
        continue;
      if (int rc = seccomp_rule_add(filter, SCMP_ACT_TRAP, number, 0))
        return systemError(llvm::formatv("denying {0}", name), -rc);
    }
    return llvm::Error::success();
  };
  if (llvm::Error error = deny(denied))
    return error;
  if (!identityChangeLater)
    if (llvm::Error error = deny(kIdentityCalls))
      return error;
  if (llvm::Error error = limitModuleReach(filter))
    return error;
  if (int rc = seccomp_load(filter))
    return systemError("loading the seccomp filter", -rc);
  return llvm::Error::success();
}

} // namespace courier::executor
