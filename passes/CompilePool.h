// A bounded set of threads for the code generation of target modules, shared by the compiles
// that use it, and the batch of tasks one compile hands to it.
#ifndef COURIER_PASSES_COMPILEPOOL_H
#define COURIER_PASSES_COMPILEPOOL_H

#include <cstddef>
#include <functional>
#include <memory>

namespace courier {

/// Threads that run compile tasks, first come first served. They start with the first task
/// and stop when the pool is destroyed (after the tasks queued then). A task runs wholly on
/// one thread and must not wait for another task of the pool.
class CompilePool {
public:
  /// At most `threads` threads (0: none; every task then runs on the thread that waits for
  /// it), each on a stack of `stackBytes` (0: the system's default). Where that much address
  /// space cannot be had (a process under RLIMIT_AS), a thread gets a smaller stack, down to
  /// an eighth of it, or is not started.
  CompilePool(unsigned threads, size_t stackBytes);
  ~CompilePool();
  CompilePool(const CompilePool &) = delete;
  CompilePool &operator=(const CompilePool &) = delete;

  /// The number of threads the pool may start.
  unsigned threads() const { return maxThreads; }

  struct State;

private:
  friend class CompileBatch;
  unsigned maxThreads;
  std::shared_ptr<State> state;
};

/// The tasks of one compile. The thread that waits for them runs those no pool thread has
/// taken yet, so a batch finishes even when every pool thread is busy with other batches (or
/// there are none), and a compile never occupies more than the pool's threads and its own.
class CompileBatch {
public:
  /// Tasks go to `pool`; with none, each runs in wait().
  explicit CompileBatch(CompilePool *pool);
  /// Waits for the tasks still running or queued.
  ~CompileBatch();
  CompileBatch(const CompileBatch &) = delete;
  CompileBatch &operator=(const CompileBatch &) = delete;

  /// Queues `task`; a pool thread may start it at once.
  void add(std::function<void()> task);
  /// Runs the tasks no thread took yet, in the order they were added, then waits for those
  /// that pool threads run. Returns when every task added so far has finished.
  void wait();

private:
  friend struct CompilePool::State;
  std::shared_ptr<CompilePool::State> state;
  /// Tasks of this batch queued or running; guarded by the state's mutex.
  size_t outstanding = 0;
};

/// The number of threads code generation uses when told 0: the cores this process may run
/// on (its affinity mask), at least 1.
unsigned defaultCompileJobs();

} // namespace courier

#endif // COURIER_PASSES_COMPILEPOOL_H
