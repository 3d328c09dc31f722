// The servers' task queue for connections. cpp-httplib hands each accepted connection to its
// task queue as one task, which lasts as long as the client keeps the connection alive; with
// a fixed pool, connections past the pool's size waited in the queue, unanswered, until one
// closed (a client sending every 100 ms never closes). Here a thread starts when a connection
// needs one, up to `limit` connections served at once, and a thread left idle ends after a
// while, so a server holds threads for the connections it has, not for its limit. A
// connection that arrives while `limit` are open is not queued behind them: it runs on one of
// a few refusal threads, where the server answers its first request 503 `overloaded` and
// closes it (refusingConnection()), so no client waits without an answer.
#ifndef COURIER_TRANSPORT_CONNECTIONPOOL_H
#define COURIER_TRANSPORT_CONNECTIONPOOL_H

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace courier::transport {

class ConnectionPool : public httplib::TaskQueue {
public:
  /// At most `limit` connections are served at once; `kept` idle threads stay ready.
  explicit ConnectionPool(unsigned limit, unsigned kept = 4);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> connection) override;
  /// Serves what is queued, then ends every thread and returns once they have.
  void shutdown() override;

  /// True on a refusal thread: the connection it runs is over the limit.
  static bool refusingConnection();
  /// Says whether the connection the calling thread serves now is over the limit (for a
  /// server that serves connections on threads of its own, transport/ParkingServer.h).
  static void markRefusing(bool refusing);

  /// How long an idle thread beyond the kept ones lives.
  static constexpr std::chrono::seconds kIdleLife{30};
  /// Refusal threads at most: a refusal reads one request and answers, so a few keep up
  /// with any burst a listener can accept; slow clients past them wait for one in turn.
  static constexpr unsigned kRefusers = 16;

private:
  struct Lane {
    std::deque<std::function<void()>> queue;
    std::condition_variable work;
    unsigned threads = 0, idle = 0;
  };
  void startThread(Lane &lane, bool refusing);
  void run(Lane &lane, bool refusing);

  const unsigned most, kept;
  std::mutex mutex;
  std::condition_variable ended;
  Lane serve, refuse;
  size_t admitted = 0; ///< Connections queued or served on the serve lane.
  bool stopping = false;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_CONNECTIONPOOL_H
