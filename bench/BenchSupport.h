// What every benchmark program needs to fail loudly: a benchmark that cannot do what it
// measures stops with the reason rather than printing figures of something else.
#ifndef COURIER_BENCH_BENCHSUPPORT_H
#define COURIER_BENCH_BENCHSUPPORT_H

#include "tests/support/ConnectionFlood.h"
#include "transport/Backend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace courier::bench {

/// Prints "<program>: <message>" and exits 1.
[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, message.c_str());
  std::exit(1);
}

template <typename T> T check(llvm::Expected<T> value, const char *what) {
  if (!value)
    die(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

inline void check(llvm::Error error, const char *what) {
  if (error)
    die(std::string(what) + ": " + llvm::toString(std::move(error)));
}

/// The object file at `path` as a content-addressed blob.
inline transport::ObjectBlob loadObject(const char *path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    die(std::string("reading ") + path);
  return transport::ObjectBlob::fromBytes((*buffer)->getBuffer().str());
}

/// Of a run of timings, in the unit they were measured in.
struct Percentiles {
  double p50, p99, mean;
};

/// Runs `once` `warmup` times untimed, then `n` times, appending each call's microseconds.
inline void measure(int warmup, int n, const std::function<void()> &once, std::vector<double> &us) {
  for (int i = 0; i < warmup; ++i)
    once();
  for (int i = 0; i < n; ++i) {
    auto start = std::chrono::steady_clock::now();
    once();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
}

/// The seconds one call of `once` takes.
inline double secondsOf(const std::function<void()> &once) {
  auto start = std::chrono::steady_clock::now();
  once();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The middle of a run of timings (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline Percentiles percentiles(std::vector<double> us) {
  double total = 0;
  for (double u : us)
    total += u;
  std::sort(us.begin(), us.end());
  size_t n = us.size();
  return {us[n / 2], us[std::min(n - 1, n * 99 / 100)], total / double(n)};
}

/// CPU seconds (user and system) this process has used so far, all its threads.
inline double selfCpuSeconds() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval &t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// What a run of concurrent clients measured in its window.
struct ConcurrentCalls {
  /// The microseconds of every call that ended in the window (from its start, or with a pace
  /// from when it was due).
  std::vector<double> us;
  /// The window's length.
  double seconds = 0;
  /// The longest call of any client from the window's start on, those the window's end cut
  /// included: a client that waited the whole window shows here, not only as a missing call.
  double slowestUs = 0;
  /// Calls that ended in the window, of the client that made the fewest: 0 is a starved
  /// client.
  size_t fewestByOneClient = 0;
};

/// How callConcurrently runs its clients.
struct ConcurrentRun {
  int clients = 1;
  /// Calls made before the window opens, which neither count nor are timed.
  std::chrono::milliseconds warmup{300};
  std::chrono::milliseconds window{2000};
  /// Zero: each client calls again as soon as its last call returns (a closed loop, which
  /// measures throughput: the server is never idle). Otherwise each client's calls are due
  /// one pace apart, whenever the last returned, and a call's time runs from when it was due
  /// (an open loop at a load the server can carry, which measures latency without the queue
  /// a closed loop builds: with N clients always waiting, Little's law makes the mean
  /// latency N / throughput whatever the server does).
  std::chrono::microseconds pace{0};
  /// Called as the window opens and as it closes (from the thread that started the run): what
  /// a benchmark reads around the window alone, such as the processes' CPU time.
  std::function<void()> atWindowOpen, atWindowClose;
};

/// One client's calls that ended in the window, and its slowest from the window's start on.
struct ClientTimes {
  std::vector<double> us;
  double slowestUs = 0;
  /// Counts a call of `us` that ended at `end`.
  void record(std::chrono::steady_clock::time_point end, double us,
              std::chrono::steady_clock::time_point opens,
              std::chrono::steady_clock::time_point closes) {
    if (end >= opens)
      slowestUs = std::max(slowestUs, us);
    if (end >= opens && end < closes)
      this->us.push_back(us);
  }
};

/// Waits until the window closes, calling its hooks as it opens and closes, then joins the
/// clients' `threads`; returns the window's calls from each client's times.
inline ConcurrentCalls closeWindow(const ConcurrentRun &run,
                                   std::chrono::steady_clock::time_point opens,
                                   std::chrono::steady_clock::time_point closes,
                                   std::vector<std::thread> &threads,
                                   const std::vector<ClientTimes> &times) {
  std::this_thread::sleep_until(opens);
  if (run.atWindowOpen)
    run.atWindowOpen();
  std::this_thread::sleep_until(closes);
  if (run.atWindowClose)
    run.atWindowClose();
  for (std::thread &thread : threads)
    thread.join();
  ConcurrentCalls calls;
  calls.seconds = std::chrono::duration<double>(run.window).count();
  calls.fewestByOneClient = times.empty() ? 0 : times[0].us.size();
  for (const ClientTimes &client : times) {
    calls.us.insert(calls.us.end(), client.us.begin(), client.us.end());
    calls.slowestUs = std::max(calls.slowestUs, client.slowestUs);
    calls.fewestByOneClient = std::min(calls.fewestByOneClient, client.us.size());
  }
  return calls;
}

/// `run.clients` threads each call `once(client)` once untimed (connecting), then, started
/// together, call it until the window closes. As wrk and Triton's perf_analyzer count, the
/// figures are those of the window alone: no client has finished early and none has yet to
/// start, so the throughput is the server's under that many clients rather than that of
/// whichever clients were served last.
inline ConcurrentCalls callConcurrently(const ConcurrentRun &run,
                                        const std::function<void(int client)> &once) {
  using Clock = std::chrono::steady_clock;
  std::vector<ClientTimes> times(run.clients);
  std::atomic<int> ready{0};
  std::mutex starting;
  std::condition_variable startedTogether;
  bool go = false;
  Clock::time_point started, opens, closes;
  std::vector<std::thread> threads;
  for (int c = 0; c < run.clients; ++c)
    threads.emplace_back([&, c] {
      once(c);
      ready++;
      {
        std::unique_lock<std::mutex> lock(starting);
        startedTogether.wait(lock, [&] { return go; });
      }
      // Paced clients start spread over one pace, not in step.
      Clock::time_point due = started + run.pace * c / run.clients;
      for (;;) {
        if (run.pace.count() > 0)
          std::this_thread::sleep_until(due);
        Clock::time_point start = run.pace.count() > 0 ? due : Clock::now();
        if (start >= closes)
          break;
        once(c);
        Clock::time_point end = Clock::now();
        times[c].record(end, std::chrono::duration<double, std::micro>(end - start).count(), opens,
                        closes);
        due += run.pace;
      }
    });
  while (ready < run.clients)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    std::lock_guard<std::mutex> lock(starting);
    started = Clock::now();
    opens = started + run.warmup;
    closes = opens + run.window;
    go = true;
  }
  startedTogether.notify_all();
  return closeWindow(run, opens, closes, threads, times);
}

/// One keep-alive connection of driveConnections: its request, the bytes of its response
/// received so far, and when it last sent the request.
struct DrivenConnection {
  int fd = -1;
  std::string request, received;
  std::chrono::steady_clock::time_point sent;
};

/// What the threads of driveConnections share: its connections, each one's times, and the
/// window, whose bounds are set before `go`.
struct DrivenConnections {
  DrivenConnections(const ConcurrentRun &run, int threads)
      : run(run), threads(threads), connections(run.clients), times(run.clients) {}

  const ConcurrentRun &run;
  int threads;
  std::vector<DrivenConnection> connections;
  std::vector<ClientTimes> times;
  std::atomic<bool> go{false};
  std::chrono::steady_clock::time_point opens, closes;
};

/// A TCP connection to 127.0.0.1:`port` with TCP_NODELAY; ends the program when it fails.
inline int connectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0)
    die("connecting to 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
  return fd;
}

/// Sends the whole of `conn`'s request and notes when.
inline void sendRequest(DrivenConnection &conn) {
  size_t done = 0;
  while (done < conn.request.size()) {
    ssize_t n =
        ::send(conn.fd, conn.request.data() + done, conn.request.size() - done, MSG_NOSIGNAL);
    if (n <= 0)
      die(std::string("sending a request: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  conn.sent = std::chrono::steady_clock::now();
}

/// The length of the whole response at the front of `bytes`, 0 while it is not all there.
inline size_t responseLength(const std::string &bytes) {
  size_t end = bytes.find("\r\n\r\n");
  if (end == std::string::npos)
    return 0;
  if (bytes.compare(0, 12, "HTTP/1.1 200") != 0)
    die("a response was not 200: " + bytes.substr(0, bytes.find("\r\n")));
  const char *header = "\r\ncontent-length:";
  size_t at = 0;
  for (size_t i = 0; i + 17 < end && !at; ++i)
    if (strncasecmp(bytes.data() + i, header, 17) == 0)
      at = i + 17;
  if (!at)
    die("a response has no Content-Length");
  return end + 4 + std::strtoull(bytes.c_str() + at, nullptr, 10);
}

/// Driver thread `t` of driveConnections: once `go`, drives connections t, t + threads, ...
/// with epoll, each sending its request again as soon as the response to the last one is
/// whole, until the window closes.
inline void driveConnectionsOf(DrivenConnections &driven, int t) {
  using Clock = std::chrono::steady_clock;
  while (!driven.go.load())
    std::this_thread::yield();
  int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  int open = 0;
  for (int c = t; c < driven.run.clients; c += driven.threads) {
    struct epoll_event event {};
    event.events = EPOLLIN;
    event.data.u64 = static_cast<uint64_t>(c);
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, driven.connections[c].fd, &event);
    sendRequest(driven.connections[c]);
    ++open;
  }
  struct epoll_event events[64];
  char buffer[65536];
  while (open > 0) {
    int n = ::epoll_wait(epoll, events, 64, 5000);
    if (n <= 0)
      die("no response within 5 s");
    for (int i = 0; i < n; ++i) {
      int c = static_cast<int>(events[i].data.u64);
      DrivenConnection &conn = driven.connections[c];
      ssize_t got = ::recv(conn.fd, buffer, sizeof(buffer), 0);
      if (got <= 0)
        die("the server closed a connection");
      conn.received.append(buffer, static_cast<size_t>(got));
      size_t length = responseLength(conn.received);
      if (length == 0 || conn.received.size() < length)
        continue;
      conn.received.erase(0, length);
      Clock::time_point end = Clock::now();
      driven.times[c].record(end,
                             std::chrono::duration<double, std::micro>(end - conn.sent).count(),
                             driven.opens, driven.closes);
      if (end < driven.closes)
        sendRequest(conn);
      else
        --open;
    }
  }
  ::close(epoll);
}

/// Closed loops over `run.clients` keep-alive HTTP/1.1 connections to 127.0.0.1:`port`,
/// driven from `threads` threads with epoll as wrk drives them: connection `c` sends
/// `request(c)` again as soon as the response to the last one is whole. The clients cost the
/// machine a few threads whatever their number, so the figures are the server's scaling
/// rather than that of as many client threads sharing its cores. Counted as callConcurrently
/// counts (the window alone); every response must be 200 with a Content-Length.
inline ConcurrentCalls driveConnections(const ConcurrentRun &run, int port,
                                        const std::function<std::string(int)> &request,
                                        int threads = 2) {
  DrivenConnections driven(run, threads);
  for (int c = 0; c < run.clients; ++c) {
    DrivenConnection &conn = driven.connections[c];
    conn.request = request(c);
    conn.fd = connectLoopback(port);
  }
  std::vector<std::thread> drivers;
  for (int t = 0; t < threads; ++t)
    drivers.emplace_back([&driven, t] { driveConnectionsOf(driven, t); });
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  driven.opens = started + run.warmup;
  driven.closes = driven.opens + run.window;
  driven.go = true;
  ConcurrentCalls calls = closeWindow(run, driven.opens, driven.closes, drivers, driven.times);
  for (DrivenConnection &conn : driven.connections)
    ::close(conn.fd);
  return calls;
}

/// One row of a many-clients benchmark: calls per second in the window, their latency, the
/// slowest call, the least-served client's calls, and the CPU per call of the server (with
/// its workers) and of the clients (this process).
struct ClientsRow {
  int clients = 0;
  double perSecond = 0;
  Percentiles us{};
  double slowestUs = 0;
  size_t fewest = 0;
  double serverCpuUs = 0, clientCpuUs = 0;
};

/// What a many-clients benchmark measures, and how.
struct ClientsBenchmark {
  /// The calls, in the plural, for the tables: "launches", "invokes".
  const char *calls = "calls";
  /// The call function of `clients` clients connected afresh: `call(client)` makes one call
  /// as client `client`.
  std::function<std::function<void(int client)>(int clients)> connect;
  /// The CPU seconds the server and its workers have used so far.
  std::function<double()> serverCpuSeconds;
  /// When set, a third table: the HTTP request connection `c` sends, over connections to
  /// 127.0.0.1:`port` driven by two threads (driveConnections).
  std::function<std::string(int client)> rawRequest;
  int port = 0;
  ConcurrentRun run;
};

/// The client counts of a many-clients benchmark's rows.
inline constexpr int kClientCounts[] = {1, 4, 16, 64, 256};

/// Measures one row of `benchmark` with `n` clients: closed loops for a zero `pace`, paced
/// ones for a positive one, and for a negative one connections driven by two threads
/// (driveConnections).
inline ClientsRow measureClientsRow(ClientsBenchmark &benchmark, int n,
                                    std::chrono::microseconds pace) {
  ConcurrentRun &run = benchmark.run;
  std::function<void(int)> call;
  if (pace.count() >= 0)
    call = benchmark.connect(n);
  run.clients = n;
  run.pace = std::max(pace, std::chrono::microseconds(0));
  double serverCpu = 0, clientCpu = 0;
  run.atWindowOpen = [&] {
    serverCpu = -benchmark.serverCpuSeconds();
    clientCpu = -selfCpuSeconds();
  };
  run.atWindowClose = [&] {
    serverCpu += benchmark.serverCpuSeconds();
    clientCpu += selfCpuSeconds();
  };
  auto once = [&] {
    return pace.count() < 0 ? driveConnections(run, benchmark.port, benchmark.rawRequest)
                            : callConcurrently(run, call);
  };
  ConcurrentCalls calls = once();
  // A window too short for one call (a smoke run's, on a loaded machine or a sanitized
  // build) is measured again, twice as long, a few times before giving up.
  std::chrono::milliseconds window = run.window;
  for (int retry = 0; calls.us.empty() && retry < 3; ++retry) {
    run.window *= 2;
    calls = once();
  }
  run.window = window;
  if (calls.us.empty())
    die(std::string("no call ended in the window of ") + std::to_string(n) + " clients");
  double count = double(calls.us.size());
  return ClientsRow{n,
                    count / calls.seconds,
                    percentiles(std::move(calls.us)),
                    calls.slowestUs,
                    calls.fewestByOneClient,
                    serverCpu / count * 1e6,
                    clientCpu / count * 1e6};
}

/// Prints a table of `rows`, each row's calls per second also as a share of `peak`.
inline void printClientsRows(const char *calls, const std::vector<ClientsRow> &rows, double peak) {
  std::printf("  clients | %9s/s | of peak |   p50 us |   p99 us | slowest ms | fewest | "
              "CPU us/call: server, clients\n",
              calls);
  for (const ClientsRow &row : rows)
    std::printf("  %7d | %11.0f | %7.2f | %8.1f | %8.1f | %10.1f | %6zu | %6.1f, %6.1f\n",
                row.clients, row.perSecond, row.perSecond / peak, row.us.p50, row.us.p99,
                row.slowestUs / 1000, row.fewest, row.serverCpuUs, row.clientCpuUs);
}

/// The most calls per second of any of `rows`.
inline double peakPerSecond(const std::vector<ClientsRow> &rows) {
  double peak = 0;
  for (const ClientsRow &row : rows)
    peak = std::max(peak, row.perSecond);
  return peak;
}

/// The third table of `benchmark`: closed loops over connections driven by two threads with
/// epoll, sending its raw request.
inline void runDrivenClientsRows(ClientsBenchmark &benchmark) {
  benchmark.connect(0); // The last row's clients close their connections.
  std::vector<ClientsRow> driven;
  for (int n : kClientCounts)
    driven.push_back(measureClientsRow(benchmark, n, std::chrono::microseconds(-1)));
  double drivenPeak = peakPerSecond(driven);
  std::printf("  closed loops over N keep-alive connections driven by 2 client threads with epoll, "
              "as wrk drives them (the same request bytes):\n");
  printClientsRows(benchmark.calls, driven, drivenPeak);
  std::printf("  driven by 2 threads: throughput at 64 and 256 connections %.2fx and %.2fx the "
              "peak (target >= 0.8x)\n",
              driven[3].perSecond / drivenPeak, driven[4].perSecond / drivenPeak);
}

/// Runs `benchmark` for 1, 4, 16, 64 and 256 clients: closed loops (each client calls again
/// once answered: throughput), then the same clients paced together at half the closed
/// loops' peak, no client asked for more than half of what one client managed alone (latency
/// at a load the server carries). Prints both tables and the figures the targets name.
inline void runClientsBenchmark(ClientsBenchmark benchmark) {
  ConcurrentRun &run = benchmark.run;
  std::printf("  each row counts %lld ms after %lld ms of warm-up\n",
              static_cast<long long>(run.window.count()),
              static_cast<long long>(run.warmup.count()));
  std::vector<ClientsRow> closed;
  for (int n : kClientCounts)
    closed.push_back(measureClientsRow(benchmark, n, std::chrono::microseconds(0)));
  double peak = peakPerSecond(closed);
  std::printf("  closed loops (each client calls again once answered):\n");
  printClientsRows(benchmark.calls, closed, peak);
  std::vector<ClientsRow> paced;
  for (int n : kClientCounts) {
    double offered = std::min(0.5 * peak, 0.5 * n * closed[0].perSecond);
    paced.push_back(measureClientsRow(
        benchmark, n, std::chrono::microseconds(static_cast<int64_t>(n * 1e6 / offered))));
  }
  std::printf("  paced (all clients together at half the peak, each at most half one client's "
              "rate; times from when a call was due):\n");
  printClientsRows(benchmark.calls, paced, peak);
  // The same closed loops while one more client holds 2000 connections open that send
  // nothing (made just before the row, which ends before the server's 5 s keep-alive timeout
  // closes them): idle connections cost the server no thread, so no throughput.
  std::vector<ClientsRow> besideIdle;
  for (int n : {64, 256}) {
    courier::testing::ConnectionFlood idle(benchmark.port, {2000, 0, 0});
    besideIdle.push_back(measureClientsRow(benchmark, n, std::chrono::microseconds(0)));
  }
  std::printf("  closed loops beside 2000 idle connections of one more client:\n");
  printClientsRows(benchmark.calls, besideIdle, peak);
  std::printf("  beside 2000 idle connections: %.2fx and %.2fx the rows without them at 64 and 256 "
              "clients (target >= 0.9x)\n",
              besideIdle[0].perSecond / closed[3].perSecond,
              besideIdle[1].perSecond / closed[4].perSecond);
  std::printf("  throughput at 64 and 256 clients %.2fx and %.2fx the peak (target >= 0.8x); p99 "
              "at 256 %.1fx p99 at 1, paced (target <= 50x; closed loops: %.1fx)\n",
              closed[3].perSecond / peak, closed[4].perSecond / peak,
              paced[4].us.p99 / paced[0].us.p99, closed[4].us.p99 / closed[0].us.p99);
  if (!benchmark.rawRequest)
    return;
  runDrivenClientsRows(benchmark);
}

} // namespace courier::bench

#endif // COURIER_BENCH_BENCHSUPPORT_H
