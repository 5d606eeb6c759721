// AsyncWaiters: a cache's pending asynchronous waiters and their timer.

#include "paddock/internal/async_waiters.h"

#include <utility>

namespace paddock::internal {

AsyncWaiters::~AsyncWaiters() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void AsyncWaiters::Add(const std::shared_ptr<AsyncWaiterBase>& w) {
  const bool timed = w->deadline() != AsyncWaiterBase::SteadyTime::max();
  {
    MutexLock lock(&mu_);
    if (timed && !timer_.joinable()) {
      timer_ = std::thread([this] { RunTimer(); });  // May throw: kept none.
    }
    w->id_ = next_id_++;
    pending_.emplace(w->id_, w);
    if (timed) timers_.push(Timer{w->deadline(), w->id_});
  }
  if (timed) cv_.notify_one();
}

void AsyncWaiters::Remove(const AsyncWaiterBase* w) {
  std::shared_ptr<AsyncWaiterBase> dropped;  // Destroyed after the lock.
  MutexLock lock(&mu_);
  if (auto it = pending_.find(w->id_); it != pending_.end()) {
    dropped = std::move(it->second);
    pending_.erase(it);
  }
}

size_t AsyncWaiters::CancelAll() {
  absl::flat_hash_map<uint64_t, std::shared_ptr<AsyncWaiterBase>> pending;
  {
    MutexLock lock(&mu_);
    pending.swap(pending_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  size_t cancelled = 0;
  for (auto& [id, w] : pending) {
    if (w->Claim()) {
      w->Cancel();
      ++cancelled;
    }
  }
  return cancelled;
}

size_t AsyncWaiters::pending() const {
  MutexLock lock(&mu_);
  return pending_.size();
}

void AsyncWaiters::RunTimer() {
  for (;;) {
    std::shared_ptr<AsyncWaiterBase> due;
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        if (timers_.empty()) {
          mu_.Await(cv_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return stopping_ || !timers_.empty();
          });
          continue;
        }
        const Timer next = timers_.top();
        if (std::chrono::steady_clock::now() < next.deadline) {
          const size_t size = timers_.size();
          mu_.AwaitUntil(cv_, next.deadline,
                         [this, size]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                           return stopping_ || timers_.size() != size;
                         });
          continue;
        }
        timers_.pop();
        // Still pending (not answered, nor given up by ~Cache): a second
        // reference, so that nothing of it dies under the lock.
        if (auto it = pending_.find(next.id); it != pending_.end()) {
          due = it->second;
          break;
        }
      }
    }
    // Outside the lock: expiring runs the waiter's callback. One whose
    // cache is closing is left to CancelAll, which joins this thread before
    // it cancels what is pending.
    if (due->Claim()) {
      if (due->Expire()) {
        Remove(due.get());
      } else {
        due->Unclaim();
      }
    }
  }
}

}  // namespace paddock::internal
