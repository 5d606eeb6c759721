// The CPU-burn and wait cost model of the replay.

#include "cost_model.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace paddock::replay {
namespace {

int64_t ReadClock(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Work the compiler cannot drop: a few microseconds of integer arithmetic
// between two reads of the thread's CPU clock (a system call).
uint64_t Spin(uint64_t x) {
  for (int i = 0; i < 2000; ++i)
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

}  // namespace

int64_t MonotonicNanos() { return ReadClock(CLOCK_MONOTONIC); }

int64_t ThreadCpuNanos() { return ReadClock(CLOCK_THREAD_CPUTIME_ID); }

bool BurnCpu(absl::Duration cpu, const std::atomic<bool>& abort) {
  const int64_t until = ThreadCpuNanos() + absl::ToInt64Nanoseconds(cpu);
  static std::atomic<uint64_t> sink{0};
  uint64_t x = sink.load(std::memory_order_relaxed);
  while (ThreadCpuNanos() < until) {
    if (abort.load(std::memory_order_relaxed)) return false;
    x = Spin(x);
  }
  sink.store(x, std::memory_order_relaxed);
  return true;
}

bool Wait(absl::Duration wait, const std::atomic<bool>& abort) {
  const absl::Duration slice = absl::Milliseconds(10);
  while (wait > absl::ZeroDuration()) {
    if (abort.load(std::memory_order_relaxed)) return false;
    const absl::Duration now = std::min(wait, slice);
    absl::SleepFor(now);
    wait -= now;
  }
  return true;
}

bool Perform(const StepCost& cost, const std::atomic<bool>& abort) {
  for (int i = 0; i < cost.steps; ++i) {
    if (!BurnCpu(cost.step.cpu, abort)) return false;
    if (!Wait(cost.step.wait, abort)) return false;
  }
  return true;
}

}  // namespace paddock::replay
