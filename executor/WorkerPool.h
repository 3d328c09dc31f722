// The executor's side of worker processes: starting them (a few kept warm, so opening a
// session does not pay a process start), one request at a time with a deadline, and what a
// worker's death means for the request it was running.
#ifndef COURIER_EXECUTOR_WORKERPOOL_H
#define COURIER_EXECUTOR_WORKERPOOL_H

#include "executor/EndReason.h"
#include "executor/WorkerCgroup.h"
#include "executor/WorkerProtocol.h"

#include "llvm/Support/Error.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace courier::executor {

using Clock = std::chrono::steady_clock;

struct WorkerSettings {
  std::string program; ///< courier-worker.
  std::vector<std::string> plugins;
  uint64_t memoryMiB = 0;
  uint64_t cpuSeconds = 0;
  /// Threads of each worker's kernels' parallel loops (0: the CPUs it may run on).
  unsigned kernelThreads = 0;
  bool sandbox = true;
  bool allowUnsignedObjects = false;
  /// Share a doorbell page with each worker (executor/WorkerProtocol.h), which courier-worker
  /// understands: requests without descriptors then cross without a socket round trip.
  bool doorbell = false;
  /// Share a kernel-thread tally page with each worker instead (a module worker, which takes
  /// its requests on the socket), so that kernelThreadTotals() counts its kernels too.
  bool kernelTally = false;
  /// Passed after the flags above: what a program other than courier-worker needs.
  std::vector<std::string> extraArguments;
  /// Threads a worker may start beyond those it has when it is ready, where it has a control
  /// group of its own (executor/WorkerCgroup.h). A session worker's filter lets kernels start
  /// none; a module worker's host code may.
  uint64_t extraThreads = 64;
};

/// How a worker's life ended, for metrics and the log.
struct WorkerDeath {
  std::string cause;  ///< "SIGSEGV (address 0x0)", "exited with status 3", "deadline".
  std::string signal; ///< "SIGSEGV"..., or empty for an exit.
  EndReason reason = EndReason::None; ///< Why the executor ended it, if it did.
};

/// One worker process. Requests are not thread-safe (the owner serializes them); kill() and
/// pid() may be called from any thread.
class WorkerProcess {
public:
  ~WorkerProcess();

  /// Starts `program` with `args` after argv[0] and its channel on kWorkerChannelFd, and
  /// waits until it reports Ready (or why it could not start). The worker is sent SIGKILL
  /// when the thread that started it ends (PDEATHSIG), so start workers from a thread that
  /// lives as long as they may: WorkerPool's.
  /// The program is executed through a descriptor opened the first time it is started
  /// (workerProgram): a file put in its place later is never run. Its environment holds only
  /// what workers read (workerEnvironment). Where a control group can be made, the worker gets
  /// one bounding its memory, memfd pages included, at `memoryBytes` past what it holds when
  /// ready and its threads at `extraThreads` more.
  static llvm::Expected<std::unique_ptr<WorkerProcess>> spawn(const std::string &program,
                                                              const std::vector<std::string> &args,
                                                              uint64_t memoryBytes = 0,
                                                              uint64_t extraThreads = 0);

  pid_t pid() const { return processId; }
  bool alive() const { return !dead.load(); }
  /// True when the worker is alive and has said nothing since its last answer: a worker
  /// that died while idle, or whose kernel wrote to the channel out of turn, is not.
  bool quiet() const;

  /// Sends a request and waits for its reply until `deadline`. A worker that dies meanwhile
  /// fails the request with `kernel_crashed` naming how it died and `what` it was running; a
  /// deadline that passes ends the worker (`deadline_exceeded`). Either way the worker is
  /// dead afterwards and `death()` says why. A Failed reply becomes the error it carries.
  /// The request's sequence number is appended to `message` here.
  llvm::Expected<Message> request(MessageWriter &message, llvm::ArrayRef<int> fds,
                                  Clock::time_point deadline, llvm::StringRef what);
  /// The last phase the worker reported (MessageKind::Progress) during the last request,
  /// answered or not; 0 when it reported none.
  uint64_t phase() const { return lastPhase; }

  /// The socket to the worker, to poll for its end (it closes when the worker exits).
  int socket() const { return channel.get(); }
  /// The error a request `what` running when the worker ended gets (as request() says it).
  llvm::Error endedDuring(llvm::StringRef what) { return died(what, Clock::now()); }

  /// Ends the worker for `reason`; a request waiting on it fails accordingly.
  void kill(EndReason reason);
  const WorkerDeath &death() const { return howItDied; }
  /// Ends the worker (if it still runs) and says how it ended: for a worker found dead, or
  /// talking out of turn, between requests. One that reported a crash is given a moment
  /// to die of it first.
  const WorkerDeath &end();

private:
  friend class WorkerPool;
  WorkerProcess(pid_t pid, UniqueFd channel) : processId(pid), channel(std::move(channel)) {}
  /// A sealed page of `size` bytes, sent to the worker in a `kind` request.
  llvm::Expected<SharedBuffer> sharePage(MessageKind kind, uint64_t size, const char *name,
                                         llvm::StringRef what);
  /// Sends the worker a doorbell page; later requests go through it.
  llvm::Error shareDoorbell();
  /// Sends the worker a page for its kernel-thread tally alone.
  llvm::Error shareKernelTally();
  /// Counts `tally` (in a page this process shares with the worker) in kernelThreadTotals()
  /// from now on, and what it holds once the worker is gone.
  void addTally(const KernelThreadTally *tally);
  /// Puts the request in the doorbell page and waits for the reply there: the reply if it
  /// came in the page, nothing if it is to be read from the socket (it went there, or the
  /// reply word changed otherwise), or the error that ended the request.
  llvm::Expected<std::optional<Message>> ringDoorbell(Clock::time_point deadline,
                                                      llvm::StringRef what, llvm::ArrayRef<int> fds,
                                                      const std::string &bytes);
  /// Kills (if needed) and reaps the process once; later calls return what the first saw.
  int reap();
  /// Reads a crash report the worker left on its socket, with no wait (what else is there
  /// goes): for a worker that ended with no request reading the socket.
  void takeCrashReport();
  /// Whether the worker's socket is closed: the process is gone, or all but gone.
  bool closed() const;
  /// Takes the message on the socket, with no wait: true when it is a crash report (kept for
  /// settle()), false for anything else (the message is gone) or nothing.
  bool crashReportWaits();
  /// The worker's next message for the request waiting: the answer `fromPage` took from the
  /// doorbell page (taken), else one from the socket. False when the worker is gone or no
  /// longer trusted (ended here), or the deadline passed (ended).
  bool nextReply(Message &reply, std::optional<Message> &fromPage, Clock::time_point deadline);
  /// Reaps the process and works out `howItDied`.
  const WorkerDeath &settle();
  llvm::Error died(llvm::StringRef what, Clock::time_point deadline);

  pid_t processId;
  UniqueFd channel;
  /// Removed after the process is reaped (members go after the destructor's body).
  std::unique_ptr<WorkerCgroup> group;
  std::atomic<bool> dead{false};
  std::atomic<EndReason> endReason{EndReason::None};
  std::mutex reapMutex;
  bool reaped = false;
  int waitStatus = 0;
  std::optional<CrashReport> crash;
  WorkerDeath howItDied;
  uint64_t sequence = 0;  ///< Of the last request sent.
  uint64_t lastPhase = 0; ///< See phase().
  SharedBuffer doorbellBuffer;
  DoorbellPage *page = nullptr;
  SharedBuffer tallyBuffer;                 ///< A module worker's kernel-thread tally page.
  const KernelThreadTally *tally = nullptr; ///< In `page` or `tallyBuffer`.
  uint32_t ticket = 0;                      ///< Of the last request sent through `page`.
};

/// Starts workers, keeping `warm` of them ready. Thread-safe.
class WorkerPool {
public:
  WorkerPool(WorkerSettings settings, unsigned warm);
  ~WorkerPool();

  /// Starts one worker now and waits for it to be ready: the executor's start-up check that
  /// workers (and their sandbox) work at all.
  llvm::Error probe();

  /// A ready worker: a warm one if there is one, else one started now. Past `deadline`
  /// (when given) the wait ends with deadline_exceeded.
  llvm::Expected<std::unique_ptr<WorkerProcess>>
  take(std::optional<Clock::time_point> deadline = std::nullopt);

  /// While one lives, the pool starts no worker unless a caller of take() waits for one. A
  /// starting worker takes a core for a while (loading the compiler, its warm-up compile),
  /// and on a small machine it would take it from the work of the worker just taken: a
  /// module compiles and sets up in that one, then the pool refills.
  class RefillHold {
  public:
    explicit RefillHold(WorkerPool &pool);
    ~RefillHold();
    RefillHold(const RefillHold &) = delete;
    RefillHold &operator=(const RefillHold &) = delete;

  private:
    WorkerPool &pool;
  };

  /// Hands out no more workers: take() refuses from now on. The first step of shutdown().
  void stopTaking();
  /// Stops taking and refilling, and ends the warm workers. The workers the refiller started
  /// die with it (their parent-death signal is its thread's): end the taken ones first.
  void shutdown();

  unsigned warmCount();
  /// Worker processes running now, warm or serving a session (in every pool).
  static uint64_t live();
  /// What the kernels of this process and of every worker that shares a tally (a session's,
  /// in its doorbell page; a module's, in a page of its own) did with their kernel-thread
  /// teams: threads busy now in the workers alive, launches by whether they ran parallel in
  /// every worker so far. Each worker's own words, clamped: a worker cannot make the busy
  /// count exceed its team, but it can lie about its launches.
  static KernelThreadTotals kernelThreadTotals();
  /// False after the last attempt to start a worker failed.
  bool healthy() const { return lastStartFailed.load() == false; }
  std::string lastError();

private:
  llvm::Expected<std::unique_ptr<WorkerProcess>> start();
  void refill();

  WorkerSettings settings;
  unsigned target;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::unique_ptr<WorkerProcess>> ready;
  /// Callers of take() waiting for the refill thread: every worker is started by that one
  /// long-lived thread, because a worker dies with the thread that started it.
  unsigned waiting = 0;
  unsigned holds = 0;    ///< RefillHolds alive.
  uint64_t failures = 0; ///< Failed starts so far; wakes waiters with the error.
  bool stopping = false;
  std::string startError;
  std::atomic<bool> lastStartFailed{false};
  std::thread refiller;
};

/// The descriptor `program` is executed through, opened (O_PATH) and checked the first time:
/// a regular file that only its owner, this user or root, may change.
llvm::Expected<int> workerProgram(const std::string &program);

/// The environment a worker starts with: the C library's tunables, the sanitizers' options
/// and the TLS client files a module's host code may use; nothing else of the server's.
std::vector<std::string> workerEnvironment();

} // namespace courier::executor

#endif // COURIER_EXECUTOR_WORKERPOOL_H
