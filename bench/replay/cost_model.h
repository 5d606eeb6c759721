// File: bench/replay/cost_model.h
// -----------------------------------------------------------------------------
// What a request costs the server: CPU that is really burnt on the calling
// thread, and waiting (I/O) that takes no CPU. With many threads on one core,
// burnt CPU is time-sliced by the kernel, so an overloaded core slows every
// request down the way the seed's overloaded 1-core pod did.

#ifndef PADDOCK_BENCH_REPLAY_COST_MODEL_H_
#define PADDOCK_BENCH_REPLAY_COST_MODEL_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace paddock::replay {

// One piece of work: `cpu` of CPU time, then `wait` of waiting.
struct Cost {
  absl::Duration cpu;
  absl::Duration wait;
};

// A sequence of `steps` identical pieces, done one after the other (the
// seed's exhibition is assembled from 8 product groups queried in turn).
struct StepCost {
  int steps = 1;
  Cost step;

  absl::Duration TotalCpu() const { return step.cpu * steps; }
  absl::Duration TotalWait() const { return step.wait * steps; }
};

// Returns CLOCK_MONOTONIC in nanoseconds: the time base of every timestamp in
// the replay (and of `paddock::SystemClock`).
int64_t MonotonicNanos();

// Returns the CPU time the calling thread has consumed, in nanoseconds.
int64_t ThreadCpuNanos();

// Burns `cpu` of the calling thread's CPU time (not wall time: a thread that
// is preempted burns nothing meanwhile). Returns false, early, once `abort`
// is set.
bool BurnCpu(absl::Duration cpu, const std::atomic<bool>& abort);

// Sleeps for `wait` without using CPU. Returns false, early, once `abort` is
// set (checked at least every 10 ms).
bool Wait(absl::Duration wait, const std::atomic<bool>& abort);

// Does `cost`: every step's CPU, then its wait. Returns false if aborted.
bool Perform(const StepCost& cost, const std::atomic<bool>& abort);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_COST_MODEL_H_
