// Same-host channels: offers, the handshake on the abstract socket, and the channel threads.
#include "executor/SharedChannelServer.h"

#include "executor/HostErrors.h"
#include "transport/ErrorCode.h"
#include "transport/Log.h"
#include "transport/Metrics.h"
#include "transport/SharedChannel.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <poll.h>
#include <random>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace courier::executor {

namespace shm = transport::shm;
namespace doorbell = transport::doorbell;
using transport::ByteReader;
using transport::ByteWriter;
using transport::ErrorCode;
using transport::makeCodedError;

namespace {

/// An offer's token is good for one connection within this long.
constexpr auto kOfferLifetime = std::chrono::seconds(10);
/// Offers not yet taken; past this many, the oldest go.
constexpr size_t kMaxOffers = 256;
/// Handshakes under way at once; a connection past them is closed at once.
constexpr unsigned kMaxHandshakes = 16;
/// A client that connected has this long to present its token.
constexpr auto kHandshakeTimeout = std::chrono::seconds(2);
/// After a reply, the next request of a client launching in a loop follows within
/// microseconds: wait for it awake, briefly, before sleeping on the doorbell.
constexpr std::chrono::microseconds kAwaitRequestAwake{50};
/// How long a channel sleeps before it looks at its connection again.
constexpr std::chrono::milliseconds kSleepSlice{100};

std::string randomHex(size_t bytes) {
  std::random_device random;
  std::string out;
  for (size_t i = 0; i < bytes; ++i)
    out += llvm::utohexstr(random() & 0xff, /*LowerCase=*/true, /*Width=*/2);
  return out;
}

/// Half of `bytes`, whole pages.
uint64_t halfInPages(uint64_t bytes) {
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return std::max(page, (bytes / 2) / page * page);
}

} // namespace

struct Channel {
  std::string sessionId;
  transport::UniqueFd connection;
  transport::SharedBuffer control;
  shm::ControlPage *page = nullptr;
  uint32_t pageVersion = 1;
  std::shared_ptr<SharedRegions> regions;
  /// Version 3: what the session's workers are handed, their counts among it.
  std::shared_ptr<const DirectChannel> direct;
  std::mutex countsMutex;
  shm::WorkerCounts counted{};  ///< What was added to the metrics so far; under countsMutex.
  uint64_t answeredCounted = 0; ///< Of direct->answeredForWorkers; under countsMutex.
  int64_t reportedRunning = 0;  ///< In the core's running launches; under countsMutex.
  std::atomic<bool> ending{false};
  std::atomic<bool> finished{false};
  std::thread thread;

  void end() {
    ending = true;
    page->closed.store(1, std::memory_order_release);
    doorbell::ring(page->request);
    doorbell::ring(page->reply);
  }
};

struct SharedChannelServer::Impl {
  Impl(ExecutorCore &core, uint64_t arenaBytes) : core(core), arenaBytes(arenaBytes) {}

  ExecutorCore &core;
  uint64_t arenaBytes;
  std::string host = shm::hostIdentity();

  std::mutex mutex;
  bool stopping = false;
  std::string socketName;
  transport::UniqueFd listener, wake;
  std::thread acceptor;
  struct Offer {
    std::string sessionId;
    uint64_t bytes;
    uint32_t pageVersion;
    Clock::time_point expires;
  };
  std::map<std::string, Offer> offers;                                   ///< By token.
  std::map<std::string, std::shared_ptr<Channel>, std::less<>> channels; ///< By session.
  std::vector<std::shared_ptr<Channel>> retired; ///< Ended, their threads not yet joined.

  std::atomic<uint64_t> opened{0}, refused{0}, launches{0}, launchFailures{0};
  /// Handshakes under way, each on its own thread; stop() waits for them.
  unsigned handshakes = 0;
  std::condition_variable handshakesDone;

  llvm::Error listen();
  void accept();
  void handshake(transport::UniqueFd connection);
  /// A handshake's refusal: its code and message to the client, counted.
  void refuse(int connection, ErrorCode code, const std::string &message);
  /// The offer the client's token names (taken: a token is good once), or none (refused).
  std::optional<Offer> takeOffer(int connection);
  /// A channel for `offer`: its regions and control page, or none (refused).
  std::shared_ptr<Channel> makeChannel(int connection, const Offer &offer);
  /// The channel becomes its session's, ending the one it had; false once stopping.
  bool enlist(const std::shared_ptr<Channel> &channel);
  /// The enlisted channel's thread starts.
  void startServing(std::shared_ptr<Channel> channel, executor::Session &session);
  /// Ends a channel no thread serves: a worker handed it lets it go.
  void abandon(Channel &channel, executor::Session &session);
  void serve(Channel &channel);
  /// Once its thread is done with `channel`: no longer the session's, to be joined.
  void retire(Channel &channel);
  /// Version 3: watches the worker that answers the channel.
  void watch(Channel &channel);
  /// Whether a watched channel goes on: its session open, its client there, and a worker
  /// (the one it had, or a fresh one) answering it.
  bool stillServed(Channel &channel, Session &session);
  /// Adds what the channel's workers counted since the last call to the metrics.
  void countLaunches(Channel &channel);
  /// Version 3 for `channel`: the counts page and the socket to the worker, then the session's
  /// worker is handed the channel. False (the executor answers, version 2) if it cannot be.
  bool handToWorker(Channel &channel, SessionRef session, transport::UniqueFd &clientEnd);
  /// Runs the launch in the channel's request slot; its reply.
  std::string handle(Channel &channel);
  /// Packs results that are not in the result region there, or, larger than the region, into
  /// a buffer of their own sent on the connection; their offsets in `reply` set.
  llvm::Error packElsewhere(Channel &channel, llvm::ArrayRef<TensorView> views,
                            shm::LaunchReply &reply);
  /// Joins the threads of channels that ended; under `mutex`.
  void reap(std::vector<std::shared_ptr<Channel>> &joining);
};

llvm::Error SharedChannelServer::Impl::listen() {
  transport::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd)
    return makeCodedError(ErrorCode::Internal,
                          llvm::Twine("shared-memory socket: ") + std::strerror(errno));
  // Abstract: nothing on disk to clean up, reachable only from this network namespace.
  std::string name = "courier-shm-" + std::to_string(::getpid()) + "-" + randomHex(8);
  struct sockaddr_un address {};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  socklen_t length =
      static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr *>(&address), length) != 0 ||
      ::listen(fd.get(), 64) != 0)
    return makeCodedError(ErrorCode::Internal,
                          "binding the shared-memory socket: " + llvm::Twine(std::strerror(errno)));
  transport::UniqueFd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event)
    return makeCodedError(ErrorCode::Internal, llvm::Twine("eventfd: ") + std::strerror(errno));
  listener = std::move(fd);
  wake = std::move(event);
  socketName = "@" + name;
  acceptor = std::thread([this] { accept(); });
  return llvm::Error::success();
}

void SharedChannelServer::Impl::accept() {
  while (true) {
    struct pollfd ready[2] = {{listener.get(), POLLIN, 0}, {wake.get(), POLLIN, 0}};
    int polled = ::poll(ready, 2, -1);
    if (polled < 0 && errno != EINTR)
      return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping)
        return;
      if (polled > 0 && (ready[1].revents & POLLIN)) {
        // A channel ended: its thread is joined here, and its memory unmapped.
        uint64_t count;
        (void)!::read(wake.get(), &count, sizeof(count));
        std::vector<std::shared_ptr<Channel>> joining;
        reap(joining);
      }
    }
    if (polled <= 0 || !(ready[0].revents & POLLIN))
      continue;
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (or another passing failure): do not spin on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    transport::UniqueFd connection(fd);
    // Only this executor's user (or root) may map a session's memory.
    struct ucred peer {};
    socklen_t length = sizeof(peer);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 ||
        (peer.uid != ::geteuid() && peer.uid != 0)) {
      refused++;
      continue;
    }
    // Each handshake on a thread of its own, so a client that connects and says nothing
    // holds up no other; a bounded number at once.
    std::lock_guard<std::mutex> lock(mutex);
    if (handshakes >= kMaxHandshakes) {
      refused++;
      continue;
    }
    ++handshakes;
    std::thread([this, connection = std::move(connection)]() mutable {
      handshake(std::move(connection));
      std::lock_guard<std::mutex> lock(mutex);
      --handshakes;
      handshakesDone.notify_all();
    }).detach();
  }
}

void SharedChannelServer::Impl::refuse(int connection, ErrorCode code, const std::string &message) {
  refused++;
  ByteWriter out;
  out.u8(0).str(transport::errorCodeName(code)).str(message);
  llvm::consumeError(transport::sendMessage(connection, out.view()));
}

std::optional<SharedChannelServer::Impl::Offer>
SharedChannelServer::Impl::takeOffer(int connection) {
  transport::Message token;
  llvm::Expected<transport::ReceiveStatus> status =
      transport::receiveMessage(connection, token, 256, Clock::now() + kHandshakeTimeout);
  if (!status) {
    refuse(connection, ErrorCode::BadRequest,
           "a malformed token: " + llvm::toString(status.takeError()));
    return std::nullopt;
  }
  if (*status != transport::ReceiveStatus::Message) {
    refuse(connection, ErrorCode::BadRequest, "no token");
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto found = offers.find(token.bytes);
  if (found == offers.end() || found->second.expires < Clock::now()) {
    if (found != offers.end())
      offers.erase(found);
    refuse(connection, ErrorCode::Unauthorized, "no such offer, or it expired");
    return std::nullopt;
  }
  Offer offer = std::move(found->second);
  offers.erase(found);
  return offer;
}

std::shared_ptr<Channel> SharedChannelServer::Impl::makeChannel(int connection,
                                                                const Offer &offer) {
  auto channel = std::make_shared<Channel>();
  channel->sessionId = offer.sessionId;
  channel->pageVersion = offer.pageVersion;
  llvm::Expected<std::shared_ptr<SharedRegions>> regions =
      SharedRegions::create(halfInPages(offer.bytes), halfInPages(offer.bytes));
  llvm::Expected<transport::SharedBuffer> control =
      transport::SharedBuffer::create(sizeof(shm::ControlPage), "courier-shm-control");
  if (!regions || !control) {
    std::string why =
        !regions ? llvm::toString(regions.takeError()) : llvm::toString(control.takeError());
    if (regions)
      llvm::consumeError(control.takeError());
    refuse(connection, ErrorCode::Unavailable, "cannot make the shared memory: " + why);
    return nullptr;
  }
  if (llvm::Error error = control->sealSize()) {
    refuse(connection, ErrorCode::Unavailable, llvm::toString(std::move(error)));
    return nullptr;
  }
  channel->regions = std::move(*regions);
  channel->control = std::move(*control);
  channel->page = reinterpret_cast<shm::ControlPage *>(channel->control.data());
  return channel;
}

void SharedChannelServer::Impl::handshake(transport::UniqueFd connection) {
  std::optional<Offer> offer = takeOffer(connection.get());
  if (!offer)
    return;
  llvm::Expected<SessionRef> session = core.findSession(offer->sessionId);
  if (!session) {
    llvm::consumeError(session.takeError());
    refuse(connection.get(), ErrorCode::UnknownSession,
           "session '" + offer->sessionId + "' is not open");
    return;
  }
  std::shared_ptr<Channel> channel = makeChannel(connection.get(), *offer);
  if (!channel)
    return;
  transport::UniqueFd clientEnd;
  if (offer->pageVersion >= 3 &&
      (!core.hostsContained() || !handToWorker(*channel, *session, clientEnd)))
    channel->pageVersion = 2;
  ByteWriter grant;
  grant.u8(1).u64(channel->regions->inputs().size()).u64(channel->regions->results().size());
  std::vector<int> fds = {channel->control.fd(), channel->regions->inputs().fd(),
                          channel->regions->results().fd()};
  if (offer->pageVersion >= 3) {
    // And how many processes a launch wakes: 2 when the worker answers or the executor runs
    // kernels itself, 3 when the executor's thread answers through a worker.
    bool two = channel->pageVersion >= 3 || !core.hostsContained();
    grant.u64(channel->pageVersion).u64(two ? 2 : 3);
    if (channel->pageVersion >= 3)
      fds.push_back(clientEnd.get());
  }
  // Enlisted before the client hears of it: a launch the client makes at once, and the
  // session's close after it, find the channel (and its counts) where they look.
  if (!enlist(channel))
    return abandon(*channel, **session);
  if (llvm::Error error = transport::sendMessage(connection.get(), grant.view(), fds)) {
    llvm::consumeError(std::move(error));
    abandon(*channel, **session);
    return retire(*channel);
  }
  // A send to a client that stopped reading fails rather than holding the channel's thread.
  struct timeval patience {
    5, 0
  };
  ::setsockopt(connection.get(), SOL_SOCKET, SO_SNDTIMEO, &patience, sizeof(patience));
  channel->connection = std::move(connection);
  startServing(std::move(channel), **session);
}

bool SharedChannelServer::Impl::enlist(const std::shared_ptr<Channel> &channel) {
  std::lock_guard<std::mutex> lock(mutex);
  if (stopping)
    return false;
  // One channel per session: a client that asks again replaces its old one.
  auto &slot = channels[channel->sessionId];
  if (slot) {
    slot->end();
    retired.push_back(std::move(slot));
  }
  slot = channel;
  opened++;
  return true;
}

void SharedChannelServer::Impl::startServing(std::shared_ptr<Channel> channel,
                                             executor::Session &session) {
  std::vector<std::shared_ptr<Channel>> joining;
  std::lock_guard<std::mutex> lock(mutex);
  if (stopping) // stop() took the channel, ended it and finds no thread to join.
    return abandon(*channel, session);
  // Where it is now: still the session's, or retired by a close or a newer channel since
  // (its thread then sees it ending and finishes at once).
  channel->thread = std::thread([this, raw = channel.get()] { serve(*raw); });
  reap(joining);
}

void SharedChannelServer::Impl::abandon(Channel &channel, executor::Session &session) {
  if (channel.direct)
    core.stopDirect(session, channel.direct.get());
  channel.end();
}

void SharedChannelServer::Impl::reap(std::vector<std::shared_ptr<Channel>> &joining) {
  for (auto it = retired.begin(); it != retired.end();) {
    if ((*it)->finished.load()) {
      joining.push_back(std::move(*it));
      it = retired.erase(it);
    } else {
      ++it;
    }
  }
  // Past their last use of the lock, their threads end at once. The channels themselves go
  // with the caller's vector, after the lock is released.
  for (std::shared_ptr<Channel> &channel : joining)
    if (channel->thread.joinable())
      channel->thread.join();
}

bool SharedChannelServer::Impl::handToWorker(Channel &channel, SessionRef session,
                                             transport::UniqueFd &clientEnd) {
  auto fail = [&](const llvm::Twine &why) {
    // Ending with the executor is no news.
    transport::logEvent(core.stopping() ? transport::LogLevel::Info : transport::LogLevel::Warn,
                        ("the same-host channel of session '" + channel.sessionId +
                         "' is answered by the executor: " + why)
                            .str(),
                        {{"session", llvm::StringRef(channel.sessionId)}});
    channel.direct.reset();
    return false;
  };
  llvm::Expected<transport::SharedBuffer> counts =
      transport::SharedBuffer::create(sizeof(shm::WorkerCounts), "courier-shm-counts");
  if (!counts)
    return fail(llvm::toString(counts.takeError()));
  if (llvm::Error error = counts->sealSize())
    return fail(llvm::toString(std::move(error)));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return fail(llvm::Twine("socketpair: ") + std::strerror(errno));
  transport::UniqueFd workerEnd(pair[0]);
  clientEnd.reset(pair[1]);
  // The worker sends a result buffer only when the client has received the last one, and
  // never waits: a client that takes none holds one buffer at most.
  int small = 1;
  ::setsockopt(workerEnd.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ::fcntl(workerEnd.get(), F_SETFL, ::fcntl(workerEnd.get(), F_GETFL) | O_NONBLOCK);
  auto direct = std::make_shared<DirectChannel>();
  // Its own mapping: the session may hold the channel a moment longer than this thread.
  llvm::Expected<transport::SharedBuffer> control = transport::SharedBuffer::map(
      transport::UniqueFd(::fcntl(channel.control.fd(), F_DUPFD_CLOEXEC, 0)),
      sizeof(shm::ControlPage));
  if (!control)
    return fail(llvm::toString(control.takeError()));
  direct->control = std::move(*control);
  direct->regions = channel.regions;
  direct->counts = std::move(*counts);
  direct->workerSocket = std::move(workerEnd);
  channel.direct = direct;
  // Without waiting for a request that holds the worker (a kernel may run for minutes): the
  // client gives up on a handshake within seconds.
  llvm::Expected<bool> served = core.serveDirect(*session, direct, core.deadline(std::nullopt),
                                                 /*replace=*/true, /*wait=*/false);
  if (!served || !*served) {
    core.stopDirect(*session, direct.get());
    return fail(served ? "its worker is busy" : llvm::toString(served.takeError()));
  }
  channel.pageVersion = 3;
  return true;
}

void SharedChannelServer::Impl::countLaunches(Channel &channel) {
  if (!channel.direct)
    return;
  std::lock_guard<std::mutex> lock(channel.countsMutex);
  const shm::WorkerCounts &now = channel.direct->workerCounts();
  shm::WorkerCounts &before = channel.counted;
  // The worker runs shipped code: a count that went back is taken as it is, adding nothing.
  auto delta = [](const std::atomic<uint64_t> &current, std::atomic<uint64_t> &seen) {
    uint64_t value = current.load(std::memory_order_relaxed);
    uint64_t last = seen.exchange(value, std::memory_order_relaxed);
    return value >= last ? value - last : 0;
  };
  uint64_t started = delta(now.started, before.started);
  uint64_t failed = delta(now.failed, before.failed);
  uint64_t timed = delta(now.timed, before.timed);
  double seconds = static_cast<double>(delta(now.nanoseconds, before.nanoseconds)) * 1e-9;
  std::vector<double> buckets(transport::durationBuckets().size() + 1, 0.0);
  for (size_t i = 0; i < buckets.size(); ++i)
    buckets[i] = static_cast<double>(delta(now.buckets[i], before.buckets[i]));
  uint64_t answered = channel.direct->answeredForWorkers.load();
  uint64_t answeredBefore = std::exchange(channel.answeredCounted, answered);
  launches += started;
  launchFailures += failed + (answered - answeredBefore);
  // The launch running now, as the counts say (the worker's figures, so bounded to one).
  uint64_t begun = now.started.load(std::memory_order_acquire);
  uint64_t ended = now.finished.load(std::memory_order_acquire);
  int64_t running = channel.ending.load() ? 0 : (begun > ended ? 1 : 0);
  if (running != channel.reportedRunning) {
    core.countDirectRunning(running - channel.reportedRunning);
    channel.reportedRunning = running;
  }
  if (!timed)
    buckets.clear(); // No duration to add.
  core.countDirectLaunches(started, failed, std::move(buckets), seconds);
}

bool SharedChannelServer::Impl::stillServed(Channel &channel, Session &session) {
  if (!core.sessionOpen(session))
    return false;
  struct pollfd gone {
    channel.connection.get(), 0, 0
  };
  if (::poll(&gone, 1, 0) > 0 && (gone.revents & (POLLHUP | POLLERR)))
    return false;
  // A worker that ended (or never started) is replaced, and handed the channel. A channel
  // no worker can take, or that is no longer the session's, ends: its client goes on over
  // HTTP.
  llvm::Expected<bool> served =
      core.serveDirect(session, channel.direct, core.deadline(std::nullopt));
  if (!served) {
    // Ending with the executor is no news.
    transport::logEvent(
        core.stopping() ? transport::LogLevel::Info : transport::LogLevel::Warn,
        "the same-host channel of session '" + channel.sessionId +
            "' ends: no worker could take it: " + llvm::toString(served.takeError()),
        {{"session", llvm::StringRef(channel.sessionId)}});
    return false;
  }
  return *served;
}

void SharedChannelServer::Impl::watch(Channel &channel) {
  shm::ControlPage &page = *channel.page;
  llvm::Expected<SessionRef> found = core.findSession(channel.sessionId);
  if (!found) {
    llvm::consumeError(found.takeError());
    return;
  }
  Session &session = **found;
  // The launch the worker runs, as far as this thread has seen: one the worker counted as
  // started and not finished (which the client cannot write), or one the client rang and
  // nothing answered (which the kernel cannot write) while no HTTP request holds the worker
  // (a launch waiting behind one is not running yet; that request's deadline bounds the
  // worker meanwhile). Only a client and its kernel together could hide a running launch,
  // as a kernel's own thread left spinning after it returns could on the HTTP path.
  bool pending = false;
  uint64_t pendingKey = 0;
  int64_t pendingWorker = 0;
  Clock::time_point due;
  uint32_t lastSeen = page.request.load(std::memory_order_acquire);
  while (!channel.ending.load() && !page.closed.load(std::memory_order_acquire)) {
    Clock::time_point wake = Clock::now() + kSleepSlice;
    if (pending)
      wake = std::min(wake, due);
    // A worker that ends is settled there, and what it was running answered for.
    int64_t worker = 0;
    bool ended = core.watchDirect(session, channel.direct.get(), wake, worker);
    countLaunches(channel);
    const shm::WorkerCounts &counts = channel.direct->workerCounts();
    uint64_t started = counts.started.load(std::memory_order_acquire);
    uint32_t request = page.request.load(std::memory_order_acquire);
    bool counted = started != counts.finished.load(std::memory_order_acquire);
    bool rung = page.reply.load(std::memory_order_acquire) != request && worker &&
                !core.workerHeld(session);
    bool running = !ended && worker && (counted || rung);
    // Which launch: the worker's count while it says one runs, so that a client ringing
    // again does not restart the clock.
    uint64_t key = counted ? started : (uint64_t(1) << 63) | request;
    if (!running) {
      pending = false;
    } else if (!pending || key != pendingKey || worker != pendingWorker) {
      // A launch started since the last look: its deadline counts from now (at most a look
      // late), as an HTTP launch's counts from its arrival.
      pending = true;
      pendingKey = key;
      pendingWorker = worker;
      llvm::Expected<shm::LaunchRequest> launch =
          shm::readRequest(page, channel.regions->inputs().size());
      std::optional<std::chrono::milliseconds> asked;
      if (launch)
        asked = launch->askedDeadline();
      else
        llvm::consumeError(launch.takeError()); // The worker refuses it.
      due = core.deadline(asked);
    } else if (Clock::now() >= due) {
      core.endDirectLaunch(session, worker);
    }
    // In use: the idle reaper leaves the session alone.
    if (running || request != lastSeen) {
      lastSeen = request;
      core.touch(session);
    }
    if (!stillServed(channel, session)) {
      channel.ending = true;
      break;
    }
  }
  core.stopDirect(session, channel.direct.get());
}

void SharedChannelServer::Impl::serve(Channel &channel) {
  if (channel.pageVersion >= 3) {
    watch(channel);
    channel.end();
    countLaunches(channel); // The last counts, and no launch running any more.
    retire(channel);
    return;
  }
  shm::ControlPage &page = *channel.page;
  // A fresh page counts from 0; the client may ring before this thread runs.
  uint32_t seen = 0;
  while (!channel.ending.load()) {
    // Without isolation a launch wakes this thread and the client only: it may poll without
    // yielding for a moment, as the two ends of a version 3 channel do.
    if (!doorbell::spin(page.request, seen, kAwaitRequestAwake,
                        core.hostsContained() ? std::chrono::nanoseconds(0)
                                              : doorbell::kPauseFirst)) {
      while (page.request.load(std::memory_order_acquire) == seen && !channel.ending.load() &&
             !page.closed.load(std::memory_order_acquire)) {
        if (channel.pageVersion >= 2)
          doorbell::sleep(page.request, seen, kSleepSlice, page.executorSleeping);
        else
          doorbell::sleep(page.request, seen, kSleepSlice);
        if (page.request.load(std::memory_order_acquire) != seen)
          break;
        struct pollfd gone {
          channel.connection.get(), 0, 0
        };
        if (::poll(&gone, 1, 0) > 0 && (gone.revents & (POLLHUP | POLLERR)))
          channel.ending = true;
        // A session that expired, or went with a stop, takes its channel with it.
        if (!core.hasSession(channel.sessionId))
          channel.ending = true;
      }
    }
    if (channel.ending.load() || page.closed.load(std::memory_order_acquire))
      break;
    seen = page.request.load(std::memory_order_acquire);
    shm::answer(page, seen, handle(channel), channel.pageVersion);
  }
  // The client sees the channel closed before it rings again, and sends that launch over
  // HTTP instead.
  channel.end();
  retire(channel);
}

void SharedChannelServer::Impl::retire(Channel &channel) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = channels.find(channel.sessionId);
    if (found != channels.end() && found->second.get() == &channel) {
      retired.push_back(std::move(found->second));
      channels.erase(found);
    }
  }
  channel.finished = true;
  uint64_t one = 1;
  (void)!::write(wake.get(), &one, sizeof(one));
}

namespace {
/// The headers of a launch's results in `reply`; whether every one lies in the result
/// region (where the worker packed it), their offsets then set.
llvm::Expected<bool> describeResults(llvm::ArrayRef<TensorView> views,
                                     const transport::SharedBuffer &region,
                                     shm::LaunchReply &reply) {
  bool inRegion = true;
  for (const TensorView &view : views) {
    const char *data = static_cast<const char *>(view.data);
    transport::wire::TensorHeader t;
    t.elemSize = view.elemSize;
    t.sizes = view.sizes;
    llvm::Expected<uint64_t> size = transport::wire::packedBytes(view.elemSize, view.sizes);
    if (!size)
      return size.takeError();
    t.bytes = *size;
    if (data < region.data() || data > region.data() + region.size() ||
        static_cast<uint64_t>(region.data() + region.size() - data) < t.bytes)
      inRegion = false;
    else
      t.offset = static_cast<uint64_t>(data - region.data());
    reply.results.push_back(std::move(t));
  }
  return inRegion;
}
} // namespace

llvm::Error SharedChannelServer::Impl::packElsewhere(Channel &channel,
                                                     llvm::ArrayRef<TensorView> views,
                                                     shm::LaunchReply &reply) {
  const transport::SharedBuffer &region = channel.regions->results();
  uint64_t total = 0;
  for (transport::wire::TensorHeader &t : reply.results) {
    t.offset = shm::align(total);
    total = t.offset + t.bytes;
  }
  transport::SharedBuffer separate;
  char *base = region.data();
  if (total > region.size()) {
    llvm::Expected<transport::SharedBuffer> made =
        transport::SharedBuffer::create(total, "courier-shm-reply");
    if (!made)
      return makeCodedError(ErrorCode::PayloadTooLarge,
                            "cannot allocate " + llvm::Twine(total) +
                                " bytes for the results: " + llvm::toString(made.takeError()));
    separate = std::move(*made);
    base = separate.data();
    reply.placement = shm::Placement::SentBuffer;
  }
  for (size_t i = 0; i < reply.results.size(); ++i)
    if (reply.results[i].bytes)
      transport::wire::packInto(views[i], base + reply.results[i].offset);
  if (reply.placement != shm::Placement::SentBuffer)
    return llvm::Error::success();
  // A client that left earlier results unreceived would have this process hold every one of
  // them in the connection's queue.
  llvm::Expected<uint64_t> pending = transport::unreceivedBytes(channel.connection.get());
  if (!pending || *pending > 0) {
    if (!pending)
      llvm::consumeError(pending.takeError());
    return makeCodedError(ErrorCode::BadRequest,
                          "the client has not received the previous launch's results from the "
                          "connection");
  }
  if (llvm::Error error = separate.sealSize())
    return error;
  if (llvm::Error error = transport::sendMessage(channel.connection.get(), "R", {separate.fd()}))
    return makeCodedError(ErrorCode::Internal,
                          "sending the results: " + llvm::toString(std::move(error)));
  return llvm::Error::success();
}

std::string SharedChannelServer::Impl::handle(Channel &channel) {
  launches++;
  auto failed = [&](llvm::Error error) {
    launchFailures++;
    return shm::encodeFailure(std::move(error), ErrorCode::Internal);
  };
  SharedRegions &regions = *channel.regions;
  llvm::Expected<shm::LaunchRequest> request =
      shm::readRequest(*channel.page, regions.inputs().size());
  if (!request)
    return failed(request.takeError());
  transport::wire::LaunchRequest &launch = request->launch;
  llvm::Expected<SessionRef> session = core.findSession(channel.sessionId);
  if (!session)
    return failed(session.takeError());
  if (llvm::Error error = core.attach(**session, launch.object))
    return failed(std::move(error));
  Clock::time_point deadline = core.deadline(request->askedDeadline());
  InputArea area = core.inputAreaIn(regions, launch.inputs);
  std::vector<TensorView> inputs;
  for (const transport::wire::TensorHeader &t : launch.inputs)
    inputs.push_back(TensorView{regions.inputs().data() + t.offset, t.elemSize, t.sizes,
                                transport::wire::packedStrides(t.sizes)});
  llvm::Expected<LaunchResults> results = core.launch(**session, launch.object, launch.entry, &area,
                                                      inputs, launch.results, deadline, &regions);
  if (!results)
    return failed(results.takeError());

  // Results the worker packed into the result region are already where the client reads
  // them; others (small ones, inline; a kernel's own buffers without isolation) are packed
  // there now, or, larger than the region, into a buffer of their own.
  shm::LaunchReply reply;
  llvm::Expected<bool> inRegion = describeResults(results->views, regions.results(), reply);
  if (!inRegion)
    return failed(inRegion.takeError());
  if (!*inRegion)
    if (llvm::Error error = packElsewhere(channel, results->views, reply))
      return failed(std::move(error));
  return shm::encodeLaunchReply(reply);
}

SharedChannelServer::SharedChannelServer(ExecutorCore &core, uint64_t arenaBytes)
    : impl(std::make_unique<Impl>(core, arenaBytes)) {}

SharedChannelServer::~SharedChannelServer() { stop(); }

bool SharedChannelServer::enabled() const { return impl->arenaBytes > 0; }

llvm::Expected<SharedChannelOffer> SharedChannelServer::offer(const std::string &sessionId,
                                                              uint64_t requestedBytes,
                                                              uint32_t pageVersion) {
  if (!enabled())
    return makeCodedError(ErrorCode::NotFound,
                          "this executor runs with --shm-arena-mib 0: no shared-memory channels");
  uint64_t bytes = requestedBytes ? std::min(requestedBytes, impl->arenaBytes) : impl->arenaBytes;
  std::lock_guard<std::mutex> lock(impl->mutex);
  if (impl->stopping)
    return makeCodedError(ErrorCode::Draining, "the executor is stopping");
  if (!impl->listener)
    if (llvm::Error error = impl->listen())
      return std::move(error);
  Clock::time_point now = Clock::now();
  for (auto it = impl->offers.begin(); it != impl->offers.end();)
    it = it->second.expires < now ? impl->offers.erase(it) : std::next(it);
  if (impl->offers.size() >= kMaxOffers) {
    auto oldest = std::min_element(
        impl->offers.begin(), impl->offers.end(),
        [](const auto &a, const auto &b) { return a.second.expires < b.second.expires; });
    impl->offers.erase(oldest);
  }
  SharedChannelOffer offer;
  offer.socket = impl->socketName;
  offer.token = randomHex(16);
  offer.inputBytes = halfInPages(bytes);
  offer.resultBytes = halfInPages(bytes);
  offer.host = impl->host;
  // Without isolation a version 3 channel is granted as 2: the executor answers.
  offer.pageVersion = std::clamp<uint32_t>(pageVersion, 1, shm::kPageVersion);
  impl->offers[offer.token] =
      Impl::Offer{sessionId, bytes, offer.pageVersion, now + kOfferLifetime};
  return offer;
}

void SharedChannelServer::endSession(llvm::StringRef sessionId) {
  std::lock_guard<std::mutex> lock(impl->mutex);
  auto found = impl->channels.find(sessionId);
  if (found == impl->channels.end())
    return;
  found->second->end();
  impl->retired.push_back(std::move(found->second));
  impl->channels.erase(found);
}

void SharedChannelServer::stop() {
  std::vector<std::shared_ptr<Channel>> ending;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    if (impl->stopping && !impl->acceptor.joinable() && impl->channels.empty() &&
        impl->retired.empty())
      return;
    impl->stopping = true;
    for (auto &entry : impl->channels) {
      entry.second->end();
      ending.push_back(std::move(entry.second));
    }
    impl->channels.clear();
    for (auto &channel : impl->retired)
      ending.push_back(std::move(channel));
    impl->retired.clear();
    impl->offers.clear();
  }
  if (impl->wake) {
    uint64_t one = 1;
    (void)!::write(impl->wake.get(), &one, sizeof(one));
  }
  if (impl->acceptor.joinable())
    impl->acceptor.join();
  {
    // A handshake that finishes now finds `stopping` and grants nothing.
    std::unique_lock<std::mutex> lock(impl->mutex);
    impl->handshakesDone.wait(lock, [&] { return impl->handshakes == 0; });
  }
  for (std::shared_ptr<Channel> &channel : ending) {
    channel->end();
    if (channel->thread.joinable())
      channel->thread.join();
  }
}

void SharedChannelServer::countWorkerLaunches() {
  std::vector<std::shared_ptr<Channel>> open;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    for (auto &entry : impl->channels)
      open.push_back(entry.second);
    // Ended, their threads yet to take the last counts.
    for (auto &channel : impl->retired)
      open.push_back(channel);
  }
  for (std::shared_ptr<Channel> &channel : open)
    impl->countLaunches(*channel);
}

std::vector<prometheus::MetricFamily> SharedChannelServer::collectMetrics() {
  using prometheus::MetricType;
  using transport::singleSample;
  uint64_t open = 0;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    open = impl->channels.size();
  }
  return {
      singleSample("courier_shm_channels", "Same-host shared-memory channels open.",
                   MetricType::Gauge, static_cast<double>(open)),
      singleSample("courier_shm_channels_opened_total", "Same-host channels granted.",
                   MetricType::Counter, static_cast<double>(impl->opened.load())),
      singleSample("courier_shm_channels_refused_total",
                   "Connections to the shared-memory socket refused (a bad or expired token, a "
                   "closed session, no memory).",
                   MetricType::Counter, static_cast<double>(impl->refused.load())),
      singleSample("courier_shm_launches_total", "Launches requested over same-host channels.",
                   MetricType::Counter, static_cast<double>(impl->launches.load())),
      singleSample("courier_shm_launch_failures_total",
                   "Launches over same-host channels that failed.", MetricType::Counter,
                   static_cast<double>(impl->launchFailures.load())),
  };
}

} // namespace courier::executor
