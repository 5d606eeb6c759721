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
//
// The holders live in an array sized once, by the constructor: taking or
// giving back a slot never allocates, so never throws, and a load that
// claimed a queued flight always gets an answer to publish.

#ifndef PADDOCK_INTERNAL_LOAD_SLOTS_H_
#define PADDOCK_INTERNAL_LOAD_SLOTS_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "paddock/internal/mutex.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

class LoadSlots {
 public:
  // A taken slot; 0 is no slot. Hand it back with Release().
  using Ticket = uint64_t;

  // Allocates room for `limit` holders (throws std::bad_alloc if it cannot).
  LoadSlots(int limit, absl::Duration max_age)
      : limit_(limit), max_age_(ToNanosSaturated(max_age)) {
    holders_.resize(static_cast<size_t>(limit_));
    free_.reserve(holders_.size());
    for (size_t i = holders_.size(); i > 0; --i) free_.push_back(i - 1);
  }

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
    if (Holder* h = FindLocked(ticket); h != nullptr) {
      h->since = now;
      h->reserved = false;
      return ticket;
    }
    return TakeLocked(now, Take::kStart);
  }

  // Never stops a wait (AcquireFor's default).
  struct NeverStop {
    bool operator()() const { return false; }
  };

  // Takes a slot, waiting up to `timeout` (real time) for one; `now()` reads
  // the cache clock. Returns 0 on timeout, or once `stop()` holds: it is
  // asked before each look, at least every kRecheck while waiting.
  // Thread-safe.
  template <typename NowFn, typename StopFn = NeverStop>
  ABSL_ATTRIBUTE_ALWAYS_INLINE Ticket AcquireFor(absl::Duration timeout,
                                                 const NowFn& now,
                                                 const StopFn& stop = {}) {
    if (limit_ == 0) return kUnlimited;  // Every miss passes here.
    return AcquireForLimited(timeout, now, stop);
  }

  // Returns a slot (or a reservation). One taken away from a too-old holder,
  // or a reservation taken by a load, is not returned twice. Thread-safe.
  void Release(Ticket ticket) {
    if (limit_ == 0 || ticket == 0) return;
    {
      MutexLock lock(&mu_);
      Holder* h = FindLocked(ticket);
      if (h == nullptr) return;
      FreeLocked(*h);
      ++releases_;
    }
    cv_.notify_one();
  }

 private:
  template <typename NowFn, typename StopFn>
  Ticket AcquireForLimited(absl::Duration timeout, const NowFn& now,
                           const StopFn& stop) {
    using SteadyClock = std::chrono::steady_clock;
    const bool forever = IsForever(timeout);
    const SteadyClock::time_point deadline =
        forever ? SteadyClock::time_point::max()
                : SteadyClock::now() + absl::ToChronoNanoseconds(timeout);
    MutexLock lock(&mu_);
    for (;;) {
      if (stop()) return 0;
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
    Ticket ticket = 0;      // 0: free.
    int64_t since = 0;      // When it took the slot or, reserved, started.
    bool reserved = false;  // Queued, not running: never ages out; a load
                            // takes it.
  };
  // kLoad: a load that runs now, which may take a reservation.
  // kReservation: a queued load's reservation. kStart: a queued load that
  // lost its reservation and starts now.
  enum class Take { kLoad, kReservation, kStart };

  // A ticket names its holder's index (ticket - 1 modulo the limit) and,
  // above it, a sequence number: tickets only grow, and one given back or
  // taken away is never valid again.
  Holder* FindLocked(Ticket ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ticket == 0) return nullptr;
    Holder& h = holders_[(ticket - 1) % holders_.size()];
    return h.ticket == ticket ? &h : nullptr;
  }

  void FreeLocked(Holder& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    h = Holder{};
    // Never reallocates: its capacity is the number of holders.
    free_.push_back(static_cast<size_t>(&h - holders_.data()));
  }

  // When the oldest running holder took its slot, or the maximum if none.
  int64_t OldestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t oldest = std::numeric_limits<int64_t>::max();
    for (const Holder& h : holders_) {
      if (h.ticket != 0 && !h.reserved) oldest = std::min(oldest, h.since);
    }
    return oldest;
  }

  Ticket TakeLocked(int64_t now, Take take) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (free_.empty()) {
      // A hung load first: it stops counting against the limit. Then, for a
      // load, the newest reservation (the oldest is the likeliest to start
      // soon). Tickets only grow, so the newest has the largest.
      Holder* oldest = nullptr;
      Holder* newest_reserved = nullptr;
      for (Holder& h : holders_) {
        if (h.reserved) {
          if (newest_reserved == nullptr ||
              h.ticket > newest_reserved->ticket) {
            newest_reserved = &h;
          }
        } else if (oldest == nullptr || h.since < oldest->since) {
          oldest = &h;
        }
      }
      if (oldest != nullptr && now - oldest->since >= max_age_) {
        FreeLocked(*oldest);
      } else if (take == Take::kLoad && newest_reserved != nullptr) {
        FreeLocked(*newest_reserved);
      } else {
        return 0;
      }
    }
    const size_t index = free_.back();
    free_.pop_back();
    const Ticket ticket = next_sequence_++ * holders_.size() + index + 1;
    holders_[index] = Holder{ticket, now, take == Take::kReservation};
    return ticket;
  }

  const int limit_;
  const int64_t max_age_;
  Mutex mu_;
  std::condition_variable cv_;
  // Sized once; free_ holds the indices of the free holders (its capacity
  // reserved, so pushing never allocates).
  std::vector<Holder> holders_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> free_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t releases_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_SLOTS_H_
