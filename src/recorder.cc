// Recorder: counters and listener calls of a cache.

#include "paddock/internal/recorder.h"

namespace paddock::internal {

void Recorder::StaleHit(absl::Duration age) {
  hot_.Increment(CurrentThreadRecord(), kHotStaleHits);
  Notify([&](Listener& l) { l.OnStaleServed(age); });
}

void Recorder::StaleFallback(absl::Duration age) {
  Add(kStaleFallbacks);
  Notify([&](Listener& l) { l.OnStaleServed(age); });
}

void Recorder::CoalescedWait() {
  Add(kCoalescedWaits);
  Notify([](Listener& l) { l.OnCoalescedWait(); });
}

void Recorder::WaitTimeout() {
  Add(kWaitTimeouts);
  Notify([](Listener& l) { l.OnWaitTimeout(); });
}

void Recorder::NotifyEvicted(size_t n) const {
  for (size_t i = 0; i < n; ++i) Notify([](Listener& l) { l.OnEviction(); });
}

void Recorder::NotifyLoadStart(LoadKind kind) const {
  Notify([&](Listener& l) { l.OnLoadStart(kind); });
}

void Recorder::NotifyLoadFinish(LoadKind kind, int64_t nanos,
                                const absl::Status& status) const {
  const absl::Duration duration = absl::Nanoseconds(nanos);
  Notify([&](Listener& l) { l.OnLoadFinish(kind, duration, status); });
}

Stats Recorder::Snapshot() const {
  Stats s;
  for (size_t i = 0; i < kStatsCounters; ++i) {
    s.*kStatsFields[i].field = cold_[i].load(std::memory_order_relaxed);
  }
  s.hits = hot_.Sum(kHotHits);
  s.stale_hits = hot_.Sum(kHotStaleHits);
  s.misses = hot_.Sum(kHotMisses);
  s.loads = hot_.Sum(kHotLoads);
  s.evictions = hot_.Sum(kHotEvictions);
  s.total_load_time =
      absl::Nanoseconds(static_cast<int64_t>(hot_.Sum(kHotLoadNanos)));
  return s;
}

}  // namespace paddock::internal
