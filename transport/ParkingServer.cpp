#include "transport/ParkingServer.h"

#include "transport/ServerStream.h"
#include "transport/SharedMemory.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

namespace courier::transport {

namespace {

/// Bytes read ahead of what the request parser asks for (it asks for a byte at a time while
/// it reads lines), and the first size of a connection's buffer.
constexpr size_t kReadAhead = 4096;
/// A connection's buffer grows to hold a whole head, and no further: past it the parser is
/// handed what came, and the head's limit refuses it.
constexpr size_t kMaxBuffer = kMaxHeadBytes + kReadAhead;

/// Waits up to `timeout` for `events` on `fd`; false on a timeout or an error.
bool await(int fd, short events, std::chrono::microseconds timeout) {
  return pollUntil(fd, events, std::chrono::steady_clock::now() + timeout) > 0;
}

/// Whether `fd` has bytes (or a close) waiting, without waiting.
bool readableNow(int fd) {
  struct pollfd ready {
    fd, POLLIN | POLLRDHUP, 0
  };
  return ::poll(&ready, 1, 0) > 0;
}

/// Waits for what `error` (SSL_get_error) says the connection needs, up to `timeout`; false on
/// a timeout, an error, or a failure that waiting does not mend.
bool awaitTls(int fd, int error, std::chrono::microseconds timeout) {
  if (error == SSL_ERROR_WANT_READ)
    return await(fd, POLLIN, timeout);
  if (error == SSL_ERROR_WANT_WRITE)
    return await(fd, POLLOUT, timeout);
  return false;
}

/// Whether the peer of a readable `fd` has closed it with nothing left to read: a connection
/// that only waits for its own end.
bool closedByPeer(int fd) {
  char byte;
  ssize_t got = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got == 0;
}

/// What a peer's connections are counted under: its address, or a unix-socket peer's uid.
std::string peerKey(int fd, const std::string &remoteIp) {
  if (!remoteIp.empty())
    return remoteIp;
  struct ucred credentials {};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0)
    return "uid:" + std::to_string(credentials.uid);
  return "unknown";
}

} // namespace

struct ParkingServer::Connection {
  int fd = -1;
  SSL *ssl = nullptr; ///< With TLS.
  size_t served = 0;  ///< Requests answered on it.
  std::string remoteIp, localIp;
  int remotePort = 0, localPort = 0;
  /// Under its peer's count (ParkingServer::perPeer), with `peer` its key.
  bool counted = false;
  std::string peer;
  /// Refused, waiting for its handshake to end before its 503 is sent.
  bool refused = false;
  Refusal reason = Refusal::Overloaded;
  /// Bytes received and not yet parsed: a head read as it came, a read-ahead, or a next
  /// request sent early. `scanned` marks how far the head's end was looked for.
  std::unique_ptr<char[]> buffer;
  size_t capacity = 0, begin = 0, end = 0, scanned = 0;
  /// The set it is parked in (none while a thread has it), and its place there.
  ParkedSet *set = nullptr;
  Clock::time_point since;
  Clock::time_point acceptedAt, headStart;
  bool inHead = false;          ///< A head is partly received.
  bool requestLineDone = false; ///< Of the head being looked at, by headEnds().
  /// Names it in the epoll set: an event already taken from the set may name a connection
  /// that was closed meanwhile, which is then not found.
  uint64_t id = 0;
  bool armed = false;
  /// Its head came too slowly or grew too long: nothing more is read from it.
  bool broken = false;
  /// Answered for the last time: its sending side is shut, and what the client still sends
  /// is read and dropped until it closes or kDrain passes, so the last response is not lost
  /// to a reset (closing a socket with unread bytes resets the connection).
  bool draining = false;

  size_t buffered() const { return end - begin; }
  /// Room for at least `want` bytes after `end` (less once the buffer is at kMaxBuffer).
  void makeRoom(size_t want) {
    if (begin == end)
      begin = end = scanned = 0;
    if (capacity - end >= want)
      return;
    if (begin > 0) {
      std::memmove(buffer.get(), buffer.get() + begin, end - begin);
      end -= begin;
      scanned = scanned > begin ? scanned - begin : 0;
      begin = 0;
      if (capacity - end >= want)
        return;
    }
    size_t grown = std::min(kMaxBuffer, std::max({kReadAhead, 2 * capacity, end + want}));
    if (grown <= capacity)
      return;
    std::unique_ptr<char[]> larger(new char[grown]);
    if (end > 0)
      std::memcpy(larger.get(), buffer.get(), end);
    buffer = std::move(larger);
    capacity = grown;
  }
  /// Whether the buffer holds the end of a head: its empty line, or a header line ending in
  /// a bare LF (which the parser refuses at once rather than waiting for more).
  bool headEnds() {
    const char *bytes = buffer.get();
    for (size_t i = std::max(begin, scanned); i < end; ++i) {
      if (bytes[i] != '\n')
        continue;
      if (!requestLineDone) {
        requestLineDone = true;
        if (i - begin <= 1)
          return true; // No request line: the parser refuses it.
        continue;
      }
      if (bytes[i - 1] != '\r' || bytes[i - 2] == '\n')
        return true;
    }
    scanned = end;
    return false;
  }
  void releaseBuffer() {
    buffer.reset();
    capacity = begin = end = scanned = 0;
  }
};

namespace {

/// cpp-httplib's view of a connection for one request: reads through the connection's
/// buffer, and waits for the socket only when it has nothing to give; with TLS, through its
/// SSL object on the non-blocking socket.
class ConnectionStream final : public httplib::Stream {
public:
  ConnectionStream(ParkingServer::Connection &c, std::chrono::microseconds readTimeout,
                   std::chrono::microseconds writeTimeout)
      : c(c), readTimeout(readTimeout), writeTimeout(writeTimeout) {}

  /// The request broke a rule of framing: it is answered 400, and its connection closes.
  bool refused() const { return watch.refused(); }

  bool is_readable() const override {
    return c.buffered() > 0 || (c.ssl && SSL_pending(c.ssl) > 0) || awaitReadable();
  }
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
      c.makeRoom(kReadAhead);
      ssize_t got = receive(c.buffer.get() + c.end, c.capacity - c.end);
      if (got <= 0)
        return got;
      c.end += static_cast<size_t>(got);
    }
    size_t n = std::min(size, c.buffered());
    std::memcpy(ptr, c.buffer.get() + c.begin, n);
    c.begin += n;
    if (!watched(ptr, n))
      return -1;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char *ptr, size_t size) override {
    if (size == 0)
      return 0;
    if (c.ssl) {
      int offered = static_cast<int>(std::min<size_t>(size, INT_MAX));
      while (true) {
        int put = SSL_write(c.ssl, ptr, offered);
        if (put > 0)
          return put;
        if (!awaitTls(c.fd, SSL_get_error(c.ssl, put), writeTimeout)) {
          ERR_clear_error();
          return -1;
        }
      }
    }
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
      if (c.ssl) {
        int got = SSL_read(c.ssl, into, static_cast<int>(std::min<size_t>(size, INT_MAX)));
        if (got > 0)
          return got;
        int error = SSL_get_error(c.ssl, got);
        if (error == SSL_ERROR_ZERO_RETURN)
          return 0;
        if (error == SSL_ERROR_WANT_READ ? awaitReadable() : awaitTls(c.fd, error, readTimeout))
          continue;
        ERR_clear_error();
        return -1;
      }
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

ParkingServer::ParkingServer(Limits limitsIn, RefusalWriter refusalIn, TlsSetup tls)
    : limits(limitsIn), refusal(std::move(refusalIn)), tlsWanted(static_cast<bool>(tls)) {
  if (tls) {
    SSL_CTX *context = SSL_CTX_new(TLS_server_method());
    if (context && tls(*context))
      tlsContext = context;
    else if (context)
      SSL_CTX_free(context);
  }
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
    if (tlsContext)
      SSL_CTX_free(tlsContext);
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
  if (tlsContext)
    SSL_CTX_free(tlsContext);
}

bool ParkingServer::is_valid() const {
  return httplib::Server::is_valid() && (!tlsWanted || tlsContext);
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

ParkingServer::Counts ParkingServer::counts() const {
  std::lock_guard<std::mutex> lock(mutex);
  Counts out;
  out.open = live.size() - refusing - drainingCount;
  out.idle = idleSet.size();
  out.heads = headSet.size();
  out.handshakes = handshakeSet.size();
  out.threads = threads;
  out.refused = refusedCount;
  out.evicted = evictedCount;
  out.timedOut = timedOutCount;
  return out;
}

size_t ParkingServer::openConnections() const {
  std::lock_guard<std::mutex> lock(mutex);
  return live.size() - refusing - drainingCount;
}

size_t ParkingServer::threadCount() const {
  std::lock_guard<std::mutex> lock(mutex);
  return threads;
}

ParkingServer::Connection *ParkingServer::find(uint64_t id) const {
  auto it = live.find(id);
  return it == live.end() ? nullptr : it->second;
}

bool ParkingServer::pressed() const {
  size_t open = live.size() - refusing - drainingCount;
  return 4 * open >= 3 * size_t(limits.connections);
}

std::chrono::milliseconds ParkingServer::headTimeout() const {
  return pressed() ? kPressedTimeout : kHeadTimeout;
}

std::chrono::milliseconds ParkingServer::handshakeTimeout() const {
  return pressed() ? kPressedTimeout : kHandshakeTimeout;
}

bool ParkingServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  socketAddress(sock, /*remote=*/true, c->remoteIp, c->remotePort);
  socketAddress(sock, /*remote=*/false, c->localIp, c->localPort);
  if (limits.perClient > 0)
    c->peer = peerKey(sock, c->remoteIp);
  if (tlsContext) {
    // Non-blocking throughout: a blocking SSL_read waits inside OpenSSL for the rest of a
    // record, which a client sending a byte at a time could stretch without end.
    int flags = ::fcntl(sock, F_GETFL);
    c->ssl = SSL_new(tlsContext);
    if (!c->ssl || flags < 0 || ::fcntl(sock, F_SETFL, flags | O_NONBLOCK) != 0 ||
        SSL_set_fd(c->ssl, sock) != 1) {
      if (c->ssl)
        SSL_free(c->ssl);
      ERR_clear_error();
      ::close(sock);
      return false;
    }
    // Buffers only while records move: an idle TLS connection costs little more than a
    // plaintext one.
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                             SSL_MODE_RELEASE_BUFFERS);
  }
  std::unique_lock<std::mutex> lock(mutex);
  if (stopping) {
    lock.unlock();
    if (c->ssl)
      SSL_free(c->ssl);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  if (!stallWatch.joinable()) {
    try {
      stallWatch = std::thread([this] { watchStalls(); }); // Once the server is listening.
    } catch (const std::system_error &) {
      // No thread to be had now: the next connection tries again.
    }
  }
  size_t open = live.size() - refusing - drainingCount;
  Connection *raw = c.release();
  raw->id = ++lastId;
  raw->acceptedAt = Clock::now();
  live.emplace(raw->id, raw);
  if (limits.perClient > 0) {
    auto seen = perPeer.find(raw->peer);
    if (seen != perPeer.end() && seen->second >= limits.perClient) {
      refuse(raw, Refusal::PerClient);
      return true;
    }
  }
  if (open >= limits.connections && !evictOne()) {
    refuse(raw, Refusal::Overloaded);
    return true;
  }
  if (limits.perClient > 0) {
    ++perPeer[raw->peer];
    raw->counted = true;
  }
  if (raw->ssl) {
    if (handshakeSet.size() >= kMaxHandshakes) {
      ++evictedCount[size_t(Parked::Handshake)];
      forget(handshakeSet.begin()->second);
    }
    if (!park(raw, handshakeSet, raw->acceptedAt, EPOLLIN))
      return true;
  } else if (!park(raw, idleSet, raw->acceptedAt, EPOLLIN | EPOLLRDHUP)) {
    return true;
  }
  if (idle == 0 && threads < std::min(baseThreads(), limits.threads))
    startThread(); // Nobody waits for its first bytes: a thread for it, up to the base.
  return true;
}

bool ParkingServer::evictOne() {
  // The oldest idle connection whose next request has not come, among the first few: one
  // whose request is here is as good as busy, and a thread is about to take it.
  // One its client has closed already holds nothing: ended first, not counted as evicted.
  int looked = 0;
  for (auto it = idleSet.begin(); it != idleSet.end() && looked < kEvictionLooks; ++it, ++looked)
    if (readableNow(it->second->fd) && closedByPeer(it->second->fd)) {
      forget(it->second);
      return true;
    }
  looked = 0;
  for (auto it = idleSet.begin(); it != idleSet.end() && looked < kEvictionLooks; ++it, ++looked)
    if (!readableNow(it->second->fd)) {
      ++evictedCount[size_t(Parked::Idle)];
      forget(it->second);
      return true;
    }
  if (!headSet.empty()) {
    ++evictedCount[size_t(Parked::Head)];
    forget(headSet.begin()->second);
    return true;
  }
  if (!handshakeSet.empty()) {
    ++evictedCount[size_t(Parked::Handshake)];
    forget(handshakeSet.begin()->second);
    return true;
  }
  return false;
}

void ParkingServer::refuse(Connection *c, Refusal reason) {
  ++refusedCount[size_t(reason)];
  c->reason = reason;
  if (!c->ssl) {
    answerRefusal(c);
    return;
  }
  if (refusing >= kMaxRefusing) {
    // Refusals are themselves at their limit: closed unanswered, which the client sees at
    // once as a reset, not as a wait.
    forget(c);
    return;
  }
  c->refused = true;
  ++refusing;
  park(c, refusalSet, c->acceptedAt, EPOLLIN);
}

void ParkingServer::answerRefusal(Connection *c) {
  std::string response = refusal(c->reason);
  // A few hundred bytes into an empty socket buffer: sent whole, or the client is gone.
  if (c->ssl)
    SSL_write(c->ssl, response.data(), static_cast<int>(response.size()));
  else
    ::send(c->fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ERR_clear_error();
  if (c->refused) {
    c->refused = false;
    --refusing;
  }
  retire(c);
}

bool ParkingServer::park(Connection *c, ParkedSet &set, Clock::time_point since, uint32_t events) {
  if (stopping) {
    forget(c);
    return false;
  }
  c->set = &set;
  c->since = since;
  set.emplace(since, c);
  struct epoll_event event {};
  event.events = events | EPOLLONESHOT;
  event.data.u64 = c->id;
  if (::epoll_ctl(epollFd, c->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &event) != 0) {
    forget(c);
    return false;
  }
  c->armed = true;
  return true;
}

void ParkingServer::parkAfterRead(Connection *c, Read read) {
  if (read == Read::Closed || read == Read::Whole) {
    forget(c); // Whole is served, never parked: only a closed one comes here.
    return;
  }
  if (read == Read::Partial) {
    if (!c->inHead) {
      c->inHead = true;
      c->headStart = Clock::now();
    }
    park(c, headSet, c->headStart, EPOLLIN | EPOLLRDHUP);
    return;
  }
  if (c->buffered() == 0)
    c->releaseBuffer(); // A parked connection costs its socket and this record, no buffer.
  park(c, idleSet, Clock::now(), EPOLLIN | EPOLLRDHUP);
}

void ParkingServer::unpark(Connection *c) {
  if (!c->set)
    return;
  c->set->erase({c->since, c});
  c->set = nullptr;
}

void ParkingServer::retire(Connection *c) {
  if (stopping) {
    forget(c);
    return;
  }
  if (c->counted) {
    auto seen = perPeer.find(c->peer);
    if (seen != perPeer.end() && --seen->second == 0)
      perPeer.erase(seen);
    c->counted = false;
  }
  c->releaseBuffer();
  if (c->ssl) {
    SSL_shutdown(c->ssl); // Its close_notify, if the socket takes it now.
    ERR_clear_error();
  }
  c->draining = true;
  ++drainingCount;
  if (drainingCount > kMaxDraining && !drainSet.empty())
    forget(drainSet.begin()->second);
  ::shutdown(c->fd, SHUT_WR);
  park(c, drainSet, Clock::now(), EPOLLIN | EPOLLRDHUP);
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
  unpark(c);
  if (c->counted) {
    auto seen = perPeer.find(c->peer);
    if (seen != perPeer.end() && --seen->second == 0)
      perPeer.erase(seen);
  }
  if (c->refused)
    --refusing;
  if (c->draining)
    --drainingCount;
  live.erase(c->id);
  if (c->armed)
    ::epoll_ctl(epollFd, EPOLL_CTL_DEL, c->fd, nullptr);
  if (c->ssl)
    SSL_free(c->ssl);
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
  while (!drainSet.empty() && drainSet.begin()->first + kDrain <= now)
    forget(drainSet.begin()->second);
  auto handshake = handshakeTimeout();
  while (!refusalSet.empty() && refusalSet.begin()->first + handshake <= now)
    forget(refusalSet.begin()->second);
  while (!handshakeSet.empty() && handshakeSet.begin()->first + handshake <= now) {
    ++timedOutCount[size_t(Parked::Handshake)];
    forget(handshakeSet.begin()->second);
  }
  auto head = headTimeout();
  while (!headSet.empty() && headSet.begin()->first + head <= now) {
    ++timedOutCount[size_t(Parked::Head)];
    forget(headSet.begin()->second);
  }
  while (!idleSet.empty() && idleSet.begin()->first + keepAlive() <= now) {
    Connection *c = idleSet.begin()->second;
    if (readableNow(c->fd)) {
      // Its next request (or its close) came as it expired: a thread is being handed it.
      // Its epoll event stays armed (or taken); only its clock moves.
      unpark(c);
      c->set = &idleSet;
      c->since = now;
      idleSet.emplace(now, c);
      continue;
    }
    ++timedOutCount[size_t(Parked::Idle)];
    forget(c);
  }
}

ParkingServer::Clock::time_point ParkingServer::nextExpiry() const {
  Clock::time_point next = Clock::time_point::max();
  if (!drainSet.empty())
    next = std::min(next, drainSet.begin()->first + kDrain);
  if (!handshakeSet.empty())
    next = std::min(next, handshakeSet.begin()->first + handshakeTimeout());
  if (!refusalSet.empty())
    next = std::min(next, refusalSet.begin()->first + handshakeTimeout());
  if (!headSet.empty())
    next = std::min(next, headSet.begin()->first + headTimeout());
  if (!idleSet.empty())
    next = std::min(next, idleSet.begin()->first + keepAlive());
  return next;
}

void ParkingServer::runThread() {
  Clock::time_point idleSince = Clock::now();
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    // Waits for the next connection with something to do, or for the oldest parked one to
    // time out. Every waiting thread waits on the one epoll set; the kernel gives each event
    // to one of them. Timeouts go first, on every turn, so a busy server closes them too.
    Clock::time_point now = Clock::now();
    expire(now);
    // At least once a second, so a connection parked while every thread already waited
    // expires on time (and under pressure, its shorter timeouts).
    auto until = std::min({idleSince + kIdleLife, now + std::chrono::seconds(1), nextExpiry()});
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
      // Not found or not parked: closed, or moved on, since the event was taken.
      Connection *c = find(event.data.u64);
      if (!c || !c->set)
        continue;
      step(c, lock);
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

ParkingServer::Read ParkingServer::readHead(Connection *c) {
  while (true) {
    if (c->buffered() > 0 && c->headEnds())
      return Read::Whole;
    c->makeRoom(kReadAhead);
    if (c->end == c->capacity)
      return Read::Whole; // At kMaxBuffer without an end: the parser refuses it.
    char *into = c->buffer.get() + c->end;
    size_t room = c->capacity - c->end;
    ssize_t got;
    if (c->ssl) {
      int read = SSL_read(c->ssl, into, static_cast<int>(std::min<size_t>(room, INT_MAX)));
      if (read > 0) {
        got = read;
      } else {
        int error = SSL_get_error(c->ssl, read);
        ERR_clear_error();
        if (error != SSL_ERROR_WANT_READ)
          return Read::Closed;
        got = -1;
        errno = EAGAIN;
      }
    } else {
      got = ::recv(c->fd, into, room, MSG_DONTWAIT);
    }
    if (got > 0) {
      c->end += static_cast<size_t>(got);
      continue;
    }
    if (got == 0)
      return Read::Closed;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Read::Closed;
    return c->buffered() > 0 ? Read::Partial : Read::Nothing;
  }
}

void ParkingServer::step(Connection *c, std::unique_lock<std::mutex> &lock) {
  ParkedSet *from = c->set;
  unpark(c);
  if (from == &drainSet) {
    // Bytes after its last response: dropped here, without taking a request's turn.
    Clock::time_point drainUntil = c->since + kDrain;
    lock.unlock();
    bool open = drop(c);
    lock.lock();
    if (!open || stopping || Clock::now() >= drainUntil)
      forget(c);
    else
      park(c, drainSet, drainUntil - kDrain, EPOLLIN | EPOLLRDHUP);
    return;
  }
  Read read = Read::Nothing;
  if (from == &handshakeSet || from == &refusalSet) {
    lock.unlock();
    int accepted = SSL_accept(c->ssl);
    int error = accepted == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, accepted);
    ERR_clear_error();
    if (accepted == 1 && !c->refused)
      read = readHead(c); // The request often comes with the handshake's last flight.
    lock.lock();
    if (stopping) {
      forget(c);
      return;
    }
    if (accepted != 1) {
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE)
        park(c, *from, c->acceptedAt,
             error == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN | EPOLLRDHUP);
      else
        forget(c); // A failed handshake: a bad certificate, or not TLS at all.
      return;
    }
    if (c->refused) {
      answerRefusal(c);
      return;
    }
  } else {
    lock.unlock();
    read = readHead(c);
    lock.lock();
    if (stopping) {
      forget(c);
      return;
    }
  }
  if (read != Read::Whole) {
    parkAfterRead(c, read);
    return;
  }
  lastTaken = Clock::now();
  if (idle == 0)
    stalls.notify_one(); // Every thread is busy: the stall watch looks.
  lock.unlock();
  serve(c);
  lock.lock();
}

void ParkingServer::watchStalls() {
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    // Only while every thread is busy can a connection with a request wait for one; at the
    // limit nothing is to be done until one is idle or ends. With no thread at all (none
    // could be started), parked connections need one.
    stalls.wait(lock, [&] {
      return stopping || (threads > 0 && idle == 0 && threads < limits.threads) ||
             (threads == 0 && live.size() > 0);
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
  auto readTimeout =
      std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_);
  auto writeTimeout =
      std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_);
  while (true) {
    ConnectionStream stream(*c, readTimeout, writeTimeout);
    // After stop() (the listener closed) a connection takes no request after this one.
    bool closing = ++c->served >= keep_alive_max_count_ || svr_sock_ == INVALID_SOCKET || stopping;
    bool closed = false;
    takeCloseAfterResponse();
    bool answered =
        process_request(stream, closing, closed, [c](httplib::Request &req) { req.ssl = c->ssl; });
    bool closeAfter = takeCloseAfterResponse() || stream.refused();
    c->inHead = c->requestLineDone = false;
    c->scanned = c->begin;
    if (answered && !c->broken && !closed && !closing && !closeAfter) {
      // Its next request may be here already (sent early, or while this one ran): served
      // on this thread, without a turn through the epoll set.
      Read next = readHead(c);
      if (next == Read::Whole)
        continue;
      std::lock_guard<std::mutex> lock(mutex);
      parkAfterRead(c, next);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!answered || c->broken)
      forget(c); // The client went, or broke the head's limits: closed at once.
    else
      retire(c);
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
  // awaitThreads() may already wait: with no request thread left to end and notify, this is
  // the only wake-up it gets (an executor that never had a connection hung on its stop).
  ended.notify_all();
  for (ParkedSet *set : {&idleSet, &headSet, &handshakeSet, &refusalSet, &drainSet})
    while (!set->empty())
      forget(set->begin()->second);
  // What is left is being served: its socket is shut down, so a request blocked reading or
  // writing ends, and its thread forgets it.
  for (const auto &entry : live)
    ::shutdown(entry.second->fd, SHUT_RDWR);
}

} // namespace courier::transport
