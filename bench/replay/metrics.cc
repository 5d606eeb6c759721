// RunMetrics.

#include "metrics.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "histogram.h"

namespace paddock::replay {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

Percentiles PercentilesOf(const LatencyHistogram& h) {
  return {h.QuantileMillis(0.50), h.QuantileMillis(0.95),
          h.QuantileMillis(0.99), h.MaxMillis()};
}

}  // namespace

RunMetrics::RunMetrics(int64_t start_nanos, int seconds, int64_t timeout_nanos,
                       int saturated_at)
    : start_(start_nanos),
      timeout_(timeout_nanos),
      saturated_at_(saturated_at) {
  seconds_.reserve(std::max(seconds, 1));
  for (int i = 0; i < std::max(seconds, 1); ++i) {
    seconds_.push_back(std::make_unique<Second>());
  }
  last_sample_ = start_nanos;
}

RunMetrics::Second& RunMetrics::At(int64_t t) {
  const int64_t i = std::clamp<int64_t>(
      (t - start_) / kSecond, 0, static_cast<int64_t>(seconds_.size()) - 1);
  int seen = last_second_.load(std::memory_order_relaxed);
  while (i > seen &&
         !last_second_.compare_exchange_weak(seen, static_cast<int>(i),
                                             std::memory_order_relaxed)) {
  }
  return *seconds_[i];
}

const RunMetrics::Second& RunMetrics::At(int64_t t) const {
  const int64_t i = std::clamp<int64_t>(
      (t - start_) / kSecond, 0, static_cast<int64_t>(seconds_.size()) - 1);
  return *seconds_[i];
}

void RunMetrics::OnArrival(int64_t scheduled) {
  arrivals_.fetch_add(1, std::memory_order_relaxed);
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

void RunMetrics::OnWorkerBusy(int64_t now) {
  const int64_t busy = busy_.fetch_add(1, std::memory_order_relaxed) + 1;
  AtomicMax(max_busy_, busy);
  AtomicMax(At(now).busy_max, busy);
}

void RunMetrics::OnWorkerIdle() {
  busy_.fetch_sub(1, std::memory_order_relaxed);
}

void RunMetrics::OnStaleServed(int64_t now, int64_t age_nanos) {
  stale_served_.fetch_add(1, std::memory_order_relaxed);
  AtomicMax(max_stale_age_, age_nanos);
  At(now).stale.fetch_add(1, std::memory_order_relaxed);
}

void RunMetrics::Sample(int64_t now, bool counting) {
  const int64_t busy = busy_.load(std::memory_order_relaxed);
  Second& second = At(now);
  AtomicMax(second.busy_max, busy);
  AtomicMax(second.loads_max, loads_in_flight_.load(std::memory_order_relaxed));
  const int64_t elapsed = now - last_sample_;
  last_sample_ = now;
  if (counting && elapsed > 0) {
    sampled_nanos_ += elapsed;
    if (busy >= saturated_at_) saturated_nanos_ += elapsed;
  }
}

void RunMetrics::OnCpuSecond(int64_t at, double replay_share,
                             double other_share) {
  Second& second = At(at);
  second.cpu_replay = replay_share;
  second.cpu_other = other_share;
}

double RunMetrics::RecentRate(int64_t now) const {
  if (now - start_ < kSecond) return 0;
  const Second& s = At(now - kSecond);
  return static_cast<double>(s.completed.load(std::memory_order_relaxed) +
                             s.failed.load(std::memory_order_relaxed));
}

double RunMetrics::RecentP95Millis(int64_t now) const {
  if (now - start_ < kSecond) return At(now).latency.QuantileMillis(0.95);
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
  result.hot_key.requests = get(hot_requests_);
  result.hot_key.failed = get(hot_failed_);
  result.hot_key.loads = get(loads_);
  result.hot_key.max_concurrent_loads =
      max_loads_in_flight_.load(std::memory_order_relaxed);
  result.hot_key.stale_served = get(stale_served_);
  result.hot_key.max_stale_age_ms =
      static_cast<double>(max_stale_age_.load(std::memory_order_relaxed)) / 1e6;
  result.hot_key.latency = PercentilesOf(hot_latency_);
  result.worker_saturation = sampled_nanos_ > 0
                                 ? static_cast<double>(saturated_nanos_) /
                                       static_cast<double>(sampled_nanos_)
                                 : 0;
  result.max_busy_workers = max_busy_.load(std::memory_order_relaxed);
  result.series.clear();
  const int last = last_second_.load(std::memory_order_relaxed);
  for (int i = 0; i <= last; ++i) {
    const Second& s = *seconds_[i];
    result.series.push_back({static_cast<double>(i), get(s.arrivals),
                             get(s.completed), get(s.failed),
                             s.latency.QuantileMillis(0.95),
                             s.loads_max.load(std::memory_order_relaxed),
                             s.busy_max.load(std::memory_order_relaxed),
                             get(s.stale), s.cpu_replay, s.cpu_other});
  }
}

}  // namespace paddock::replay
