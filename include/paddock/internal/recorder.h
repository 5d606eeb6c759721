// File: paddock/internal/recorder.h
// -----------------------------------------------------------------------------
// `Recorder`: the one door every event of a cache goes through (Caffeine's
// StatsCounter). It owns the counters and the listener, so the cache's code
// says what happened (`recorder.StaleHit(age)`) and never checks for a
// listener or pairs a counter with a callback.
//
// Hits, stale hits and what every miss counts (the miss, its load, the load's
// time, evictions) count on per-thread lines: a hit writes nothing shared,
// and misses on two threads do not bounce counter lines between cores. The
// rest counts on shared atomics. Listener calls are made here
// only, never under a cache lock (the callers guarantee it), and an exception
// a listener throws is caught and dropped: monitoring must not break serving.

#ifndef PADDOCK_INTERNAL_RECORDER_H_
#define PADDOCK_INTERNAL_RECORDER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/per_thread_counters.h"
#include "paddock/internal/stats_fields.h"
#include "paddock/listener.h"
#include "paddock/stats.h"

namespace paddock::internal {

class Recorder {
 public:
  // `listener` may be null; it must outlive the recorder.
  explicit Recorder(Listener* listener) : listener_(listener) {}
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A fresh value served without waiting. The hit path: one plain store.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Hit(const ThreadRecord* record) {
    hot_.Increment(record, kHotHits);
  }
  // A stale value served at once (a refresh runs or is due); `age` since its
  // load.
  void StaleHit(absl::Duration age);
  // A negatively cached error served.
  void NegativeHit() { Add(kNegativeHits); }
  // A stale value served in place of an error or a timeout.
  void StaleFallback(absl::Duration age);
  // A caller found nothing servable.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Miss() {
    hot_.Increment(CurrentThreadRecord(), kHotMisses);
  }
  void CoalescedWait();
  void WaitTimeout();
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Evicted(size_t n) {
    if (n == 0) return;
    hot_.Increment(CurrentThreadRecord(), kHotEvictions, n);
    if (listener_ != nullptr) [[unlikely]] {
      NotifyEvicted(n);
    }
  }
  void RefreshStarted() { Add(kRefreshes); }
  void RefreshSkipped() { Add(kRefreshesSkipped); }
  // The shared tier answered a load (see `Stats`).
  void SharedHit() { Add(kSharedHits); }
  void LeaseAcquired() { Add(kLeasesAcquired); }
  void LeaseWait() { Add(kLeaseWaits); }
  void SharedError() { Add(kSharedErrors); }
  // Inline, as are Miss and Evicted: every miss makes these calls, and
  // without a listener each is one per-thread counter.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void LoadStarted(LoadKind kind) {
    hot_.Increment(CurrentThreadRecord(), kHotLoads);
    if (listener_ != nullptr) [[unlikely]] {
      NotifyLoadStart(kind);
    }
  }
  // `nanos`: how long the load took (a Duration is made only for a
  // listener).
  ABSL_ATTRIBUTE_ALWAYS_INLINE void LoadFinished(LoadKind kind, int64_t nanos,
                                                 const absl::Status& status) {
    hot_.Increment(CurrentThreadRecord(), kHotLoadNanos,
                   static_cast<uint64_t>(nanos));
    if (!status.ok()) [[unlikely]] {
      Add(kLoadFailures);
    }
    if (listener_ != nullptr) [[unlikely]] {
      NotifyLoadFinish(kind, nanos, status);
    }
  }

  // The counters now; each field exact, fields not taken at one instant.
  Stats Snapshot() const;

 private:
  enum HotCounter {
    kHotHits,
    kHotStaleHits,
    kHotMisses,
    kHotLoads,
    kHotEvictions,
    kHotLoadNanos,  // Two's complement: a clock may step back.
    kHotCounters
  };

  void Add(StatsCounter c, uint64_t n = 1) {
    cold_[c].fetch_add(n, std::memory_order_relaxed);
  }

  // The listener's side of Evicted, LoadStarted and LoadFinished; out of
  // line, as few caches have a listener.
  void NotifyEvicted(size_t n) const;
  void NotifyLoadStart(LoadKind kind) const;
  void NotifyLoadFinish(LoadKind kind, int64_t nanos,
                        const absl::Status& status) const;

  // Calls `event(*listener_)` if a listener is set, dropping what it throws.
  template <typename Event>
  void Notify(const Event& event) const noexcept {
    if (listener_ == nullptr) return;
    try {
      event(*listener_);
    } catch (...) {
      // A listener is monitoring: its failure must not fail a lookup.
    }
  }

  Listener* const listener_;
  // The hot counters' per-thread lines are written by their own threads.
  mutable PerThreadCounters<kHotCounters> hot_;
  std::array<std::atomic<uint64_t>, kStatsCounters> cold_{};
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_RECORDER_H_
