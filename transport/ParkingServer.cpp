#include "transport/ParkingServer.h"

#include "transport/ConnectionPool.h"
#include "transport/ServerStream.h"
#include "transport/SharedMemory.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace courier::transport {

namespace {

/// Bytes read ahead of what the request parser asks for (it asks for a byte at a time while
/// it reads lines).
constexpr size_t kReadAhead = 4096;

/// Waits up to `timeout` for `events` on `fd`; false on a timeout or an error.
bool await(int fd, short events, std::chrono::microseconds timeout) {
  return pollUntil(fd, events, std::chrono::steady_clock::now() + timeout) > 0;
}

} // namespace

struct ParkingServer::Connection {
  int fd = -1;
  bool refused = false;
  size_t served = 0; ///< Requests answered on it.
  std::string remoteIp, localIp;
  int remotePort = 0, localPort = 0;
  /// Bytes received and not yet parsed: a read-ahead, or a next request sent early.
  std::unique_ptr<char[]> buffer;
  size_t begin = 0, end = 0;
  Clock::time_point parkedAt;
  std::list<Connection *>::iterator parkedPos;
  /// Names it in the epoll set: an event already taken from the set may name a connection
  /// that was closed meanwhile, which is then not found.
  uint64_t id = 0;
  bool isParked = false, armed = false;
  /// Its head came too slowly or grew too long: nothing more is read from it.
  bool broken = false;
  /// Answered for the last time: its sending side is shut, and what the client still sends
  /// is read and dropped until it closes or `drainUntil`, so the last response is not lost
  /// to a reset (closing a socket with unread bytes resets the connection).
  bool draining = false;
  Clock::time_point drainUntil;

  size_t buffered() const { return end - begin; }
};

namespace {

/// cpp-httplib's view of a connection for one request: reads through the connection's
/// read-ahead, and waits for the socket only when it has nothing to give.
class ConnectionStream final : public httplib::Stream {
public:
  ConnectionStream(ParkingServer::Connection &c, std::chrono::microseconds readTimeout,
                   std::chrono::microseconds writeTimeout)
      : c(c), readTimeout(readTimeout), writeTimeout(writeTimeout) {}

  /// The request broke a rule of framing: it is answered 400, and its connection closes.
  bool refused() const { return watch.refused(); }

  bool is_readable() const override { return c.buffered() > 0 || awaitReadable(); }
  bool is_writable() const override { return await(c.fd, POLLOUT, writeTimeout); }

  ssize_t read(char *ptr, size_t size) override {
    if (size == 0)
      return 0;
    if (c.buffered() == 0) {
      if (size >= kReadAhead) {
        ssize_t got = receive(ptr, size);
        if (got > 0 && !watched(ptr, static_cast<size_t>(got)))
          return -1;
        return got;
      }
      if (!c.buffer)
        c.buffer.reset(new char[kReadAhead]);
      ssize_t got = receive(c.buffer.get(), kReadAhead);
      if (got <= 0)
        return got;
      c.begin = 0;
      c.end = static_cast<size_t>(got);
    }
    size_t n = std::min(size, c.buffered());
    std::memcpy(ptr, c.buffer.get() + c.begin, n);
    c.begin += n;
    if (!watched(ptr, n))
      return -1;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char *ptr, size_t size) override {
    while (true) {
      ssize_t sent = ::send(c.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent >= 0)
        return sent;
      if (errno == EINTR)
        continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !await(c.fd, POLLOUT, writeTimeout))
        return -1;
    }
  }

  void get_remote_ip_and_port(std::string &ip, int &port) const override {
    ip = c.remoteIp;
    port = c.remotePort;
  }
  void get_local_ip_and_port(std::string &ip, int &port) const override {
    ip = c.localIp;
    port = c.localPort;
  }
  socket_t socket() const override { return c.fd; }

private:
  /// Waits for bytes up to the read timeout, and while the request line and headers are
  /// read, no later than their deadline (past which the connection is broken).
  bool awaitReadable() const {
    std::chrono::microseconds wait = readTimeout;
    bool headLimits = false;
    if (watch.inHead()) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          watch.headDeadline() - std::chrono::steady_clock::now());
      if (left < readTimeout) {
        wait = std::max(left, std::chrono::microseconds(0));
        headLimits = true;
      }
    }
    if (await(c.fd, POLLIN, wait))
      return true;
    if (headLimits)
      c.broken = true;
    return false;
  }
  /// Shows the watch `n` bytes the parser took; false when they broke a rule (a head past
  /// kMaxHeadBytes also breaks the connection: cpp-httplib's line reader grows its line
  /// without bound).
  bool watched(const char *bytes, size_t n) {
    if (c.broken)
      return false;
    if (watch.take(bytes, n))
      return true;
    c.broken = watch.broken();
    return false;
  }

  /// One receive, waiting up to the read timeout for bytes: -1 on a timeout or an error, 0
  /// when the client closed.
  ssize_t receive(char *into, size_t size) {
    while (true) {
      ssize_t got = ::recv(c.fd, into, size, MSG_DONTWAIT);
      if (got >= 0)
        return got;
      if (errno == EINTR)
        continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !awaitReadable())
        return -1;
    }
  }

  ParkingServer::Connection &c;
  std::chrono::microseconds readTimeout, writeTimeout;
  RequestWatch watch;
};

} // namespace

ParkingServer::ParkingServer(Limits limitsIn) : limits(limitsIn) {
  // The accept loop hands each connection to process_and_close_socket at once, which only
  // parks it: nothing there waits.
  struct Inline final : httplib::TaskQueue {
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
  };
  new_task_queue = [] { return new Inline; };
  epollFd = ::epoll_create1(EPOLL_CLOEXEC);
  wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event event {};
  event.events = EPOLLIN;
  event.data.u64 = 0; // The wake-up descriptor; connections count from 1.
  if (epollFd < 0 || wakeFd < 0 || ::epoll_ctl(epollFd, EPOLL_CTL_ADD, wakeFd, &event) != 0) {
    int error = errno;
    if (epollFd >= 0)
      ::close(epollFd);
    if (wakeFd >= 0)
      ::close(wakeFd);
    throw std::system_error(error, std::generic_category(), "setting up the connection watcher");
  }
}

ParkingServer::~ParkingServer() {
  closeConnections();
  awaitThreads(); // A request thread still serving holds this object.
  if (stallWatch.joinable())
    stallWatch.join(); // It ends once `stopping` is set.
  ::close(epollFd);
  ::close(wakeFd);
}

void ParkingServer::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(wakeFd, &one, sizeof(one));
}

unsigned ParkingServer::baseThreads() {
  static const unsigned base = std::clamp(4 * std::thread::hardware_concurrency(), 8u, 64u);
  return base;
}

void ParkingServer::awaitThreads() {
  std::unique_lock<std::mutex> lock(mutex);
  ended.wait(lock, [&] { return stopping && threads == 0; });
}

size_t ParkingServer::openConnections() const {
  std::lock_guard<std::mutex> lock(mutex);
  return live.size();
}

ParkingServer::Connection *ParkingServer::find(uint64_t id) const {
  auto it = live.find(id);
  return it == live.end() ? nullptr : it->second;
}

size_t ParkingServer::threadCount() const {
  std::lock_guard<std::mutex> lock(mutex);
  return threads;
}

bool ParkingServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  socketAddress(sock, /*remote=*/true, c->remoteIp, c->remotePort);
  socketAddress(sock, /*remote=*/false, c->localIp, c->localPort);
  std::unique_lock<std::mutex> lock(mutex);
  if (stopping) {
    lock.unlock();
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  if (live.size() - refusing - drainingCount >= limits.connections) {
    if (refusing >= kMaxRefusing) {
      // Refusals are themselves at their limit: closed unanswered, which the client sees
      // at once as a reset, not as a wait.
      lock.unlock();
      ::close(sock);
      return false;
    }
    c->refused = true;
    ++refusing;
  }
  if (!stallWatch.joinable()) {
    try {
      stallWatch = std::thread([this] { watchStalls(); }); // Once the server is listening.
    } catch (const std::system_error &) {
      // No thread to be had now: the next connection tries again.
    }
  }
  Connection *raw = c.release();
  raw->id = ++lastId;
  live.emplace(raw->id, raw);
  park(raw);
  return true;
}

void ParkingServer::park(Connection *c) {
  if (c->buffer && c->buffered() == 0)
    c->buffer.reset(); // A parked connection costs its socket and this record, no buffer.
  if (stopping) {
    forget(c);
    return;
  }
  c->parkedAt = Clock::now();
  if (!arm(c, parked))
    return;
  if (idle == 0 && threads < std::min(baseThreads(), limits.threads))
    startThread(); // Nobody waits for its next request: a thread for it, up to the base.
}

bool ParkingServer::arm(Connection *c, std::list<Connection *> &list) {
  c->isParked = true;
  list.push_back(c);
  c->parkedPos = std::prev(list.end());
  struct epoll_event event {};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  event.data.u64 = c->id;
  if (::epoll_ctl(epollFd, c->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &event) != 0) {
    forget(c);
    return false;
  }
  c->armed = true;
  return true;
}

void ParkingServer::unpark(Connection *c) {
  (c->draining ? draining : parked).erase(c->parkedPos);
  c->isParked = false;
}

void ParkingServer::retire(Connection *c) {
  if (stopping) {
    forget(c);
    return;
  }
  c->buffer.reset();
  c->draining = true;
  ++drainingCount;
  if (c->refused) {
    c->refused = false; // Answered: no longer a refusal waiting.
    --refusing;
  }
  c->drainUntil = Clock::now() + kDrain;
  ::shutdown(c->fd, SHUT_WR);
  arm(c, draining);
}

bool ParkingServer::drop(Connection *c) {
  char discard[16384];
  for (int i = 0; i < 16; ++i) {
    ssize_t got = ::recv(c->fd, discard, sizeof(discard), MSG_DONTWAIT);
    if (got > 0)
      continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

void ParkingServer::forget(Connection *c) {
  if (c->isParked)
    unpark(c);
  if (c->refused)
    --refusing;
  if (c->draining)
    --drainingCount;
  live.erase(c->id);
  if (c->armed)
    ::epoll_ctl(epollFd, EPOLL_CTL_DEL, c->fd, nullptr);
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
  delete c;
}

void ParkingServer::startThread() {
  ++threads;
  try {
    std::thread([this] { runThread(); }).detach();
  } catch (const std::system_error &) {
    --threads; // No thread to be had: the others take the connections in turn.
  }
}

void ParkingServer::expire(Clock::time_point now) {
  while (!draining.empty() && draining.front()->drainUntil <= now)
    forget(draining.front());
  while (!parked.empty() && parked.front()->parkedAt + keepAlive() <= now) {
    Connection *c = parked.front();
    struct pollfd ready {
      c->fd, POLLIN | POLLRDHUP, 0
    };
    if (::poll(&ready, 1, 0) > 0) {
      // Its next request (or its close) came as it expired: a thread is being handed it.
      parked.splice(parked.end(), parked, c->parkedPos);
      c->parkedAt = now;
      continue;
    }
    forget(c);
  }
}

void ParkingServer::runThread() {
  Clock::time_point idleSince = Clock::now();
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    // Waits for the next connection with a request, or for the oldest parked one to
    // expire. Every waiting thread waits on the one epoll set; the kernel gives each event
    // to one of them. Expired connections go first, on every turn, so a busy server closes
    // them too.
    Clock::time_point now = Clock::now();
    expire(now);
    // At least once a second, so a connection parked while every thread already waited
    // expires on time.
    auto until = std::min(idleSince + kIdleLife, now + std::chrono::seconds(1));
    if (!parked.empty())
      until = std::min(until, parked.front()->parkedAt + keepAlive());
    if (!draining.empty())
      until = std::min(until, draining.front()->drainUntil);
    int timeout = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1, 0, 60000));
    ++idle;
    lock.unlock();
    struct epoll_event event {};
    int n = ::epoll_wait(epollFd, &event, 1, timeout);
    lock.lock();
    --idle;
    if (stopping)
      break;
    if (n == 1 && event.data.u64 != 0) {
      // Not found: closed since the event was taken from the set (it expired).
      Connection *c = find(event.data.u64);
      if (!c || !c->isParked)
        continue;
      unpark(c);
      if (c->draining) {
        // Bytes after its last response: dropped here, without taking a request's turn.
        lock.unlock();
        bool open = drop(c);
        lock.lock();
        if (!open || stopping || Clock::now() >= c->drainUntil)
          forget(c);
        else
          arm(c, draining);
        continue;
      }
      lastTaken = Clock::now();
      if (idle == 0)
        stalls.notify_one(); // Every thread is busy: the stall watch looks.
      lock.unlock();
      serve(c);
      lock.lock();
      idleSince = Clock::now();
      continue;
    }
    now = Clock::now();
    if (n == 0 && now >= idleSince + kIdleLife) {
      if (threads > baseThreads())
        break;
      idleSince = now; // One of the base: it stays.
    }
  }
  --threads;
  stalls.notify_all();
  ended.notify_all();
}

void ParkingServer::watchStalls() {
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    // Only while every thread is busy can a connection with a request wait for one; at the
    // limit nothing is to be done until one is idle or ends. With no thread at all (none
    // could be started), parked connections need one.
    stalls.wait(lock, [&] {
      return stopping || (threads > 0 && idle == 0 && threads < limits.threads) ||
             (threads == 0 && (!parked.empty() || !draining.empty()));
    });
    if (stopping)
      break;
    Clock::time_point seen = lastTaken;
    stalls.wait_for(lock, kStall, [&] { return stopping || idle > 0; });
    if (stopping)
      break;
    if (idle == 0 && lastTaken == seen && threads < limits.threads) {
      // No thread took a connection for kStall: each is held by a request that waits.
      // One more takes whatever request is ready; with none it waits like the others,
      // and ends after kIdleLife.
      startThread();
      lastTaken = Clock::now();
    }
  }
}

void ParkingServer::serve(Connection *c) {
  // Read only by the pre-routing handler, within a request this thread serves.
  ConnectionPool::markRefusing(c->refused);
  while (true) {
    ConnectionStream stream(
        *c, std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_),
        std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_));
    // After stop() (the listener closed) a connection takes no request after this one.
    bool closing = c->refused || ++c->served >= keep_alive_max_count_ ||
                   svr_sock_ == INVALID_SOCKET || stopping;
    bool closed = false;
    takeCloseAfterResponse();
    bool answered = process_request(stream, closing, closed, nullptr);
    bool closeAfter = takeCloseAfterResponse() || stream.refused();
    std::lock_guard<std::mutex> lock(mutex);
    if (!answered || c->broken)
      forget(c); // The client went, or broke the head's limits: closed at once.
    else if (closed || closing || closeAfter)
      retire(c);
    else if (c->buffered() > 0)
      continue; // The client sent its next request early: it is served now, in order.
    else
      park(c);
    return;
  }
}

void ParkingServer::closeConnections() {
  std::lock_guard<std::mutex> lock(mutex);
  if (stopping)
    return;
  stopping = true;
  wake(); // Stays readable: every thread waiting on the epoll set sees it.
  stalls.notify_all();
  while (!parked.empty())
    forget(parked.front());
  while (!draining.empty())
    forget(draining.front());
  // What is left is being served: its socket is shut down, so a request blocked reading or
  // writing ends, and its thread forgets it.
  for (const auto &entry : live)
    ::shutdown(entry.second->fd, SHUT_RDWR);
}

} // namespace courier::transport
