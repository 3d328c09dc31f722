// A session's worker process: the program the executor starts per session (courier-worker)
// and what it needs to know. The worker links the session's objects and runs its launches
// and calls, confined by executor/Sandbox.h; the executor talks to it through
// executor/WorkerProtocol.h on the descriptor kWorkerChannelFd.
#ifndef COURIER_EXECUTOR_WORKER_H
#define COURIER_EXECUTOR_WORKER_H

namespace courier::executor {

/// The worker's end of its channel, placed there by the executor when it starts the worker.
inline constexpr int kWorkerChannelFd = 3;

/// courier-worker's main(): serves its channel until the executor closes it. Flags:
///   --parent PID            exit if that process is gone (set by the executor)
///   --plugin LIB.so         loaded before the sandbox is entered (repeatable)
///   --memory-mib N          address space kernels may add (RLIMIT_AS)
///   --cpu-seconds N         RLIMIT_CPU
///   --kernel-threads N      threads of kernels' parallel loops, started before the sandbox
///                           (default: the CPUs the worker may run on)
///   --no-sandbox            skip no-new-privs and seccomp
///   --allow-unsigned-objects accept objects without signature tables
int runWorker(int argc, char **argv);

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKER_H
