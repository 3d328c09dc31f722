#include "transport/ParkingServer.h"

#include "transport/ConnectionPool.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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

/// Set while a request is served when its response says "Connection: close".
thread_local bool closeAfter = false;

/// Bytes read ahead of what the request parser asks for (it asks for a byte at a time while
/// it reads lines).
constexpr size_t kReadAhead = 4096;

void addressOf(const sockaddr_storage &address, socklen_t length, std::string &ip, int &port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET && length >= sizeof(sockaddr_in)) {
    const auto &v4 = reinterpret_cast<const sockaddr_in &>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    const auto &v6 = reinterpret_cast<const sockaddr_in6 &>(address);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  } else {
    port = 0; // A unix socket: no address to give.
  }
  ip = text;
}

/// Waits up to `timeout` for `events` on `fd`; false on a timeout or an error.
bool await(int fd, short events, std::chrono::microseconds timeout) {
  struct pollfd ready {
    fd, events, 0
  };
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    int polled = ::poll(&ready, 1, static_cast<int>(std::max<int64_t>(0, left.count() + 1)));
    if (polled > 0)
      return true;
    if (polled == 0 || errno != EINTR)
      return false;
  }
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
  std::list<Connection *>::iterator parkedPos, livePos;
  bool isParked = false, armed = false;

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

  bool is_readable() const override { return c.buffered() > 0 || await(c.fd, POLLIN, readTimeout); }
  bool is_writable() const override { return await(c.fd, POLLOUT, writeTimeout); }

  ssize_t read(char *ptr, size_t size) override {
    if (size == 0)
      return 0;
    if (c.buffered() == 0) {
      if (size >= kReadAhead)
        return receive(ptr, size);
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
  /// One receive, waiting up to the read timeout for bytes: -1 on a timeout or an error, 0
  /// when the client closed.
  ssize_t receive(char *into, size_t size) {
    while (true) {
      ssize_t got = ::recv(c.fd, into, size, MSG_DONTWAIT);
      if (got >= 0)
        return got;
      if (errno == EINTR)
        continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !await(c.fd, POLLIN, readTimeout))
        return -1;
    }
  }

  ParkingServer::Connection &c;
  std::chrono::microseconds readTimeout, writeTimeout;
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
  if (epollFd < 0 || wakeFd < 0)
    throw std::system_error(errno, std::generic_category(), "setting up the connection watcher");
  struct epoll_event event {};
  event.events = EPOLLIN;
  event.data.ptr = nullptr; // The wake-up descriptor.
  ::epoll_ctl(epollFd, EPOLL_CTL_ADD, wakeFd, &event);
}

ParkingServer::~ParkingServer() {
  closeConnections();
  awaitThreads(); // A request thread still serving holds this object.
  ::close(epollFd);
  ::close(wakeFd);
}

void ParkingServer::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(wakeFd, &one, sizeof(one));
}

void ParkingServer::closeAfterResponse() { closeAfter = true; }

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

size_t ParkingServer::threadCount() const {
  std::lock_guard<std::mutex> lock(mutex);
  return threads;
}

bool ParkingServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(sock, reinterpret_cast<sockaddr *>(&address), &length) == 0)
    addressOf(address, length, c->remoteIp, c->remotePort);
  length = sizeof(address);
  if (::getsockname(sock, reinterpret_cast<sockaddr *>(&address), &length) == 0)
    addressOf(address, length, c->localIp, c->localPort);
  std::unique_lock<std::mutex> lock(mutex);
  if (stopping) {
    lock.unlock();
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  if (live.size() >= limits.connections) {
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
  if (!stallWatch.joinable())
    stallWatch = std::thread([this] { watchStalls(); }); // Once the server is listening.
  Connection *raw = c.release();
  live.push_front(raw);
  raw->livePos = live.begin();
  lock.unlock();
  park(raw);
  return true;
}

void ParkingServer::park(Connection *c) {
  if (c->buffer && c->buffered() == 0)
    c->buffer.reset(); // A parked connection costs its socket and this record, no buffer.
  std::lock_guard<std::mutex> lock(mutex);
  if (stopping) {
    forget(c);
    return;
  }
  c->isParked = true;
  c->parkedAt = Clock::now();
  parked.push_back(c);
  c->parkedPos = std::prev(parked.end());
  struct epoll_event event {};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  event.data.ptr = c;
  if (::epoll_ctl(epollFd, c->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &event) != 0) {
    forget(c);
    return;
  }
  c->armed = true;
  if (idle == 0 && threads < std::min(baseThreads(), limits.threads))
    startThread(); // Nobody waits for its next request: a thread for it, up to the base.
}

void ParkingServer::forget(Connection *c) {
  if (c->isParked) {
    parked.erase(c->parkedPos);
    c->isParked = false;
  }
  if (c->refused)
    --refusing;
  live.erase(c->livePos);
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

void ParkingServer::runThread() {
  Clock::time_point idleSince = Clock::now();
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    // Waits for the next connection with a request, or for the oldest parked one to
    // expire. Every waiting thread waits on the one epoll set; the kernel gives each event
    // to one of them.
    Clock::time_point now = Clock::now();
    // At least once a second, so a connection parked while every thread already waited
    // expires on time.
    auto until = std::min(idleSince + kIdleLife, now + std::chrono::seconds(1));
    if (!parked.empty())
      until = std::min(until, parked.front()->parkedAt + keepAlive());
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
    now = Clock::now();
    if (n == 1 && event.data.ptr) {
      auto *c = static_cast<Connection *>(event.data.ptr);
      if (!c->isParked)
        continue;
      parked.erase(c->parkedPos);
      c->isParked = false;
      lastTaken = now;
      if (idle == 0)
        stalls.notify_one(); // Every thread is busy: the stall watch looks.
      lock.unlock();
      serve(c);
      lock.lock();
      idleSince = Clock::now();
      continue;
    }
    while (!parked.empty() && parked.front()->parkedAt + keepAlive() <= now)
      forget(parked.front());
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
    // Only while every thread is busy can a connection with a request wait for one.
    stalls.wait(lock, [&] { return stopping || (threads > 0 && idle == 0); });
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
  ConnectionPool::markRefusing(c->refused);
  while (true) {
    ConnectionStream stream(
        *c, std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_),
        std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_));
    // After stop() (the listener closed) a connection takes no request after this one.
    bool closing =
        c->refused || ++c->served >= keep_alive_max_count_ || svr_sock_ == INVALID_SOCKET;
    {
      std::lock_guard<std::mutex> lock(mutex);
      closing = closing || stopping;
    }
    bool closed = false;
    closeAfter = false;
    bool answered = process_request(stream, closing, closed, nullptr);
    if (!answered || closed || closing || closeAfter)
      break;
    if (c->buffered() > 0)
      continue; // The client sent its next request early: it is served now, in order.
    ConnectionPool::markRefusing(false);
    park(c);
    return;
  }
  ConnectionPool::markRefusing(false);
  std::lock_guard<std::mutex> lock(mutex);
  forget(c);
}

void ParkingServer::closeConnections() {
  std::unique_lock<std::mutex> lock(mutex);
  if (closed)
    return;
  closed = true;
  stopping = true;
  wake(); // Stays readable: every thread waiting on the epoll set sees it.
  stalls.notify_all();
  while (!parked.empty())
    forget(parked.front());
  // What is left is being served: its socket is shut down, so a request blocked reading or
  // writing ends, and its thread forgets it.
  for (Connection *c : live)
    ::shutdown(c->fd, SHUT_RDWR);
  lock.unlock();
  if (stallWatch.joinable())
    stallWatch.join();
}

} // namespace courier::transport
