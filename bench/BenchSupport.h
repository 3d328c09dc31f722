// What every benchmark program needs to fail loudly: a benchmark that cannot do what it
// measures stops with the reason rather than printing figures of something else.
#ifndef COURIER_BENCH_BENCHSUPPORT_H
#define COURIER_BENCH_BENCHSUPPORT_H

#include "transport/Backend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <sys/resource.h>
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

/// `run.clients` threads each call `once(client)` once untimed (connecting), then, started
/// together, call it until the window closes. As wrk and Triton's perf_analyzer count, the
/// figures are those of the window alone: no client has finished early and none has yet to
/// start, so the throughput is the server's under that many clients rather than that of
/// whichever clients were served last.
inline ConcurrentCalls callConcurrently(const ConcurrentRun &run,
                                        const std::function<void(int client)> &once) {
  using Clock = std::chrono::steady_clock;
  struct ClientTimes {
    std::vector<double> us;
    double slowestUs = 0;
  };
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
        double us = std::chrono::duration<double, std::micro>(end - start).count();
        if (end >= opens)
          times[c].slowestUs = std::max(times[c].slowestUs, us);
        if (end >= opens && end < closes)
          times[c].us.push_back(us);
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
  ConcurrentRun run;
};

/// Runs `benchmark` for 1, 4, 16, 64 and 256 clients: closed loops (each client calls again
/// once answered: throughput), then the same clients paced together at half the closed
/// loops' peak, no client asked for more than half of what one client managed alone (latency
/// at a load the server carries). Prints both tables and the figures the targets name.
inline void runClientsBenchmark(ClientsBenchmark benchmark) {
  ConcurrentRun &run = benchmark.run;
  std::printf("  each row counts %lld ms after %lld ms of warm-up\n",
              static_cast<long long>(run.window.count()),
              static_cast<long long>(run.warmup.count()));
  auto measureRow = [&](int n, std::chrono::microseconds pace) {
    std::function<void(int)> call = benchmark.connect(n);
    run.clients = n;
    run.pace = pace;
    double serverCpu = 0, clientCpu = 0;
    run.atWindowOpen = [&] {
      serverCpu = -benchmark.serverCpuSeconds();
      clientCpu = -selfCpuSeconds();
    };
    run.atWindowClose = [&] {
      serverCpu += benchmark.serverCpuSeconds();
      clientCpu += selfCpuSeconds();
    };
    ConcurrentCalls calls = callConcurrently(run, call);
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
  };
  auto print = [&](const std::vector<ClientsRow> &rows, double peak) {
    std::printf("  clients | %9s/s | of peak |   p50 us |   p99 us | slowest ms | fewest | "
                "CPU us/call: server, clients\n",
                benchmark.calls);
    for (const ClientsRow &row : rows)
      std::printf("  %7d | %11.0f | %7.2f | %8.1f | %8.1f | %10.1f | %6zu | %6.1f, %6.1f\n",
                  row.clients, row.perSecond, row.perSecond / peak, row.us.p50, row.us.p99,
                  row.slowestUs / 1000, row.fewest, row.serverCpuUs, row.clientCpuUs);
  };
  const int counts[] = {1, 4, 16, 64, 256};
  std::vector<ClientsRow> closed;
  for (int n : counts)
    closed.push_back(measureRow(n, std::chrono::microseconds(0)));
  double peak = 0;
  for (const ClientsRow &row : closed)
    peak = std::max(peak, row.perSecond);
  std::printf("  closed loops (each client calls again once answered):\n");
  print(closed, peak);
  std::vector<ClientsRow> paced;
  for (int n : counts) {
    double offered = std::min(0.5 * peak, 0.5 * n * closed[0].perSecond);
    paced.push_back(
        measureRow(n, std::chrono::microseconds(static_cast<int64_t>(n * 1e6 / offered))));
  }
  std::printf("  paced (all clients together at half the peak, each at most half one client's "
              "rate; times from when a call was due):\n");
  print(paced, peak);
  std::printf("  throughput at 64 and 256 clients %.2fx and %.2fx the peak (target >= 0.8x); p99 "
              "at 256 %.1fx p99 at 1, paced (target <= 50x; closed loops: %.1fx)\n",
              closed[3].perSecond / peak, closed[4].perSecond / peak,
              paced[4].us.p99 / paced[0].us.p99, closed[4].us.p99 / closed[0].us.p99);
}

} // namespace courier::bench

#endif // COURIER_BENCH_BENCHSUPPORT_H
