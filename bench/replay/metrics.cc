// RunMetrics.

#include "metrics.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "histogram.h"
#include "shared_arena.h"

namespace paddock::replay {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

Percentiles PercentilesOf(const LatencyHistogram& h) {
  return {h.QuantileMillis(0.50), h.QuantileMillis(0.95),
          h.QuantileMillis(0.99), h.MaxMillis()};
}

}  // namespace

RunMetrics::RunMetrics(SharedArena& arena, int seconds, int64_t timeout_nanos,
                       int saturated_at, int pods)
    : timeout_(timeout_nanos),
      saturated_at_(saturated_at),
      pods_(std::clamp(pods, 1, kMaxPods)),
      seconds_(arena.NewArray<Second>(std::max(seconds, 1))),
      num_seconds_(std::max(seconds, 1)) {}

size_t RunMetrics::ArenaBytes(int seconds) {
  return sizeof(RunMetrics) + alignof(RunMetrics) +
         sizeof(Second) * static_cast<size_t>(std::max(seconds, 1)) +
         alignof(Second);
}

void RunMetrics::Begin(int64_t start_nanos) {
  start_.store(start_nanos, std::memory_order_relaxed);
  last_sample_ = start_nanos;
}

RunMetrics::Second& RunMetrics::At(int64_t t) {
  const int64_t i =
      std::clamp<int64_t>((t - start_nanos()) / kSecond, 0, num_seconds_ - 1);
  int seen = last_second_.load(std::memory_order_relaxed);
  while (i > seen &&
         !last_second_.compare_exchange_weak(seen, static_cast<int>(i),
                                             std::memory_order_relaxed)) {
  }
  return seconds_[i];
}

const RunMetrics::Second& RunMetrics::At(int64_t t) const {
  const int64_t i =
      std::clamp<int64_t>((t - start_nanos()) / kSecond, 0, num_seconds_ - 1);
  return seconds_[i];
}

void RunMetrics::OnArrival(int64_t scheduled, int64_t issued) {
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  arrival_lag_.Record(std::max<int64_t>(issued - scheduled, 0));
  At(scheduled).arrivals.fetch_add(1, std::memory_order_relaxed);
}

void RunMetrics::OnEnd(bool hot, int64_t scheduled, int64_t ended,
                       Outcome outcome) {
  // A client stops waiting at its timeout: a request without an answer by
  // then has the timeout as its latency, as k6 records it.
  const int64_t latency = outcome == Outcome::kOk || outcome == Outcome::kError
                              ? ended - scheduled
                              : timeout_;
  const bool ok = outcome == Outcome::kOk;
  Second& second = At(ended);
  (ok ? second.completed : second.failed)
      .fetch_add(1, std::memory_order_relaxed);
  second.latency.Record(latency);
  (ok ? completed_ : failed_).fetch_add(1, std::memory_order_relaxed);
  latency_.Record(latency);
  if (hot) {
    hot_requests_.fetch_add(1, std::memory_order_relaxed);
    if (!ok) hot_failed_.fetch_add(1, std::memory_order_relaxed);
    hot_latency_.Record(latency);
  }
}

void RunMetrics::OnLoadStart(int64_t now) {
  loads_.fetch_add(1, std::memory_order_relaxed);
  const int64_t in_flight =
      loads_in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  AtomicMax(max_loads_in_flight_, in_flight);
  AtomicMax(At(now).loads_max, in_flight);
}

void RunMetrics::OnLoadEnd() {
  loads_in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

void RunMetrics::OnWorkerBusy(int pod, int64_t now) {
  const int64_t busy = busy_[pod].fetch_add(1, std::memory_order_relaxed) + 1;
  AtomicMax(max_busy_, busy);
  AtomicMax(At(now).busy_max, busy);
}

void RunMetrics::OnWorkerIdle(int pod) {
  busy_[pod].fetch_sub(1, std::memory_order_relaxed);
}

void RunMetrics::OnDbAcquire(int64_t now) {
  const int64_t busy = db_busy_.fetch_add(1, std::memory_order_relaxed) + 1;
  AtomicMax(max_db_busy_, busy);
  AtomicMax(At(now).db_busy_max, busy);
}

void RunMetrics::OnDbRelease() {
  db_busy_.fetch_sub(1, std::memory_order_relaxed);
}

void RunMetrics::OnDbQuery() {
  db_queries_.fetch_add(1, std::memory_order_relaxed);
}

void RunMetrics::OnStaleServed(int64_t now, int64_t age_nanos) {
  stale_served_.fetch_add(1, std::memory_order_relaxed);
  AtomicMax(max_stale_age_, age_nanos);
  At(now).stale.fetch_add(1, std::memory_order_relaxed);
}

void RunMetrics::Sample(int64_t now, bool counting) {
  Second& second = At(now);
  AtomicMax(second.loads_max, loads_in_flight_.load(std::memory_order_relaxed));
  AtomicMax(second.db_busy_max, db_busy_.load(std::memory_order_relaxed));
  const int64_t elapsed = now - last_sample_;
  last_sample_ = now;
  const bool count = counting && elapsed > 0;
  if (count) sampled_nanos_ += elapsed;
  for (int pod = 0; pod < pods_; ++pod) {
    const int64_t busy = busy_[pod].load(std::memory_order_relaxed);
    AtomicMax(second.busy_max, busy);
    if (count && busy >= saturated_at_) saturated_nanos_[pod] += elapsed;
  }
}

void RunMetrics::OnCpuSecond(int64_t at, double replay_share,
                             double other_share) {
  Second& second = At(at);
  second.cpu_replay = replay_share;
  second.cpu_other = other_share;
}

double RunMetrics::RecentRate(int64_t now) const {
  if (now - start_nanos() < kSecond) return 0;
  const Second& s = At(now - kSecond);
  return static_cast<double>(s.completed.load(std::memory_order_relaxed) +
                             s.failed.load(std::memory_order_relaxed));
}

double RunMetrics::RecentP95Millis(int64_t now) const {
  if (now - start_nanos() < kSecond)
    return At(now).latency.QuantileMillis(0.95);
  return At(now - kSecond).latency.QuantileMillis(0.95);
}

void RunMetrics::Summarize(PolicyResult& result) const {
  auto get = [](const std::atomic<uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  result.requests = get(arrivals_);
  result.completed = get(completed_);
  result.failed = get(failed_);
  result.latency = PercentilesOf(latency_);
  result.generator_lag = PercentilesOf(arrival_lag_);
  result.hot_key.requests = get(hot_requests_);
  result.hot_key.failed = get(hot_failed_);
  result.hot_key.loads = get(loads_);
  result.hot_key.max_concurrent_loads =
      max_loads_in_flight_.load(std::memory_order_relaxed);
  result.hot_key.stale_served = get(stale_served_);
  result.hot_key.max_stale_age_ms =
      static_cast<double>(max_stale_age_.load(std::memory_order_relaxed)) / 1e6;
  result.hot_key.latency = PercentilesOf(hot_latency_);
  int64_t saturated = 0;
  for (int pod = 0; pod < pods_; ++pod) saturated += saturated_nanos_[pod];
  result.worker_saturation =
      sampled_nanos_ > 0 ? static_cast<double>(saturated) /
                               static_cast<double>(sampled_nanos_ * pods_)
                         : 0;
  result.max_busy_workers = max_busy_.load(std::memory_order_relaxed);
  result.backend.queries = get(db_queries_);
  result.backend.max_busy = max_db_busy_.load(std::memory_order_relaxed);
  result.fleet.loads = get(loads_);
  result.series.clear();
  const int last = last_second_.load(std::memory_order_relaxed);
  for (int i = 0; i <= last; ++i) {
    const Second& s = seconds_[i];
    result.series.push_back(
        {static_cast<double>(i), get(s.arrivals), get(s.completed),
         get(s.failed), s.latency.QuantileMillis(0.95),
         s.loads_max.load(std::memory_order_relaxed),
         s.busy_max.load(std::memory_order_relaxed), get(s.stale), s.cpu_replay,
         s.cpu_other, s.db_busy_max.load(std::memory_order_relaxed)});
  }
}

}  // namespace paddock::replay
