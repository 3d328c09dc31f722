// Threads are detached and counted: one that ends removes itself under the lock, and
// shutdown() waits for the count to reach zero.
#include "transport/ConnectionPool.h"

#include <algorithm>
#include <system_error>
#include <thread>

namespace courier::transport {

namespace {
thread_local bool onRefusalThread = false;
} // namespace

ConnectionPool::ConnectionPool(unsigned limit, unsigned kept)
    : most(std::max(1u, limit)), kept(kept) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::refusingConnection() { return onRefusalThread; }

void ConnectionPool::markRefusing(bool refusing) { onRefusalThread = refusing; }

void ConnectionPool::enqueue(std::function<void()> connection) {
  std::lock_guard<std::mutex> lock(mutex);
  bool admit = admitted < most;
  Lane &lane = admit ? serve : refuse;
  if (admit)
    ++admitted;
  lane.queue.push_back(std::move(connection));
  if (lane.idle > 0)
    lane.work.notify_one();
  if (lane.idle < lane.queue.size() && (admit || refuse.threads < kRefusers))
    startThread(lane, !admit);
  // Else a refusal waits for one of the refusal threads, each busy with a request of its own.
}

void ConnectionPool::startThread(Lane &lane, bool refusing) {
  ++lane.threads;
  try {
    std::thread([this, &lane, refusing] { run(lane, refusing); }).detach();
  } catch (const std::system_error &) {
    // No thread to be had (the process's limit): the lane's other threads take the task in
    // turn; with none, it runs when one starts for a later connection.
    --lane.threads;
  }
}

void ConnectionPool::run(Lane &lane, bool refusing) {
  onRefusalThread = refusing;
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    ++lane.idle;
    bool timedOut =
        !lane.work.wait_for(lock, kIdleLife, [&] { return stopping || !lane.queue.empty(); });
    --lane.idle;
    if (lane.queue.empty() && (stopping || (timedOut && lane.threads > kept)))
      break;
    if (lane.queue.empty())
      continue;
    std::function<void()> connection = std::move(lane.queue.front());
    lane.queue.pop_front();
    lock.unlock();
    connection();
    connection = nullptr;
    lock.lock();
    if (!refusing)
      --admitted;
  }
  --lane.threads;
  ended.notify_all();
}

void ConnectionPool::shutdown() {
  std::unique_lock<std::mutex> lock(mutex);
  stopping = true;
  serve.work.notify_all();
  refuse.work.notify_all();
  ended.wait(lock, [&] { return serve.threads == 0 && refuse.threads == 0; });
}

} // namespace courier::transport
