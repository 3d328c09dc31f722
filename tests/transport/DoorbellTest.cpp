// Doorbells whose waiter says when it may be asleep (doorbell::set and the flagged
// doorbell::sleep): ringing skips the system call while the waiter polls awake, and must
// never lose the wake of one that sleeps. Real futexes between two threads.
#include "transport/SharedMemory.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

using namespace courier::transport;
using Clock = std::chrono::steady_clock;

namespace {

/// Far longer than any wake takes: a wait that lasts this long was never woken.
constexpr auto kSleepTimeout = std::chrono::seconds(20);

/// Sleeps (flagged) until `word` leaves `seen`; returns how long that took.
Clock::duration sleepUntilChanged(std::atomic<uint32_t> &word, uint32_t seen,
                                  std::atomic<uint32_t> &sleeping, Clock::duration timeout) {
  auto start = Clock::now();
  while (word.load() == seen && Clock::now() - start < timeout)
    doorbell::sleep(word, seen, timeout, sleeping);
  return Clock::now() - start;
}

} // namespace

TEST_CASE("a doorbell set while its waiter sleeps wakes it", "[doorbell]") {
  std::atomic<uint32_t> word{0}, sleeping{0};
  Clock::duration waited{};
  std::thread waiter([&] { waited = sleepUntilChanged(word, 0, sleeping, kSleepTimeout); });
  // Once the flag is up the waiter is asleep or about to be: only the wake can end its wait.
  auto giveUp = Clock::now() + std::chrono::seconds(10);
  while (sleeping.load() == 0 && Clock::now() < giveUp)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(sleeping.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  doorbell::set(word, 1, sleeping);
  waiter.join();
  CHECK(word.load() == 1);
  CHECK(waited < kSleepTimeout / 2);
  CHECK(sleeping.load() == 0);
}

TEST_CASE("a flagged sleep on a word that already changed returns at once", "[doorbell]") {
  std::atomic<uint32_t> word{0}, sleeping{0};
  doorbell::set(word, 7, sleeping); // No one sleeps: the word alone tells.
  CHECK(word.load() == 7);
  auto start = Clock::now();
  doorbell::sleep(word, 0, kSleepTimeout, sleeping);
  CHECK(Clock::now() - start < kSleepTimeout / 2);
  CHECK(sleeping.load() == 0);
  CHECK(doorbell::spin(word, 0, std::chrono::microseconds(1)));
}

TEST_CASE("two threads ringing each other through flagged doorbells lose no wake", "[doorbell]") {
  // Every wait sleeps at once (no polling awake first), so each round trip races a set
  // against a sleep on both sides; a lost wake would show as a wait as long as the timeout.
  constexpr uint32_t kRounds = 2000;
  constexpr auto kTimeout = std::chrono::seconds(5);
  std::atomic<uint32_t> request{0}, reply{0}, requestSleeping{0}, replySleeping{0};
  std::atomic<bool> lost{false};
  std::thread answerer([&] {
    for (uint32_t i = 1; i <= kRounds; ++i) {
      if (sleepUntilChanged(request, i - 1, requestSleeping, kTimeout) >= kTimeout)
        lost = true;
      doorbell::set(reply, i, replySleeping);
    }
  });
  for (uint32_t i = 1; i <= kRounds && !lost; ++i) {
    doorbell::set(request, i, requestSleeping);
    if (sleepUntilChanged(reply, i - 1, replySleeping, kTimeout) >= kTimeout)
      lost = true;
  }
  // If a wake was lost, let the answerer finish its rounds rather than wait on each.
  for (uint32_t i = request.load() + 1; lost && i <= kRounds; ++i)
    doorbell::set(request, i, requestSleeping);
  answerer.join();
  CHECK_FALSE(lost.load());
  CHECK(reply.load() == kRounds);
}

TEST_CASE("a sleep on two doorbells wakes for either, and a poll of both says which moved",
          "[doorbell]") {
  // As a worker sleeps on its executor's doorbell and a same-host channel's at once.
  for (int which : {1, 2}) {
    INFO("ringing word " << which);
    std::atomic<uint32_t> first{0}, second{0}, firstSleeping{0}, secondSleeping{0};
    std::atomic<bool> woke{false};
    Clock::duration waited{};
    std::thread waiter([&] {
      auto start = Clock::now();
      while (first.load() == 0 && second.load() == 0 && Clock::now() - start < kSleepTimeout)
        doorbell::sleepEither(first, 0, firstSleeping, second, 0, secondSleeping, kSleepTimeout);
      waited = Clock::now() - start;
      woke = true;
    });
    auto giveUp = Clock::now() + std::chrono::seconds(10);
    while ((firstSleeping.load() == 0 || secondSleeping.load() == 0) && Clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(secondSleeping.load() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (which == 1)
      doorbell::set(first, 1, firstSleeping);
    else
      doorbell::set(second, 1, secondSleeping);
    waiter.join();
    CHECK(woke.load());
    CHECK(waited < kSleepTimeout / 2);
    CHECK(firstSleeping.load() == 0);
    CHECK(secondSleeping.load() == 0);
    // The poll reports which word moved, the first when both did.
    CHECK(doorbell::spinEither(first, 0, second, 0, std::chrono::microseconds(1),
                               doorbell::kPauseFirst) == which);
  }
  std::atomic<uint32_t> a{3}, b{4};
  CHECK(doorbell::spinEither(a, 3, b, 4, std::chrono::microseconds(200), doorbell::kPauseFirst) ==
        0);
  b = 5;
  a = 4;
  CHECK(doorbell::spinEither(a, 3, b, 4, std::chrono::microseconds(1), doorbell::kPauseFirst) == 1);
}
