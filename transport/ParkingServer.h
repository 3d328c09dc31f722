// The plain-HTTP server of courier-executor and courier-serve: cpp-httplib's request parsing,
// routing and responses, with connections kept alive between requests without a thread each.
//
// cpp-httplib's own server serves a connection on one thread for as long as the client keeps
// it alive, so N clients of a server are N threads, most of them waiting; with 256 clients on
// two cores, the turns of those threads cost more than the requests. Here a connection holds a
// thread only while a request on it is read, run and answered. Between requests it is parked
// in one epoll set, which every idle request thread waits on: the kernel hands each
// connection whose next request arrived to one of them. A few threads (baseThreads()) serve
// while requests keep moving; when every thread is held by a request that waits (a long
// launch, a busy session) and none has taken a connection for kStall, one more starts, up to
// `threads`, so a request never waits long behind them. A parked connection idle for the
// keep-alive timeout is closed.
//
// Past `connections` open at once, a new connection is answered at its first request with
// 503 `overloaded` and closed (ConnectionPool::refusingConnection()). TLS listeners do not use
// this: they keep httplib's SSLServer, a thread per connection (transport/ConnectionPool.h).
#ifndef COURIER_TRANSPORT_PARKINGSERVER_H
#define COURIER_TRANSPORT_PARKINGSERVER_H

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace courier::transport {

class ParkingServer : public httplib::Server {
public:
  struct Limits {
    /// Requests served at once at most: the request threads' limit.
    unsigned threads = 512;
    /// Connections open at once at most; one more is refused.
    unsigned connections = 512;
  };
  explicit ParkingServer(Limits limits);
  ~ParkingServer() override;

  /// Closes every connection: parked ones at once, one with a request being read or run
  /// after its response (its socket is shut down, so a request blocked reading or writing
  /// ends). Does not wait for requests being run (the destructor does). Call after stop();
  /// the server does not serve again afterwards.
  void closeConnections();
  /// Returns once closeConnections() was called and every request thread has ended.
  void awaitThreads();

  /// Connections open now (parked, waiting for a thread, or being served).
  size_t openConnections() const;
  /// Request threads now.
  size_t threadCount() const;

  /// Threads started as connections need them and kept (four per core, 8 to 64): more
  /// start only when every thread is busy and none has taken a connection for kStall. More
  /// threads than this only wait their turn at sessions and cores: measured on two cores, 16
  /// served 256 clients 15 % slower than 8 (docs/performance.md).
  static unsigned baseThreads();
  static constexpr std::chrono::milliseconds kStall{10};
  /// How long an idle request thread beyond the base lives.
  static constexpr std::chrono::seconds kIdleLife{30};
  /// How long a connection answered for the last time waits for the client to close it.
  static constexpr std::chrono::seconds kDrain{1};
  /// Refused connections waiting for their one answer at most; more are closed unanswered.
  static constexpr unsigned kMaxRefusing = 64;

  /// An open connection (ParkingServer.cpp).
  struct Connection;

private:
  using Clock = std::chrono::steady_clock;

  bool process_and_close_socket(socket_t sock) override;

  /// A request thread: waits on the epoll set for a connection with a request, serves it,
  /// and closes parked connections past the keep-alive timeout.
  void runThread();
  void startThread();
  /// Serves requests on `c` while they come, then parks or closes it.
  void serve(Connection *c);
  /// Puts `c` in the epoll set until its next request comes. `mutex` held.
  void park(Connection *c);
  /// Ends `c`: its socket closes and it is forgotten. `mutex` held.
  void forget(Connection *c);
  /// Puts `c` in `list` (parked or draining) and in the epoll set; false when it could not
  /// be (it is forgotten). `mutex` held.
  bool arm(Connection *c, std::list<Connection *> &list);
  /// Takes `c` out of its list. `mutex` held.
  void unpark(Connection *c);
  /// After a last response: shuts its sending side and drains what the client still sends,
  /// up to kDrain, before closing. `mutex` held.
  void retire(Connection *c);
  /// Reads and drops what a draining connection received; false once the client closed.
  static bool drop(Connection *c);
  /// The open connection `id` names, if any. `mutex` held.
  Connection *find(uint64_t id) const;
  /// Closes the parked connections idle past the keep-alive timeout, but not one whose next
  /// request (or close) has come: a thread may have just taken its event. `mutex` held.
  void expire(Clock::time_point now);
  /// Starts a thread when every thread is busy and none took a connection for kStall.
  void watchStalls();
  void wake();
  std::chrono::seconds keepAlive() const { return std::chrono::seconds(keep_alive_timeout_sec_); }

  const Limits limits;
  int epollFd = -1, wakeFd = -1;
  std::thread stallWatch;

  mutable std::mutex mutex;
  std::condition_variable stalls, ended;
  /// Set once, by closeConnections(), under `mutex`; read without it on the request path.
  std::atomic<bool> stopping{false};
  std::list<Connection *> parked;   ///< Oldest first: the keep-alive clock.
  std::list<Connection *> draining; ///< Oldest first: retired, waiting for the client's close.
  /// Every open connection, by the id its epoll events carry.
  std::unordered_map<uint64_t, Connection *> live;
  uint64_t lastId = 0;
  size_t refusing = 0;
  size_t drainingCount = 0; ///< Connections retired and not yet closed.
  unsigned threads = 0, idle = 0;
  Clock::time_point lastTaken = Clock::now();
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_PARKINGSERVER_H
