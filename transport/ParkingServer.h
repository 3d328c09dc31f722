// The HTTP server of courier-executor and courier-serve, plaintext and TLS: cpp-httplib's
// request parsing, routing and responses, with connections kept open between requests without
// a thread each.
//
// cpp-httplib's own server serves a connection on one thread for as long as the client keeps
// it alive, so N clients of a server are N threads, most of them waiting, and a client that
// opens connections and sends nothing holds every thread. Here a connection holds a thread
// only while a request on it is read, run and answered. Everything else is parked in one
// epoll set, which every idle request thread waits on: a TLS handshake (stepped as its bytes
// come), a connection idle between requests, and a request head not yet whole (read as its
// bytes come, without a thread waiting on it). A connection is handed to a request thread
// once its head is whole. A few threads (baseThreads()) serve while requests keep moving;
// when every thread is held by a request that waits (a long launch, a busy session) and none
// has taken a connection for kStall, one more starts, up to `threads`.
//
// Connections open at once are bounded by `connections`, separately from the threads. At the
// bound a new connection closes the oldest idle one, as nginx reuses keep-alive connections;
// with none idle, the oldest half-sent head, then the oldest handshake. Only when every
// connection is busy is the new one refused: it is sent a 503 `overloaded` response (after its
// handshake, with TLS), which the client reads, and closed. A peer address (a unix-socket
// peer's uid) with `perClient` connections open has its next one refused the same way (its
// message names the per-client limit), while other addresses are served. Under pressure (three
// quarters of `connections` open) heads and handshakes must come sooner.
#ifndef COURIER_TRANSPORT_PARKINGSERVER_H
#define COURIER_TRANSPORT_PARKINGSERVER_H

#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

namespace courier::transport {

class ParkingServer : public httplib::Server {
public:
  struct Limits {
    /// Requests served at once at most: the request threads' limit.
    unsigned threads = 512;
    /// Connections open at once at most, idle ones included.
    unsigned connections = 10000;
    /// Connections open at once from one peer address at most; 0 for no limit.
    unsigned perClient = 256;
  };
  /// Why a connection was refused.
  enum class Refusal : uint8_t { Overloaded, PerClient };
  static constexpr size_t kRefusals = 2;
  /// What a connection was closed for to admit a newer one, or because it was too slow.
  enum class Parked : uint8_t { Idle, Head, Handshake };
  static constexpr size_t kParkedKinds = 3;
  /// The whole HTTP response that refuses a connection for `reason` ("Connection: close").
  using RefusalWriter = std::function<std::string(Refusal reason)>;
  /// Sets up a TLS listener's context; false leaves the server invalid.
  using TlsSetup = std::function<bool(SSL_CTX &)>;

  /// A plaintext server; with `tls`, a TLS one whose context `tls` sets up.
  ParkingServer(Limits limits, RefusalWriter refusal, TlsSetup tls = nullptr);
  ~ParkingServer() override;

  /// False when a TLS context was asked for and could not be set up.
  bool is_valid() const override;

  /// Closes every connection: parked ones at once, one with a request being read or run
  /// after its response (its socket is shut down, so a request blocked reading or writing
  /// ends). Does not wait for requests being run (the destructor does). Call after stop();
  /// the server does not serve again afterwards.
  void closeConnections();
  /// Returns once closeConnections() was called and every request thread has ended.
  void awaitThreads();

  /// What the server holds now, and what it refused and closed so far.
  struct Counts {
    size_t open = 0;       ///< Connections open, refused ones being answered aside.
    size_t idle = 0;       ///< Parked between requests (or before the first).
    size_t heads = 0;      ///< Parked with a request head partly received.
    size_t handshakes = 0; ///< TLS handshakes under way.
    size_t threads = 0;    ///< Request threads, busy or waiting.
    std::array<uint64_t, kRefusals> refused{};
    std::array<uint64_t, kParkedKinds> evicted{};  ///< Closed to admit a newer connection.
    std::array<uint64_t, kParkedKinds> timedOut{}; ///< Closed past their timeout.
  };
  Counts counts() const;
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
  /// A TLS handshake must end within this from the connection's accept; under pressure,
  /// within kPressedTimeout, as must a request head from its first byte.
  static constexpr std::chrono::seconds kHandshakeTimeout{3};
  static constexpr std::chrono::seconds kPressedTimeout{1};
  /// Idle connections looked at, oldest first, for one to close at the connection limit.
  static constexpr int kEvictionLooks = 16;
  /// TLS handshakes under way at most: past it a new one closes the oldest.
  static constexpr size_t kMaxHandshakes = 256;
  /// Refused TLS connections in their handshake at most (a refusal's 503 goes out after it);
  /// past it a connection is closed unanswered.
  static constexpr size_t kMaxRefusing = 256;
  /// Connections answered for the last time and draining at most; past it the oldest is
  /// closed at once.
  static constexpr size_t kMaxDraining = 1024;
  /// Descriptors a server needs besides its connections (listener, epoll, sessions' files
  /// and workers), which --max-connections leaves to RLIMIT_NOFILE.
  static constexpr size_t kReservedFiles = 512;
  /// Descriptors `connections` connections need: each open, plus refusals and drains.
  static size_t filesNeeded(size_t connections) {
    return connections + kMaxRefusing + kMaxDraining + kReservedFiles;
  }

  /// An open connection (ParkingServer.cpp).
  struct Connection;

private:
  using Clock = std::chrono::steady_clock;
  /// A parked set, ordered by the time its clock started (the oldest first).
  using ParkedSet = std::set<std::pair<Clock::time_point, Connection *>>;
  enum class Read : uint8_t { Whole, Partial, Nothing, Closed };

  bool process_and_close_socket(socket_t sock) override;

  /// A request thread: waits on the epoll set for a connection with something to do, does
  /// it, and closes parked connections past their timeouts.
  void runThread();
  void startThread();
  /// Takes `c` from the epoll set (the event is its) and moves it on. `lock` held on entry
  /// and exit.
  void step(Connection *c, std::unique_lock<std::mutex> &lock);
  /// Serves requests on `c` while they come, then parks or closes it. Called without the
  /// lock, with a whole head buffered.
  void serve(Connection *c);
  /// Reads what `c` has received, without waiting, into its buffer; Whole once a head ends
  /// there (or the buffer is at its bound: the parser refuses it).
  static Read readHead(Connection *c);
  /// Parks `c` after a read that found no whole head: idle, or with a partial head. `mutex`
  /// held.
  void parkAfterRead(Connection *c, Read read);
  /// Parks `c` as `kind` (its clock starting at `since`) in `set`, watching for `events`.
  /// False when it could not be (it is forgotten). `mutex` held.
  bool park(Connection *c, ParkedSet &set, Clock::time_point since, uint32_t events);
  /// Takes `c` out of its parked set. `mutex` held.
  void unpark(Connection *c);
  /// After a last response: shuts its sending side and drains what the client still sends,
  /// up to kDrain, before closing. `mutex` held.
  void retire(Connection *c);
  /// Reads and drops what a draining connection received; false once the client closed.
  static bool drop(Connection *c);
  /// Ends `c`: its socket closes and it is forgotten. `mutex` held.
  void forget(Connection *c);
  /// Closes a parked connection to admit a newer one: the oldest idle one, else the oldest
  /// partial head, else the oldest handshake. False when every connection is busy. `mutex`
  /// held.
  bool evictOne();
  /// A connection refused for `reason`: sent its 503 (after its handshake, with TLS) and
  /// drained, or closed unanswered past kMaxRefusing. `mutex` held.
  void refuse(Connection *c, Refusal reason);
  /// Sends a refused connection its 503 and retires it. `mutex` held.
  void answerRefusal(Connection *c);
  /// The open connection `id` names, if any. `mutex` held.
  Connection *find(uint64_t id) const;
  /// Closes what is past its timeout; an idle connection whose next request (or close) has
  /// come is kept, since a thread may have just taken its event. `mutex` held.
  void expire(Clock::time_point now);
  /// When the next parked connection times out. `mutex` held.
  Clock::time_point nextExpiry() const;
  /// Whether three quarters of `connections` are open. `mutex` held.
  bool pressed() const;
  std::chrono::milliseconds headTimeout() const;
  std::chrono::milliseconds handshakeTimeout() const;
  /// Starts a thread when every thread is busy and none took a connection for kStall.
  void watchStalls();
  void wake();
  std::chrono::seconds keepAlive() const { return std::chrono::seconds(keep_alive_timeout_sec_); }

  const Limits limits;
  const RefusalWriter refusal;
  SSL_CTX *tlsContext = nullptr;
  bool tlsWanted = false;
  int epollFd = -1, wakeFd = -1;
  std::thread stallWatch;

  mutable std::mutex mutex;
  std::condition_variable stalls, ended;
  /// Set once, by closeConnections(), under `mutex`; read without it on the request path.
  std::atomic<bool> stopping{false};
  ParkedSet idleSet, headSet, handshakeSet, drainSet;
  /// Refused TLS connections in their handshake, after which their 503 is sent.
  ParkedSet refusalSet;
  /// Every open connection, by the id its epoll events carry.
  std::unordered_map<uint64_t, Connection *> live;
  /// Open connections (refusals and drains aside) by peer, when perClient is set.
  std::unordered_map<std::string, unsigned> perPeer;
  uint64_t lastId = 0;
  size_t refusing = 0;      ///< Refused and not yet answered (TLS, in their handshake).
  size_t drainingCount = 0; ///< Retired and not yet closed.
  unsigned threads = 0, idle = 0;
  Clock::time_point lastTaken = Clock::now();
  std::array<uint64_t, kRefusals> refusedCount{};
  std::array<uint64_t, kParkedKinds> evictedCount{}, timedOutCount{};
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_PARKINGSERVER_H
