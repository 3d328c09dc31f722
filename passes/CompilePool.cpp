// The compile pool: threads on stacks of a chosen size (pthreads: std::thread and llvm's
// thread pool take the system's default), and batches whose waiter helps.
#include "passes/CompilePool.h"

#include "llvm/Support/Threading.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <utility>
#include <vector>

namespace courier {

struct CompilePool::State {
  std::mutex mutex;
  std::condition_variable work; ///< A task was queued, or the pool stops.
  std::condition_variable done; ///< A batch's last task finished.
  std::deque<std::pair<CompileBatch *, std::function<void()>>> queue;
  std::vector<pthread_t> threads;
  bool stopping = false;

  /// Runs queued tasks until the pool stops and nothing is left.
  void serve() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      work.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty())
        return;
      auto [batch, task] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      task();
      lock.lock();
      finished(*batch);
    }
  }

  /// With the mutex held: one task of `batch` has finished.
  void finished(CompileBatch &batch);
};

namespace {

void *runThread(void *raw) {
  auto *state = static_cast<CompilePool::State *>(raw);
  state->serve();
  return nullptr;
}

/// Starts a thread serving `state` on a stack of `stackBytes` (the default for 0), or a
/// smaller one down to an eighth of it; false if none could be started.
bool startThread(CompilePool::State &state, size_t stackBytes) {
  for (size_t bytes = stackBytes; bytes == 0 || bytes >= stackBytes / 8; bytes /= 2) {
    pthread_attr_t attributes;
    if (pthread_attr_init(&attributes) != 0)
      return false;
    if (bytes)
      pthread_attr_setstacksize(&attributes, bytes);
    pthread_t thread;
    int failed = pthread_create(&thread, &attributes, runThread, &state);
    pthread_attr_destroy(&attributes);
    if (!failed) {
      state.threads.push_back(thread);
      return true;
    }
    if (bytes == 0)
      return false;
  }
  return false;
}

} // namespace

// CompileBatch is complete here: State's members reach into it.
void CompilePool::State::finished(CompileBatch &batch) {
  if (--batch.outstanding == 0)
    done.notify_all();
}

CompilePool::CompilePool(unsigned threads, size_t stackBytes)
    : maxThreads(threads), state(std::make_shared<State>()) {
  std::lock_guard<std::mutex> lock(state->mutex);
  for (unsigned i = 0; i < threads; ++i)
    if (!startThread(*state, stackBytes))
      break;
}

CompilePool::~CompilePool() {
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->stopping = true;
  }
  state->work.notify_all();
  for (pthread_t thread : state->threads)
    pthread_join(thread, nullptr);
}

CompileBatch::CompileBatch(CompilePool *pool)
    : state(pool ? pool->state : std::make_shared<CompilePool::State>()) {}

CompileBatch::~CompileBatch() { wait(); }

void CompileBatch::add(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->queue.emplace_back(this, std::move(task));
    ++outstanding;
  }
  state->work.notify_one();
}

void CompileBatch::wait() {
  std::unique_lock<std::mutex> lock(state->mutex);
  while (true) {
    auto own = std::find_if(state->queue.begin(), state->queue.end(),
                            [&](const auto &queued) { return queued.first == this; });
    if (own != state->queue.end()) {
      std::function<void()> task = std::move(own->second);
      state->queue.erase(own);
      lock.unlock();
      task();
      lock.lock();
      state->finished(*this);
      continue;
    }
    if (outstanding == 0)
      return;
    state->done.wait(lock);
  }
}

unsigned defaultCompileJobs() {
  return std::max(1u, llvm::hardware_concurrency().compute_thread_count());
}

} // namespace courier
