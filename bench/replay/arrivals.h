// File: bench/replay/arrivals.h
// -----------------------------------------------------------------------------
// The open-loop load generator, like k6's ramping-arrival-rate executor: the
// rate rises linearly from 0 to its target, then holds, and every request is
// issued at its scheduled time whatever the server does. Latency is then
// measured from the schedule, so a stalled server cannot hide its queue
// (no coordinated omission).

#ifndef PADDOCK_BENCH_REPLAY_ARRIVALS_H_
#define PADDOCK_BENCH_REPLAY_ARRIVALS_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "metrics.h"
#include "server.h"

namespace paddock::replay {

// ArrivalSchedule
//
// The arrival times of a linear ramp from 0 to `rate` requests per second
// over `ramp`, then `rate` for `hold`: the i-th request (from 0) arrives when
// the integral of the rate reaches i + 1.
class ArrivalSchedule {
 public:
  ArrivalSchedule(double rate, absl::Duration ramp, absl::Duration hold);

  // The number of requests issued.
  int64_t count() const { return count_; }

  // The arrival time of request `i`, in nanoseconds from the start.
  int64_t OffsetNanos(int64_t i) const;

 private:
  double rate_;
  double ramp_s_;
  double ramp_requests_;  // Issued during the ramp.
  int64_t count_;
};

// Issues every request of `schedule` from `start` (MonotonicNanos()) through
// `submit` (with the request's index, from 0), each hot with probability
// `hot_share` (drawn from `seed`), and records the arrivals in `metrics`.
// Returns after the last one, or early once `stop` is set. Runs on the
// calling thread, and keeps `cpu_used` at the CPU time that thread has
// consumed.
void RunOpenLoop(const ArrivalSchedule& schedule, int64_t start,
                 double hot_share, uint64_t seed,
                 absl::FunctionRef<void(int64_t, const Request&)> submit,
                 RunMetrics& metrics, const std::atomic<bool>& stop,
                 std::atomic<int64_t>& cpu_used);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_ARRIVALS_H_
