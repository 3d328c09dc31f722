// The executor's HTTP server: serves the /v1 protocol (docs/protocol.md) over a thread pool,
// one worker process (or, without isolation, one ObjectHost) per session. Used by courier-executor
// and by tests that need an executor in-process. No HTTP library type appears here.
#ifndef COURIER_EXECUTOR_EXECUTORSERVER_H
#define COURIER_EXECUTOR_EXECUTORSERVER_H

#include "transport/Isolation.h"
#include "transport/ListenOptions.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::executor {

/// The executor's listener (bodies are objects, launch frames and call inputs) and sessions.
struct ExecutorServerOptions : transport::HttpListenOptions {
  std::vector<std::string> plugins;
  /// Sessions unused for this long are closed.
  std::chrono::seconds idleTimeout{600};
  /// An object no session holds is dropped from the store after this long, so a client
  /// between its upload and its attach, or re-attaching soon after a release, finds it.
  std::chrono::milliseconds objectGrace{60000};
  /// Most the object store holds: an upload past it evicts objects no session holds, oldest
  /// first, or is refused (507 `store_full`) when sessions hold too much.
  uint64_t maxObjectStoreMiB = 1024;

  /// Where shipped code runs. `Process` (the default): each session's objects are linked
  /// and run in that session's own sandboxed worker process, so a kernel that crashes,
  /// spins or misbehaves costs only its session's in-flight request. `InProcess`
  /// (`--isolation none`): in this process, as the in-process executor does (faster to
  /// start, not contained).
  transport::Isolation isolation = transport::Isolation::Process;
  /// A launch, call or async launch running longer than this is ended (its worker killed):
  /// `deadline_exceeded`. A request may ask for less (X-Courier-Deadline-Ms), never more.
  std::chrono::milliseconds launchTimeout{60000};
  /// Address space a worker's kernels may use beyond the worker's own (RLIMIT_AS).
  uint64_t workerMemoryMiB = 4096;
  /// RLIMIT_CPU of a worker over its life; 0: none (deadlines bound each launch).
  uint64_t workerCpuSeconds = 0;
  /// Threads of each session's kernels' parallel loops (--kernel-threads); 0: the CPUs the
  /// executor may run on (sched_getaffinity).
  unsigned kernelThreads = 0;
  /// Most sessions open at once; each isolated one is a worker process.
  size_t maxSessions = 128;
  /// Workers started ahead of need, so opening a session does not wait for a process.
  unsigned warmWorkers = 2;
  /// Workers enter a seccomp sandbox before running shipped code. Without it (only when
  /// seccomp is unavailable) kernels run contained but unconfined.
  bool sandbox = true;
  /// Accept objects without signature tables (hand-written objects); launches of their
  /// entries can then only be checked for plausibility.
  bool allowUnsignedObjects = false;
  /// The worker program; empty means courier-worker beside this process's executable.
  std::string workerProgram;
  /// Shared memory each session's same-host channel may take (its input and result regions,
  /// half each); 0 offers no channels (transport/SharedChannel.h).
  uint64_t shmArenaMiB = 256;
};

/// An executor listening on a bound socket. Create binds; run() serves until stop().
class ExecutorServer {
public:
  static llvm::Expected<std::unique_ptr<ExecutorServer>> create(ExecutorServerOptions options);
  ~ExecutorServer();

  /// "host:port" actually bound.
  std::string address() const;
  int port() const;

  /// Serves requests on the calling thread until stop() is called.
  llvm::Error run();
  /// Drains, then stops: /v1/ready answers 503 and new sessions are refused with 503
  /// `draining` while requests in flight finish, up to the drain timeout. Safe from any
  /// thread; returns once stop() has been called.
  void drainAndStop();
  /// Ends a drain's wait at once, so drainAndStop() stops now; safe from any thread.
  void cutDrainShort();
  /// Stops serving; safe from any thread, and before or during run().
  void stop();

  struct Impl;

private:
  explicit ExecutorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_EXECUTORSERVER_H
