// Starting, talking to and ending worker processes.
#include "executor/WorkerPool.h"

#include "executor/Worker.h"
#include "executor/WorkerOutput.h"
#include "transport/Wire.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <set>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace courier::executor {

using transport::ErrorCode;
using transport::makeCodedError;
namespace doorbell = transport::doorbell;

namespace {

std::atomic<uint64_t> liveWorkers{0};

/// The kernel-thread tallies of live workers (in their doorbell or tally pages), which metrics
/// sum, and what the workers gone had counted.
struct Tallies {
  std::mutex mutex;
  std::set<const KernelThreadTally *> pages;
  uint64_t parallelLaunches = 0, oneThreadLaunches = 0;
};
Tallies &tallies() {
  static Tallies *all = new Tallies; // Never destroyed: workers may outlive static teardown.
  return *all;
}

/// How long a worker may take to start, load its plugins and enter its sandbox.
constexpr auto kStartTimeout = std::chrono::seconds(20);
/// How long a worker that reported a crash may take to die of it.
constexpr auto kDyingTimeout = std::chrono::seconds(1);
/// How long a request polls for its reply before sleeping on it.
constexpr std::chrono::microseconds kAwaitReplyAwake{50};
/// How long a request sleeps on its doorbell before it looks at the socket again.
constexpr std::chrono::milliseconds kDoorbellSlice{10};

/// The code a worker reported for a request it failed, by its wire name: one of the codes a
/// worker may report, or `launch_failed` for anything else it sends (a kernel can write to the
/// channel).
ErrorCode workerCode(llvm::StringRef name) {
  static constexpr ErrorCode kWorkerCodes[] = {
      ErrorCode::UnknownEntry,      ErrorCode::UnknownSymbol,    ErrorCode::UnknownObject,
      ErrorCode::LaunchFailed,      ErrorCode::CallFailed,       ErrorCode::InvalidObject,
      ErrorCode::BadRequest,        ErrorCode::PayloadTooLarge,  ErrorCode::UnsignedObject,
      ErrorCode::SignatureMismatch, ErrorCode::WorkerUnavailable};
  std::optional<ErrorCode> code = transport::parseErrorCode(name);
  if (code && llvm::is_contained(kWorkerCodes, *code))
    return *code;
  return ErrorCode::LaunchFailed;
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status))
    return signalName(WTERMSIG(status));
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

} // namespace

uint64_t WorkerPool::live() { return liveWorkers.load(); }

KernelThreadTotals WorkerPool::kernelThreadTotals() {
  Tallies &all = tallies();
  std::lock_guard<std::mutex> lock(all.mutex);
  // This process's own: kernels it runs itself (without isolation), none otherwise.
  const KernelThreadTally &own = kernelThreadTally();
  KernelThreadTotals totals{own.busyThreads.load(std::memory_order_relaxed),
                            all.parallelLaunches + own.parallelLaunches.load(),
                            all.oneThreadLaunches + own.oneThreadLaunches.load()};
  for (const KernelThreadTally *page : all.pages) {
    const KernelThreadTally &tally = *page;
    // No team is larger than --kernel-threads allows.
    totals.busyThreads +=
        std::min<uint64_t>(tally.busyThreads.load(std::memory_order_relaxed), 1024);
    totals.parallelLaunches += tally.parallelLaunches.load(std::memory_order_relaxed);
    totals.oneThreadLaunches += tally.oneThreadLaunches.load(std::memory_order_relaxed);
  }
  return totals;
}

WorkerProcess::~WorkerProcess() {
  if (tally) {
    Tallies &all = tallies();
    std::lock_guard<std::mutex> lock(all.mutex);
    all.pages.erase(tally);
    all.parallelLaunches += tally->parallelLaunches.load(std::memory_order_relaxed);
    all.oneThreadLaunches += tally->oneThreadLaunches.load(std::memory_order_relaxed);
  }
  kill(EndReason::Closed);
  reap();
  liveWorkers--;
}

void WorkerProcess::kill(EndReason reason) {
  std::lock_guard<std::mutex> lock(reapMutex);
  if (reaped)
    return;
  EndReason none = EndReason::None;
  endReason.compare_exchange_strong(none, reason);
  dead = true;
  ::kill(processId, SIGKILL);
  if (page)
    doorbell::ring(page->reply); // A request sleeping on it looks again, and finds it dead.
}

int WorkerProcess::reap() {
  std::lock_guard<std::mutex> lock(reapMutex);
  if (reaped)
    return waitStatus;
  dead = true;
  // The channel closing does not prove the process is going (a kernel may close it and
  // spin), so make sure before waiting.
  ::kill(processId, SIGKILL);
  while (::waitpid(processId, &waitStatus, 0) < 0 && errno == EINTR) {
  }
  reaped = true;
  return waitStatus;
}

const WorkerDeath &WorkerProcess::settle() {
  int status = reap();
  switch (endReason.load()) {
  case EndReason::Deadline:
    howItDied = {"deadline", "", EndReason::Deadline};
    return howItDied;
  case EndReason::Closed:
    howItDied = {"closed", "", EndReason::Closed};
    return howItDied;
  case EndReason::Shutdown:
    howItDied = {"shutdown", "", EndReason::Shutdown};
    return howItDied;
  case EndReason::None:
    break;
  }
  // The kernel's out-of-memory killer ends a worker past its group's bound with SIGKILL.
  if (group && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && group->killedForMemory()) {
    howItDied = {"out of memory (its memory limit, counting shared memory it created; SIGKILL)",
                 "SIGKILL"};
    return howItDied;
  }
  // A report counts only if the signal it names is what ended the process: a kernel can
  // write a report of its own and carry on.
  if (crash && WIFSIGNALED(status) && WTERMSIG(status) == crash->signal)
    howItDied = {describeCrash(*crash), signalName(crash->signal)};
  else
    howItDied = {describeStatus(status), WIFSIGNALED(status) ? signalName(WTERMSIG(status)) : ""};
  return howItDied;
}

const WorkerDeath &WorkerProcess::end() {
  // A worker that reported a crash is on its way out: its own signal ends it, so that its
  // death names the crash (a report counts only beside the signal it names). One that
  // forged a report and goes on is ended here after a moment.
  takeCrashReport();
  if (crash) {
    Clock::time_point until = Clock::now() + kDyingTimeout;
    for (Clock::time_point now = Clock::now(); now < until && !closed(); now = Clock::now()) {
      struct pollfd gone {
        channel.get(), 0, 0
      };
      auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now);
      ::poll(&gone, 1, static_cast<int>(left.count()));
    }
  }
  kill(EndReason::None);
  return settle();
}

bool WorkerProcess::closed() const {
  struct pollfd gone {
    channel.get(), 0, 0
  };
  return ::poll(&gone, 1, 0) > 0 && (gone.revents & (POLLHUP | POLLERR));
}

llvm::Error WorkerProcess::died(llvm::StringRef what, Clock::time_point deadline) {
  settle();
  switch (endReason.load()) {
  case EndReason::Deadline:
    return makeCodedError(ErrorCode::DeadlineExceeded,
                          what + " ran past its deadline; its worker was ended and the session's "
                                 "next request gets a fresh one");
  case EndReason::Closed:
    return makeCodedError(ErrorCode::UnknownSession,
                          "the session was closed while " + what + " ran");
  case EndReason::Shutdown:
    return makeCodedError(ErrorCode::WorkerUnavailable,
                          "the executor is shutting down; " + what + " was ended");
  case EndReason::None:
    break;
  }
  return makeCodedError(ErrorCode::KernelCrashed,
                        "the session's worker died: " + howItDied.cause + " in " + what +
                            "; the session's next request gets a fresh worker");
}

namespace {
/// The report in a Crashed message of the fixed size; nothing for any other message.
std::optional<CrashReport> crashReportIn(const Message &message) {
  if (message.bytes.size() != 1 + sizeof(CrashReport) ||
      MessageReader(message.bytes).kind() != MessageKind::Crashed)
    return std::nullopt;
  CrashReport report;
  std::memcpy(&report, message.bytes.data() + 1, sizeof(report));
  return report;
}
} // namespace

void WorkerProcess::takeCrashReport() {
  Message message;
  while (true) {
    llvm::Expected<ReceiveStatus> status = receiveMessage(channel.get(), message, Clock::now());
    if (!status) {
      llvm::consumeError(status.takeError());
      return;
    }
    if (*status != ReceiveStatus::Message)
      return;
    if (std::optional<CrashReport> report = crashReportIn(message))
      crash = report;
  }
}

bool WorkerProcess::crashReportWaits() {
  Message message;
  llvm::Expected<ReceiveStatus> status = receiveMessage(channel.get(), message, Clock::now());
  if (!status) {
    llvm::consumeError(status.takeError());
    return false;
  }
  std::optional<CrashReport> report;
  if (*status == ReceiveStatus::Message)
    report = crashReportIn(message);
  if (!report)
    return false;
  crash = report;
  return true;
}

bool WorkerProcess::quiet() const {
  if (dead)
    return false;
  if (page && page->reply.load(std::memory_order_acquire) != ticket)
    return false;
  struct pollfd ready {
    channel.get(), POLLIN, 0
  };
  return ::poll(&ready, 1, 0) == 0;
}

llvm::Expected<SharedBuffer> WorkerProcess::sharePage(MessageKind kind, uint64_t size,
                                                      const char *name, llvm::StringRef what) {
  llvm::Expected<SharedBuffer> buffer = SharedBuffer::create(size, name);
  if (!buffer)
    return buffer.takeError();
  // The worker runs shipped code with the descriptor: a page it could shrink would kill this
  // process with SIGBUS at the next read.
  if (llvm::Error error = buffer->sealSize())
    return std::move(error);
  MessageWriter share(kind);
  llvm::Expected<Message> done = request(share, {buffer->fd()}, Clock::now() + kStartTimeout, what);
  if (!done)
    return done.takeError();
  return std::move(*buffer);
}

llvm::Error WorkerProcess::shareDoorbell() {
  llvm::Expected<SharedBuffer> buffer = sharePage(MessageKind::Doorbell, sizeof(DoorbellPage),
                                                  "courier-doorbell", "sharing a doorbell page");
  if (!buffer)
    return buffer.takeError();
  doorbellBuffer = std::move(*buffer);
  page = reinterpret_cast<DoorbellPage *>(doorbellBuffer.data());
  addTally(&page->kernelThreads);
  return llvm::Error::success();
}

llvm::Error WorkerProcess::shareKernelTally() {
  llvm::Expected<SharedBuffer> buffer =
      sharePage(MessageKind::KernelTally, sizeof(KernelThreadTally), "courier-kernel-tally",
                "sharing a kernel-thread tally page");
  if (!buffer)
    return buffer.takeError();
  tallyBuffer = std::move(*buffer);
  addTally(reinterpret_cast<const KernelThreadTally *>(tallyBuffer.data()));
  return llvm::Error::success();
}

void WorkerProcess::addTally(const KernelThreadTally *shared) {
  tally = shared;
  Tallies &all = tallies();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.pages.insert(shared);
}

llvm::Expected<std::optional<Message>> WorkerProcess::ringDoorbell(Clock::time_point deadline,
                                                                   llvm::StringRef what,
                                                                   llvm::ArrayRef<int> fds,
                                                                   const std::string &bytes) {
  bool inSlot = fds.empty() && bytes.size() <= kMaxMessageBytes;
  if (inSlot) {
    std::memcpy(page->requestSlot, bytes.data(), bytes.size());
  } else if (llvm::Error error = sendMessage(channel.get(), bytes, fds)) {
    llvm::consumeError(std::move(error));
    return died(what, deadline);
  }
  page->requestBytes.store(inSlot ? static_cast<uint32_t>(bytes.size()) : 0,
                           std::memory_order_release);
  uint32_t before = page->reply.load(std::memory_order_acquire);
  doorbell::set(page->request, ++ticket, page->requestSleeping);
  // A small kernel answers within microseconds: wait for it awake, briefly. Then sleep in
  // slices, looking at the socket between them for a death the crash reporter could not
  // announce (SIGKILL).
  if (!doorbell::spin(page->reply, before, kAwaitReplyAwake)) {
    while (page->reply.load(std::memory_order_acquire) == before) {
      Clock::time_point now = Clock::now();
      if (now >= deadline || dead)
        return std::nullopt; // The socket receive that follows sees the deadline or death.
      doorbell::sleep(page->reply, before,
                      std::min<Clock::duration>(deadline - now, kDoorbellSlice),
                      page->replySleeping);
      if (page->reply.load(std::memory_order_acquire) != before)
        break;
      struct pollfd ready {
        channel.get(), POLLIN, 0
      };
      if (::poll(&ready, 1, 0) != 0)
        return std::nullopt;
    }
  }
  if (page->reply.load(std::memory_order_acquire) != ticket)
    return std::nullopt;
  uint32_t size = page->replyBytes.load(std::memory_order_acquire);
  if (size == 0)
    return std::nullopt;
  if (size > kMaxMessageBytes) {
    kill(EndReason::None);
    return died(what, deadline);
  }
  // Copied once: the worker can go on writing the page.
  Message reply;
  reply.bytes.assign(page->replySlot, size);
  return std::optional<Message>(std::move(reply));
}

bool WorkerProcess::nextReply(Message &reply, std::optional<Message> &fromPage,
                              Clock::time_point deadline) {
  if (fromPage) {
    reply = std::move(*fromPage);
    fromPage.reset();
    // The worker answers on one path at a time: anything on the socket beside an answer in
    // the page was written by the kernel, out of turn (a forged reply), except a crash
    // report: a kernel that crashed after the answer (one the worker took from its same-host
    // channel, or a thread an earlier launch left running). The answer stands, and the
    // worker's end is settled by whoever looks at it next.
    struct pollfd waiting {
      channel.get(), POLLIN, 0
    };
    if (::poll(&waiting, 1, 0) != 0 && !crashReportWaits()) {
      kill(EndReason::None);
      return false;
    }
    return true;
  }
  // A small kernel answers within microseconds: wait for it awake, briefly.
  llvm::Expected<ReceiveStatus> status = receiveMessage(
      channel.get(), reply, deadline, page ? std::chrono::microseconds(0) : kAwaitReplyAwake);
  if (!status) {
    // Only the worker's end can make a receive fail (an oversized or broken message).
    llvm::consumeError(status.takeError());
    kill(EndReason::None);
    return false;
  }
  if (*status == ReceiveStatus::TimedOut) {
    // Past the deadline, unless the worker already reported a crash and is on its way out.
    kill(crash ? EndReason::None : EndReason::Deadline);
    return false;
  }
  return *status != ReceiveStatus::Closed;
}

llvm::Expected<Message> WorkerProcess::request(MessageWriter &message, llvm::ArrayRef<int> fds,
                                               Clock::time_point deadline, llvm::StringRef what) {
  if (dead)
    return died(what, deadline);
  message.u64(++sequence);
  lastPhase = 0;
  std::optional<Message> fromPage;
  if (page) {
    llvm::Expected<std::optional<Message>> rung = ringDoorbell(deadline, what, fds, message.view());
    if (!rung)
      return rung.takeError();
    fromPage = std::move(*rung);
  } else if (llvm::Error error = sendMessage(channel.get(), message.view(), fds)) {
    llvm::consumeError(std::move(error));
    return died(what, deadline);
  }
  Message reply;
  while (true) {
    if (!nextReply(reply, fromPage, deadline))
      return died(what, deadline);
    MessageReader peek(reply.bytes);
    if (peek.kind() == MessageKind::Done || peek.kind() == MessageKind::Failed ||
        peek.kind() == MessageKind::Progress) {
      // An answer to another request (or to none) is a kernel writing to the channel.
      std::optional<uint64_t> answered = takeSequence(reply.bytes);
      if (!answered || *answered != sequence) {
        kill(EndReason::None);
        return died(what, deadline);
      }
    }
    MessageReader reader(reply.bytes);
    switch (reader.kind()) {
    case MessageKind::Done:
      return std::move(reply);
    case MessageKind::Failed: {
      std::string code = reader.str().str();
      std::string message = reader.str().str();
      if (!reader.ok())
        break;
      return makeCodedError(workerCode(code), message);
    }
    case MessageKind::Progress: {
      uint64_t reached = reader.u64();
      if (!reader.atEnd())
        break;
      lastPhase = reached;
      continue;
    }
    case MessageKind::Crashed:
      if (std::optional<CrashReport> report = crashReportIn(reply))
        crash = report;
      // The process is on its way out; wait for the channel to close, briefly.
      deadline = std::min(deadline, Clock::now() + kDyingTimeout);
      continue;
    default:
      break;
    }
    // Anything else breaks the protocol: the worker cannot be trusted any more.
    kill(EndReason::None);
    return died(what, deadline);
  }
}

WorkerPool::WorkerPool(WorkerSettings settingsIn, unsigned warm)
    : settings(std::move(settingsIn)), target(warm) {
  refiller = std::thread([this] { refill(); });
}

WorkerPool::~WorkerPool() { shutdown(); }

WorkerPool::RefillHold::RefillHold(WorkerPool &pool) : pool(pool) {
  std::lock_guard<std::mutex> lock(pool.mutex);
  ++pool.holds;
}

WorkerPool::RefillHold::~RefillHold() {
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    --pool.holds;
  }
  pool.changed.notify_all();
}

void WorkerPool::stopTaking() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  changed.notify_all();
}

void WorkerPool::shutdown() {
  stopTaking();
  std::deque<std::unique_ptr<WorkerProcess>> ending;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ending.swap(ready);
  }
  if (refiller.joinable() && refiller.get_id() != std::this_thread::get_id())
    refiller.join();
  ending.clear();
}

unsigned WorkerPool::warmCount() {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<unsigned>(ready.size());
}

std::string WorkerPool::lastError() {
  std::lock_guard<std::mutex> lock(mutex);
  return startError;
}

llvm::Error WorkerPool::probe() {
  llvm::Expected<std::unique_ptr<WorkerProcess>> worker = take();
  if (!worker)
    return worker.takeError();
  std::lock_guard<std::mutex> lock(mutex);
  // Still a good worker: keep it warm.
  ready.push_back(std::move(*worker));
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<WorkerProcess>>
WorkerPool::take(std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    uint64_t failuresBefore = failures;
    ++waiting;
    changed.notify_all();
    auto wake = [&] { return stopping || !ready.empty() || failures != failuresBefore; };
    bool woken = true;
    if (deadline)
      woken = changed.wait_until(lock, *deadline, wake);
    else
      changed.wait(lock, wake);
    --waiting;
    if (!woken)
      return makeCodedError(ErrorCode::DeadlineExceeded,
                            "no worker became ready before the deadline");
    if (stopping)
      return makeCodedError(ErrorCode::WorkerUnavailable, "the executor is shutting down");
    if (ready.empty())
      return makeCodedError(ErrorCode::WorkerUnavailable,
                            "cannot start a worker process: " + startError);
    std::unique_ptr<WorkerProcess> worker = std::move(ready.front());
    ready.pop_front();
    changed.notify_all();
    // A warm worker may have died while it waited (killed from outside, out of memory).
    if (worker->quiet())
      return std::move(worker);
    lock.unlock();
    worker.reset();
    lock.lock();
  }
}

void WorkerPool::refill() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    changed.wait(lock, [&] {
      return stopping || (ready.size() < target + waiting && (holds == 0 || waiting > 0));
    });
    if (stopping)
      return;
    lock.unlock();
    llvm::Expected<std::unique_ptr<WorkerProcess>> worker = start();
    lock.lock();
    if (worker) {
      lastStartFailed = false;
      ready.push_back(std::move(*worker));
      changed.notify_all();
      continue;
    }
    startError = llvm::toString(worker.takeError());
    lastStartFailed = true;
    ++failures;
    changed.notify_all();
    // Do not spin on a start that keeps failing; waiters have been told.
    changed.wait_for(lock, std::chrono::seconds(1), [&] { return stopping; });
  }
}

llvm::Expected<std::unique_ptr<WorkerProcess>> WorkerPool::start() {
  std::vector<std::string> args = {"--parent", std::to_string(::getpid())};
  for (const std::string &plugin : settings.plugins) {
    args.push_back("--plugin");
    args.push_back(plugin);
  }
  if (settings.memoryMiB) {
    args.push_back("--memory-mib");
    args.push_back(std::to_string(settings.memoryMiB));
  }
  if (settings.cpuSeconds) {
    args.push_back("--cpu-seconds");
    args.push_back(std::to_string(settings.cpuSeconds));
  }
  if (settings.kernelThreads) {
    args.push_back("--kernel-threads");
    args.push_back(std::to_string(settings.kernelThreads));
  }
  if (!settings.sandbox)
    args.push_back("--no-sandbox");
  if (settings.allowUnsignedObjects)
    args.push_back("--allow-unsigned-objects");
  args.insert(args.end(), settings.extraArguments.begin(), settings.extraArguments.end());
  llvm::Expected<std::unique_ptr<WorkerProcess>> worker =
      WorkerProcess::spawn(settings.program, args, settings.memoryMiB << 20, settings.extraThreads);
  if (!worker)
    return worker;
  if (settings.doorbell) {
    if (llvm::Error error = (*worker)->shareDoorbell())
      return std::move(error);
  } else if (settings.kernelTally) {
    if (llvm::Error error = (*worker)->shareKernelTally())
      return std::move(error);
  }
  return worker;
}

namespace {
/// Starts the worker program's `image` (a descriptor) with `channel` as its channel, its
/// output on `output` (or this process's stderr, for -1), nothing on its stdin, and its
/// signals as a fresh process has them.
llvm::Expected<pid_t> startImage(const std::string &program, int image, int channel, int output,
                                 char *const *argv, char *const *envp) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, channel, kWorkerChannelFd);
  // Kept open across the exec (a dup2 onto itself clears close-on-exec): an interpreter that
  // runs a script worker opens the script by the path it was executed by, which names it.
  // A worker closes every descriptor above its channel first thing.
  posix_spawn_file_actions_adddup2(&actions, image, image);
  // Nothing to read, and no terminal to push input into (TIOCSTI).
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (output >= 0) {
    posix_spawn_file_actions_adddup2(&actions, output, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, output, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  // The executor blocks its stop signals for its signal thread; a worker starts clean.
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // posix_spawn takes a path: this one names the descriptor, whatever is now at `program`
  // (it lies above the descriptors placed above, so no action replaces it).
  std::string imagePath = "/proc/self/fd/" + std::to_string(image);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, imagePath.c_str(), &actions, &attributes, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0)
    return llvm::createStringError(
        llvm::formatv("starting {0}: {1}", program, std::strerror(rc)).str());
  return pid;
}
} // namespace

llvm::Expected<std::unique_ptr<WorkerProcess>>
WorkerProcess::spawn(const std::string &program, const std::vector<std::string> &argsIn,
                     uint64_t memoryBytes, uint64_t extraThreads) {
  llvm::Expected<int> image = workerProgram(program);
  if (!image)
    return image.takeError();
  std::vector<std::string> environment = workerEnvironment();
  std::vector<char *> envp;
  for (std::string &variable : environment)
    envp.push_back(variable.data());
  envp.push_back(nullptr);

  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0)
    return llvm::createStringError(llvm::Twine("socketpair: ") + std::strerror(errno));
  UniqueFd mine(ends[0]), theirs(ends[1]);

  std::vector<std::string> args = {program};
  args.insert(args.end(), argsIn.begin(), argsIn.end());
  std::vector<char *> argv;
  for (std::string &arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);

  // A kernel's output goes to the executor's log: through a pipe the relay reads line by
  // line when the log has a format of its own (executor/WorkerOutput.h), else as it is.
  UniqueFd outputRead, outputWrite;
  if (workerOutputRelayed()) {
    int output[2];
    if (::pipe2(output, O_CLOEXEC) != 0)
      return llvm::createStringError(llvm::Twine("pipe: ") + std::strerror(errno));
    outputRead = UniqueFd(output[0]);
    outputWrite = UniqueFd(output[1]);
    ::fcntl(outputRead.get(), F_SETFL, O_NONBLOCK);
  }

  llvm::Expected<pid_t> pid =
      startImage(program, *image, theirs.get(), outputWrite.get(), argv.data(), envp.data());
  if (!pid)
    return pid.takeError();
  theirs.reset();
  outputWrite.reset();
  if (outputRead.get() >= 0)
    relayWorkerOutput(*pid, outputRead.release());
  liveWorkers++;
  std::unique_ptr<WorkerProcess> worker(new WorkerProcess(*pid, std::move(mine)));
  // Before the worker says it is ready it has run only its own code: nothing it maps to start
  // escapes the group, and no module or kernel runs before the bounds are set below.
  worker->group = WorkerCgroup::adopt(*pid);

  Message hello;
  llvm::Expected<ReceiveStatus> status =
      receiveMessage(worker->channel.get(), hello, Clock::now() + kStartTimeout);
  if (!status)
    return status.takeError();
  MessageReader reader(hello.bytes);
  if (*status == ReceiveStatus::Message && reader.kind() == MessageKind::Ready) {
    if (llvm::Error error = checkReady(reader, program))
      return std::move(error);
    if (worker->group)
      if (llvm::Error error = worker->group->limit(memoryBytes, extraThreads))
        return std::move(error);
    return std::move(worker);
  }
  if (*status == ReceiveStatus::Message && reader.kind() == MessageKind::Failed) {
    reader.str();
    return llvm::createStringError(reader.str().str());
  }
  if (*status == ReceiveStatus::TimedOut)
    return llvm::createStringError(
        llvm::formatv("{0} did not become ready within {1} s", program,
                      std::chrono::duration_cast<std::chrono::seconds>(kStartTimeout).count())
            .str());
  return llvm::createStringError(program + " " + describeStatus(worker->reap()) +
                                 " while starting");
}

llvm::Expected<int> workerProgram(const std::string &program) {
  static std::mutex mutex;
  static std::map<std::string, int> opened;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = opened.find(program); found != opened.end())
    return found->second;
  int first = ::open(program.c_str(), O_PATH | O_CLOEXEC);
  // Above the descriptors a worker's are placed at (0 to kWorkerChannelFd), which a spawn
  // would replace before it executes this one.
  int fd = first < 0 ? -1 : ::fcntl(first, F_DUPFD_CLOEXEC, kWorkerChannelFd + 1);
  int error = errno;
  if (first >= 0)
    ::close(first);
  if (fd < 0)
    return llvm::createStringError(
        llvm::formatv("starting {0}: {1}", program, std::strerror(error)).str());
  struct stat info;
  std::string refused;
  if (::fstat(fd, &info) != 0)
    refused = std::strerror(errno);
  else if (!S_ISREG(info.st_mode))
    refused = "not a regular file";
  else if ((info.st_mode & S_IXUSR) == 0)
    refused = "not executable";
  else if (info.st_mode & (S_IWGRP | S_IWOTH))
    refused = "others may write to it";
  else if (info.st_uid != 0 && info.st_uid != ::geteuid())
    refused = "owned by another user (uid " + std::to_string(info.st_uid) + ")";
  if (!refused.empty()) {
    ::close(fd);
    return llvm::createStringError(
        llvm::formatv("refusing the worker program {0}: {1}", program, refused).str());
  }
  opened[program] = fd;
  return fd;
}

std::vector<std::string> workerEnvironment() {
  static const llvm::StringRef kept[] = {"GLIBC_TUNABLES",        "ASAN_OPTIONS",
                                         "UBSAN_OPTIONS",         "LSAN_OPTIONS",
                                         "COURIER_TLS_CA",        "COURIER_TLS_CLIENT_CERT",
                                         "COURIER_TLS_CLIENT_KEY"};
  std::vector<std::string> environment;
  for (char **variable = environ; *variable; ++variable) {
    llvm::StringRef name = llvm::StringRef(*variable).split('=').first;
    if (llvm::is_contained(kept, name))
      environment.emplace_back(*variable);
  }
  return environment;
}

} // namespace courier::executor
