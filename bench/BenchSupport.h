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
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
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

/// What callConcurrently measured: every timed call's microseconds, and the seconds from the
/// start to the end of the last call.
struct ConcurrentCalls {
  std::vector<double> us;
  double seconds;
};

/// `clients` threads each make `once(client)` once untimed (connecting, warming up), then,
/// started together, `each` times timed.
inline ConcurrentCalls callConcurrently(int clients, int each,
                                        const std::function<void(int client)> &once) {
  std::vector<std::vector<double>> times(clients);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      once(c);
      ready++;
      while (!go)
        std::this_thread::yield();
      for (int i = 0; i < each; ++i) {
        auto start = std::chrono::steady_clock::now();
        once(c);
        times[c].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
    });
  while (ready < clients)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread &thread : threads)
    thread.join();
  ConcurrentCalls calls{
      {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  for (const std::vector<double> &client : times)
    calls.us.insert(calls.us.end(), client.begin(), client.end());
  return calls;
}

} // namespace courier::bench

#endif // COURIER_BENCH_BENCHSUPPORT_H
