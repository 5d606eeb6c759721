// File: paddock/internal/load_slots.h
// -----------------------------------------------------------------------------
// `LoadSlots`: a counting semaphore bounding the loader calls a cache runs at
// once (`Options::max_concurrent_loads`). A limit of 0 means unlimited and
// costs nothing. A holder older than the maximum load age no longer counts
// against the limit, so one hung loader cannot starve every other key.

#ifndef PADDOCK_INTERNAL_LOAD_SLOTS_H_
#define PADDOCK_INTERNAL_LOAD_SLOTS_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

class LoadSlots {
 public:
  // A taken slot; 0 is no slot. Hand it back with Release().
  using Ticket = uint64_t;

  LoadSlots(int limit, absl::Duration max_age)
      : limit_(limit), max_age_(ToNanosSaturated(max_age)) {}

  // Takes a slot if one is free at `now` (cache-clock nanoseconds). Never
  // blocks. Thread-safe.
  Ticket TryAcquire(int64_t now) {
    if (limit_ == 0) return kUnlimited;
    std::lock_guard<std::mutex> lock(mu_);
    return TakeLocked(now);
  }

  // Takes a slot, waiting up to `timeout` (real time) for one; `now()` reads
  // the cache clock. Returns 0 on timeout. Thread-safe.
  template <typename NowFn>
  Ticket AcquireFor(absl::Duration timeout, const NowFn& now) {
    if (limit_ == 0) return kUnlimited;
    std::unique_lock<std::mutex> lock(mu_);
    Ticket ticket = 0;
    auto taken = [&] { return (ticket = TakeLocked(now())) != 0; };
    if (IsForever(timeout)) {
      cv_.wait(lock, taken);
    } else {
      cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), taken);
    }
    return ticket;
  }

  // Returns a slot. A slot taken away from a too-old holder is not returned
  // twice. Thread-safe.
  void Release(Ticket ticket) {
    if (limit_ == 0 || ticket == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (holders_.erase(ticket) == 0) return;
    }
    cv_.notify_one();
  }

 private:
  static constexpr Ticket kUnlimited = 1;

  Ticket TakeLocked(int64_t now) {
    if (holders_.size() >= static_cast<size_t>(limit_)) {
      auto oldest = holders_.begin();
      for (auto it = holders_.begin(); it != holders_.end(); ++it) {
        if (it->second < oldest->second) oldest = it;
      }
      if (now - oldest->second < max_age_) return 0;
      holders_.erase(oldest);  // Hung: stops counting against the limit.
    }
    const Ticket ticket = next_ticket_++;
    holders_.emplace(ticket, now);
    return ticket;
  }

  const int limit_;
  const int64_t max_age_;
  std::mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<Ticket, int64_t> holders_;  // Guarded by mu_.
  Ticket next_ticket_ = 1;                        // Guarded by mu_.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_SLOTS_H_
