// AsyncWaiters: a cache's pending asynchronous waiters and their timer.

#include "paddock/internal/async_waiters.h"

#include <algorithm>
#include <functional>
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
    w->timed_ = timed;
    // The timer first: if keeping the waiter then throws, a timer whose id
    // is not pending is skipped.
    if (timed) {
      timers_.push_back(Timer{w->deadline(), w->id_});
      std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
      ++timers_version_;
    }
    pending_.emplace(w->id_, w);
    if (timed) ++timed_pending_;
  }
  if (timed) cv_.notify_one();
}

void AsyncWaiters::Remove(const AsyncWaiterBase* w) {
  std::shared_ptr<AsyncWaiterBase> dropped;  // Destroyed after the lock.
  MutexLock lock(&mu_);
  if (auto it = pending_.find(w->id_); it != pending_.end()) {
    dropped = std::move(it->second);
    pending_.erase(it);
    if (dropped->timed_) --timed_pending_;
  }
  // Most waiters are answered long before their deadline: drop their timers
  // once they outnumber the live ones (in place, so nothing allocates;
  // amortised O(1) per waiter).
  if (timers_.size() > kMinTimersToCompact &&
      timers_.size() > 2 * timed_pending_) {
    std::erase_if(timers_,
                  [this](const Timer& t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                    return !pending_.contains(t.id);
                  });
    std::make_heap(timers_.begin(), timers_.end(), std::greater<>());
    ++timers_version_;
  }
}

size_t AsyncWaiters::CancelAll() {
  absl::flat_hash_map<uint64_t, std::shared_ptr<AsyncWaiterBase>> pending;
  {
    MutexLock lock(&mu_);
    pending.swap(pending_);
    timed_pending_ = 0;
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

size_t AsyncWaiters::timers_held() const {
  MutexLock lock(&mu_);
  return timers_.size();
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
        const Timer next = timers_.front();
        if (std::chrono::steady_clock::now() < next.deadline) {
          const uint64_t version = timers_version_;
          mu_.AwaitUntil(cv_, next.deadline,
                         [this, version]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                           return stopping_ || timers_version_ != version;
                         });
          continue;
        }
        std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
        timers_.pop_back();
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
