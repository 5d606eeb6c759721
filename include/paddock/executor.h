// File: paddock/executor.h
// -----------------------------------------------------------------------------
// Where a cache runs its background work (refreshes). `Executor` is the
// interface; `ThreadPool` is a fixed pool of threads; `ManualExecutor` queues
// tasks until a test runs them.

#ifndef PADDOCK_EXECUTOR_H_
#define PADDOCK_EXECUTOR_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "paddock/internal/mutex.h"

namespace paddock {

// A unit of background work. Move-only; runs at most once.
using Task = absl::AnyInvocable<void() &&>;

// Executor
//
// Runs tasks some time after they are scheduled. Implementations must be
// thread-safe. A cache never schedules a task that blocks on another task of
// the same executor.
class Executor {
 public:
  virtual ~Executor() = default;

  // Executor::Schedule()
  //
  // Arranges for `task` to run once. Should not block for long: a cache calls
  // it from a request's thread. Thread-safe.
  virtual void Schedule(Task task) = 0;
};

// ThreadPool
//
// A fixed number of threads sharing one FIFO queue.
class ThreadPool final : public Executor {
 public:
  // Starts `threads` threads. Throws `std::invalid_argument` if `threads < 1`,
  // and `std::system_error` if a thread cannot be started (the threads
  // started before it are stopped and joined first).
  explicit ThreadPool(int threads);

  // Runs every task still queued, then joins the threads. Blocks until the
  // queue is empty and every running task has returned. Must not be called
  // from one of the pool's own threads.
  ~ThreadPool() override;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // ThreadPool::Schedule()
  //
  // Queues `task` (unbounded queue). Never blocks beyond a short lock.
  // Thread-safe. A task that throws terminates the process, as an exception
  // escaping `std::thread` would.
  void Schedule(Task task) override;

  // ThreadPool::threads()
  //
  // Returns the number of threads.
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void Work();
  void StopAndJoin();

  internal::Mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// ManualExecutor
//
// Queues tasks and runs them only in `RunOne()` / `RunAll()`, on the calling
// thread. For deterministic tests. Thread-safe.
class ManualExecutor final : public Executor {
 public:
  ManualExecutor() = default;

  // Destroys queued tasks without running them.
  ~ManualExecutor() override = default;

  // ManualExecutor::Schedule()
  //
  // Queues `task`. Never blocks beyond a short lock. Thread-safe.
  void Schedule(Task task) override;

  // ManualExecutor::RunOne()
  //
  // Runs the oldest queued task on the calling thread. Returns false if none
  // was queued. Blocks for as long as the task runs.
  bool RunOne();

  // ManualExecutor::RunAll()
  //
  // Runs queued tasks on the calling thread, including those queued while
  // running, until none is left. Returns how many ran.
  size_t RunAll();

  // ManualExecutor::pending()
  //
  // Returns the number of queued tasks.
  size_t pending() const;

 private:
  mutable internal::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paddock

#endif  // PADDOCK_EXECUTOR_H_
