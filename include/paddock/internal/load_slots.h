// File: paddock/internal/load_slots.h
// -----------------------------------------------------------------------------
// `LoadSlots`: a counting semaphore bounding the loader calls a cache runs at
// once (`Options::max_concurrent_loads`). A limit of 0 means unlimited and
// costs nothing. A running holder older than the maximum load age no longer
// counts against the limit, so one hung loader cannot starve every other key:
// a waiter is woken when a slot is released and also looks again when the
// oldest holder reaches that age.
//
// A background refresh reserves its slot when it is queued (TryReserve) and
// starts holding it when it runs (Restart). A reservation is not a load: it
// never ages out, and a load that needs a slot and finds none free takes one
// (the newest) rather than wait, or fail, behind refreshes an executor has
// not started. The refresh then finds its reservation gone when it starts,
// and runs only if a slot is free by then.

#ifndef PADDOCK_INTERNAL_LOAD_SLOTS_H_
#define PADDOCK_INTERNAL_LOAD_SLOTS_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "paddock/internal/mutex.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

class LoadSlots {
 public:
  // A taken slot; 0 is no slot. Hand it back with Release().
  using Ticket = uint64_t;

  LoadSlots(int limit, absl::Duration max_age)
      : limit_(limit), max_age_(ToNanosSaturated(max_age)) {}

  // Takes a slot if one is free at `now` (cache-clock nanoseconds), taking a
  // reservation's if none is. Returns 0 if none can be taken. Never blocks.
  // Thread-safe.
  Ticket TryAcquire(int64_t now) {
    if (limit_ == 0) return kUnlimited;
    MutexLock lock(&mu_);
    return TakeLocked(now, Take::kLoad);
  }

  // Reserves a free slot for a load that is queued, not yet running; never
  // takes another's. Returns 0 if none is free. Never blocks. Thread-safe.
  Ticket TryReserve(int64_t now) {
    if (limit_ == 0) return kUnlimited;
    MutexLock lock(&mu_);
    return TakeLocked(now, Take::kReservation);
  }

  // A reserved load starts at `now`: returns `ticket`, now a running holder
  // from `now`, or, if a load took the reservation meanwhile, a free slot
  // (never another's reservation), or 0 if none is free. Never blocks.
  // Thread-safe.
  Ticket Restart(Ticket ticket, int64_t now) {
    if (limit_ == 0) return kUnlimited;
    MutexLock lock(&mu_);
    if (auto it = holders_.find(ticket); it != holders_.end()) {
      it->second = {now, /*reserved=*/false};
      return ticket;
    }
    return TakeLocked(now, Take::kStart);
  }

  // Takes a slot, waiting up to `timeout` (real time) for one; `now()` reads
  // the cache clock. Returns 0 on timeout. Thread-safe.
  template <typename NowFn>
  ABSL_ATTRIBUTE_ALWAYS_INLINE Ticket AcquireFor(absl::Duration timeout,
                                                 const NowFn& now) {
    if (limit_ == 0) return kUnlimited;  // Every miss passes here.
    return AcquireForLimited(timeout, now);
  }

  // Returns a slot (or a reservation). One taken away from a too-old holder,
  // or a reservation taken by a load, is not returned twice. Thread-safe.
  void Release(Ticket ticket) {
    if (limit_ == 0 || ticket == 0) return;
    {
      MutexLock lock(&mu_);
      if (holders_.erase(ticket) == 0) return;
      ++releases_;
    }
    cv_.notify_one();
  }

 private:
  template <typename NowFn>
  Ticket AcquireForLimited(absl::Duration timeout, const NowFn& now) {
    using SteadyClock = std::chrono::steady_clock;
    const bool forever = IsForever(timeout);
    const SteadyClock::time_point deadline =
        forever ? SteadyClock::time_point::max()
                : SteadyClock::now() + absl::ToChronoNanoseconds(timeout);
    MutexLock lock(&mu_);
    for (;;) {
      const int64_t cache_now = now();
      if (const Ticket ticket = TakeLocked(cache_now, Take::kLoad);
          ticket != 0) {
        return ticket;
      }
      const SteadyClock::time_point steady_now = SteadyClock::now();
      if (steady_now >= deadline) return 0;
      // Look again when the oldest holder ages out. The cache clock need not
      // run in real time (a ManualClock), so never sleep past kRecheck.
      const int64_t age = cache_now - OldestLocked();
      const int64_t until_age_out =
          std::clamp<int64_t>(age < 0 ? max_age_ : max_age_ - age, 0,
                              std::chrono::nanoseconds(kRecheck).count());
      const SteadyClock::time_point wake = std::min(
          deadline, steady_now + std::chrono::nanoseconds(until_age_out + 1));
      const uint64_t releases = releases_;
      mu_.AwaitUntil(cv_, wake, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return releases_ != releases;
      });
    }
  }

  static constexpr Ticket kUnlimited = 1;
  static constexpr std::chrono::milliseconds kRecheck{100};

  struct Holder {
    int64_t since;  // When it took the slot or, reserved, started.
    bool reserved;  // Queued, not running: never ages out; a load takes it.
  };
  // kLoad: a load that runs now, which may take a reservation.
  // kReservation: a queued load's reservation. kStart: a queued load that
  // lost its reservation and starts now.
  enum class Take { kLoad, kReservation, kStart };

  // When the oldest running holder took its slot, or the maximum if none.
  int64_t OldestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t oldest = std::numeric_limits<int64_t>::max();
    for (const auto& [ticket, holder] : holders_) {
      if (!holder.reserved) oldest = std::min(oldest, holder.since);
    }
    return oldest;
  }

  Ticket TakeLocked(int64_t now, Take take) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (holders_.size() >= static_cast<size_t>(limit_)) {
      // A hung load first: it stops counting against the limit. Then, for a
      // load, the newest reservation (the oldest is the likeliest to start
      // soon). Tickets only grow, so the newest has the largest.
      auto oldest = holders_.end();
      auto newest_reserved = holders_.end();
      for (auto it = holders_.begin(); it != holders_.end(); ++it) {
        if (it->second.reserved) {
          if (newest_reserved == holders_.end() ||
              it->first > newest_reserved->first) {
            newest_reserved = it;
          }
        } else if (oldest == holders_.end() ||
                   it->second.since < oldest->second.since) {
          oldest = it;
        }
      }
      if (oldest != holders_.end() && now - oldest->second.since >= max_age_) {
        holders_.erase(oldest);
      } else if (take == Take::kLoad && newest_reserved != holders_.end()) {
        holders_.erase(newest_reserved);
      } else {
        return 0;
      }
    }
    const Ticket ticket = next_ticket_++;
    holders_.emplace(ticket, Holder{now, take == Take::kReservation});
    return ticket;
  }

  const int limit_;
  const int64_t max_age_;
  Mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<Ticket, Holder> holders_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t releases_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_SLOTS_H_
