// File: paddock/internal/load_slots.h
// -----------------------------------------------------------------------------
// `LoadSlots`: a counting semaphore bounding the loader calls a cache runs at
// once (`Options::max_concurrent_loads`). A limit of 0 means unlimited and
// costs nothing.

#ifndef PADDOCK_INTERNAL_LOAD_SLOTS_H_
#define PADDOCK_INTERNAL_LOAD_SLOTS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace paddock::internal {

class LoadSlots {
 public:
  explicit LoadSlots(int limit) : limit_(limit) {}

  // Takes a slot if one is free. Never blocks. Thread-safe.
  bool TryAcquire() {
    if (limit_ == 0) return true;
    std::lock_guard<std::mutex> lock(mu_);
    if (in_use_ >= limit_) return false;
    ++in_use_;
    return true;
  }

  // Takes a slot, waiting up to `timeout` (real time) for one. Returns false
  // on timeout. Thread-safe.
  bool AcquireFor(absl::Duration timeout) {
    if (limit_ == 0) return true;
    std::unique_lock<std::mutex> lock(mu_);
    auto free = [&] { return in_use_ < limit_; };
    if (timeout == absl::InfiniteDuration()) {
      cv_.wait(lock, free);
    } else if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), free)) {
      return false;
    }
    ++in_use_;
    return true;
  }

  // Returns a slot taken by a successful acquire. Thread-safe.
  void Release() {
    if (limit_ == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_use_;
    }
    cv_.notify_one();
  }

 private:
  const int limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_use_ = 0;  // Guarded by mu_.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_SLOTS_H_
