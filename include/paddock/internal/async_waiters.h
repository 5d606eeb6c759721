// File: paddock/internal/async_waiters.h
// -----------------------------------------------------------------------------
// The asynchronous waiters of one cache (`GetAsync`, `Await`): callers that
// wait for a load without a thread. `AsyncWaiters` keeps every pending waiter
// so that the cache's destructor can complete each exactly once, and runs one
// timer thread per cache (started with the first waiter that has a finite
// `wait_timeout`) that completes waiters whose wait times out. A waiter is
// completed exactly once, by whoever claims it first: the load's outcome,
// its timeout, or the destructor.

#ifndef PADDOCK_INTERNAL_ASYNC_WAITERS_H_
#define PADDOCK_INTERNAL_ASYNC_WAITERS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {

class AsyncWaiterBase {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  explicit AsyncWaiterBase(SteadyTime deadline) : deadline_(deadline) {}
  virtual ~AsyncWaiterBase() = default;
  AsyncWaiterBase(const AsyncWaiterBase&) = delete;
  AsyncWaiterBase& operator=(const AsyncWaiterBase&) = delete;

  // Takes the right to complete this waiter. True for exactly one caller
  // (until that caller gives it back with Unclaim).
  bool Claim() { return !claimed_.exchange(true, std::memory_order_acq_rel); }
  // Gives back a claim that completed nothing.
  void Unclaim() { claimed_.store(false, std::memory_order_release); }
  bool claimed() const { return claimed_.load(std::memory_order_acquire); }
  SteadyTime deadline() const { return deadline_; }

  // Completes a claimed waiter whose wait timed out and returns true; or,
  // if its cache is being destroyed, does nothing and returns false (the
  // destructor cancels it, on its own thread).
  virtual bool Expire() = 0;
  // Completes a claimed waiter whose cache is being destroyed.
  virtual void Cancel() = 0;

 private:
  friend class AsyncWaiters;
  const SteadyTime deadline_;
  std::atomic<bool> claimed_{false};
  uint64_t id_ = 0;     // In its AsyncWaiters; set by Add.
  bool timed_ = false;  // Has a timer there; set by Add.
};

class AsyncWaiters {
 public:
  AsyncWaiters() = default;
  // Stops the timer thread. Call CancelAll first.
  ~AsyncWaiters();
  AsyncWaiters(const AsyncWaiters&) = delete;
  AsyncWaiters& operator=(const AsyncWaiters&) = delete;

  // Keeps `w` until Remove; with a deadline other than SteadyTime::max(), the
  // timer claims and expires it then. May start the timer thread (throws
  // std::system_error if it cannot; `w` is then not kept).
  void Add(const std::shared_ptr<AsyncWaiterBase>& w);

  // Forgets `w` (completed by its claimer).
  void Remove(const AsyncWaiterBase* w);

  // Stops the timer, then claims and cancels every waiter still pending, on
  // the calling thread. Returns how many were cancelled.
  size_t CancelAll();

  size_t pending() const;
  // Timers kept, some perhaps of waiters answered already; for tests.
  size_t timers_held() const;

 private:
  // By id, not by pointer: a waiter answered before its deadline is freed
  // then (a weak_ptr here would keep its allocation until the deadline).
  struct Timer {
    AsyncWaiterBase::SteadyTime deadline;
    uint64_t id;
    bool operator>(const Timer& other) const {
      return deadline > other.deadline;
    }
  };

  void RunTimer();

  mutable Mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<AsyncWaiterBase>> pending_
      ABSL_GUARDED_BY(mu_);
  // A min-heap by deadline (std::push_heap with std::greater). A waiter
  // answered before its deadline leaves its timer behind; Remove drops such
  // timers once they are more than half the heap, so that the heap tracks
  // the waiters pending, not every miss within one wait_timeout.
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  size_t timed_pending_ ABSL_GUARDED_BY(mu_) = 0;  // Pending, with a timer.
  // Changed whenever timers_ is (for the timer thread's wait).
  uint64_t timers_version_ ABSL_GUARDED_BY(mu_) = 0;
  static constexpr size_t kMinTimersToCompact = 64;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;  // Started by the first Add with a deadline.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ASYNC_WAITERS_H_
