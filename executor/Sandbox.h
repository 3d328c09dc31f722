// What confines a worker process before it runs shipped code: resource limits, a fatal-signal
// reporter, no-new-privs and a seccomp filter that allows only what computation needs.
// docs/design.md ("What a kernel may do") lists the same system calls in prose.
#ifndef COURIER_EXECUTOR_SANDBOX_H
#define COURIER_EXECUTOR_SANDBOX_H

#include "llvm/Support/Error.h"

#include <atomic>

#include <cstdint>
#include <sys/types.h>

namespace courier::executor {

struct SandboxLimits {
  /// Address space a worker's kernels may add to what the worker maps at start (RLIMIT_AS
  /// is set to the worker's size at that point plus this). 0: no limit.
  uint64_t memoryBytes = 0;
  /// RLIMIT_CPU over the worker's whole life; 0: none (deadlines end long launches).
  uint64_t cpuSeconds = 0;
  /// RLIMIT_NOFILE: a worker needs its channel, its log and a few shared buffers.
  uint64_t openFiles = 32;
  /// RLIMIT_NPROC 0: no new threads or processes. A module worker needs threads (its
  /// compiler runs on a large stack of its own), so it relies on its filter instead.
  bool noNewProcesses = true;
  /// RLIMIT_FSIZE: the largest file, memfds included, the worker may make (0: no limit).
  /// Where the worker has no control group of its own (executor/WorkerCgroup.h) this is
  /// what bounds the memory a file in memory holds once unmapped.
  uint64_t fileBytes = 0;
};

/// Sets RLIMIT_AS, RLIMIT_CPU, RLIMIT_NOFILE, RLIMIT_NPROC (0, with noNewProcesses),
/// RLIMIT_FSIZE and RLIMIT_CORE (0, so a crashing kernel never writes a core file).
llvm::Error applyLimits(const SandboxLimits &limits);

/// Installs handlers for the signals a kernel dies of (on an alternate stack, so a stack
/// overflow is reported too). Each writes a CrashReport to `channel` and then lets the
/// signal kill the process with its default action.
llvm::Error installCrashReporter(int channel);

/// After its report, the crash reporter also changes `reply` to a number other than
/// `request`'s and wakes whoever waits on it: an executor waiting on a doorbell page
/// (executor/WorkerProtocol.h) then reads the report at once.
void ringOnCrash(std::atomic<uint32_t> &request, std::atomic<uint32_t> &reply);

/// Names the calling thread in crash reports: `index` in the kernel-thread team
/// (executor/KernelThreads.h); 0, the default, is the thread that launches kernels.
void setCrashThreadIndex(int index);

/// Reports "out of memory" on the crash reporter's channel and aborts: for a worker's
/// new-handler, so a compile that reaches its memory limit is named as such.
[[noreturn]] void reportOutOfMemoryAndAbort();

/// A user and group a worker of a root server becomes.
struct Identity {
  uid_t uid = 65534;
  gid_t gid = 65534;
};

/// The user "nobody" (uid and gid 65534 where the system has none). Reads the user database:
/// call it before any sandbox is entered.
Identity unprivilegedIdentity();

/// For a worker of a server that runs as root: leaves root for good, for the user "nobody",
/// with no supplementary groups and an empty capability bounding set. Nothing is done for
/// any other user. Clears the parent-death signal, as every change of user does: set it
/// again after.
llvm::Error leaveRoot();

/// For a worker of a root server that runs trusted code as root before it runs anyone
/// else's (a module worker compiles into the server's cache): drops every capability but
/// CAP_SETUID and CAP_SETGID, empties the bounding set and locks the secure bits so that
/// becoming another user (becomeUser) clears what is left in every thread, and nothing
/// brings it back. Call it first, while the process has one thread; the threads it starts
/// later hold the same two. Nothing is done for any user but root.
llvm::Error dropCapabilitiesButIdentity();

/// Becomes `who` in every thread (the C library changes the ids of all threads), without
/// supplementary groups. From root, the kernel then clears each thread's capabilities
/// (dropCapabilitiesButIdentity left the secure bits that make it so); this checks it did
/// in the calling thread. Nothing is done for any user but root. Clears the parent-death
/// signal: set it again after.
llvm::Error becomeUser(Identity who);

/// Drops every capability of the process for good: effective, permitted, inheritable,
/// ambient and (where it may) the bounding set, with the secure bits that keep a root
/// process from regaining them. Capabilities are per thread, so a worker calls this first,
/// while it has one thread; the threads it starts later have none.
llvm::Error dropCapabilities();

/// Sets PR_SET_NO_NEW_PRIVS and loads the filter: anything not allowed traps with SIGSYS,
/// which the crash reporter names with the system call's number. newfstatat, which the C
/// library's fstat uses, also traps: the crash reporter answers it for a descriptor and
/// refuses a path with EACCES, so a kernel cannot learn of files outside its worker.
llvm::Error enterSandbox();

/// The module worker's confinement: a module's host code compiles, reads and writes the
/// cache, talks to executors and loads plugins, so an allow-list would not fit. Instead
/// no-new-privs and a deny-list: no new programs or processes (threads only), no signals to
/// other processes, no tracing or reading other processes' memory, no mounts, namespaces,
/// identity changes, kernel modules, BPF or io_uring. A denied call traps with SIGSYS.
/// With `identityChangeLater`, changes of user stay allowed here: the worker becomes
/// unprivileged (becomeUser) before any module code runs, and forbidFileWritesInAllThreads
/// forbids them from then on.
llvm::Error enterModuleSandbox(bool identityChangeLater = false);

/// Forbids every thread of this process, from now on, to open a file for writing, or to
/// create, truncate, rename, link, remove, change the mode, owner or times of any file or
/// bind a socket to a path (a seccomp filter synchronised to all threads; a call refused
/// fails with EACCES), and to change user, group or capabilities (EPERM). Descriptors
/// already open keep working, and memfds are not paths.
/// Needs no-new-privs (enterModuleSandbox).
llvm::Error forbidFileWritesInAllThreads();

/// Forbids the calling thread, and those it starts later, the same with Landlock (no path
/// allowed): a second lock where the kernel has it. False when it has not.
llvm::Expected<bool> forbidFileWrites();

} // namespace courier::executor

#endif // COURIER_EXECUTOR_SANDBOX_H
