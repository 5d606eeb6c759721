// The open-loop generator.

#include "arrivals.h"

#include <time.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "cost_model.h"
#include "metrics.h"
#include "server.h"

namespace paddock::replay {

ArrivalSchedule::ArrivalSchedule(double rate, absl::Duration ramp,
                                 absl::Duration hold)
    : rate_(rate),
      ramp_s_(absl::ToDoubleSeconds(ramp)),
      ramp_requests_(rate * absl::ToDoubleSeconds(ramp) / 2),
      count_(static_cast<int64_t>(std::floor(
          ramp_requests_ + rate * absl::ToDoubleSeconds(hold) + 1e-9))) {}

int64_t ArrivalSchedule::OffsetNanos(int64_t i) const {
  const double n = static_cast<double>(i + 1);
  double t;
  if (n <= ramp_requests_) {
    // n = rate * t^2 / (2 * ramp)
    t = std::sqrt(2 * n * ramp_s_ / rate_);
  } else {
    t = ramp_s_ + (n - ramp_requests_) / rate_;
  }
  return static_cast<int64_t>(t * 1e9);
}

void RunOpenLoop(const ArrivalSchedule& schedule, int64_t start,
                 double hot_share, uint64_t seed,
                 absl::FunctionRef<void(int64_t, const Request&)> submit,
                 RunMetrics& metrics, const std::atomic<bool>& stop,
                 std::atomic<int64_t>& cpu_used) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution hot(hot_share);
  for (int64_t i = 0; i < schedule.count(); ++i) {
    if (stop.load(std::memory_order_relaxed)) return;
    const int64_t at = start + schedule.OffsetNanos(i);
    const timespec ts{static_cast<time_t>(at / 1'000'000'000),
                      static_cast<long>(at % 1'000'000'000)};
    // Sleeps until the absolute time; returns at once if it has passed (the
    // request then still carries its scheduled time).
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    const Request request{at, hot(rng)};
    metrics.OnArrival(at, MonotonicNanos());
    submit(i, request);
    cpu_used.store(ThreadCpuNanos(), std::memory_order_relaxed);
  }
}

}  // namespace paddock::replay
