// File: paddock/internal/ticks.h
// -----------------------------------------------------------------------------
// `Ticks()`: the CPU's constant-rate counter (x86-64's invariant TSC,
// AArch64's virtual counter), for timing a load on the default clock. A
// vDSO clock read costs 16 ns on the 2-vCPU VM of docs/benchmarks.md and a
// miss made two, 15 % of a Zipf run's time; a counter read costs 7 ns. The
// rate is measured by the coarse clock's ticker against CLOCK_MONOTONIC
// (src/clock.cc); until it is known, or where there is no reliable counter,
// `TickNanosQ32()` is 0 and callers read the clock instead.

#ifndef PADDOCK_INTERNAL_TICKS_H_
#define PADDOCK_INTERNAL_TICKS_H_

#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/numeric/int128.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace paddock::internal {

// Whether this build reads a counter at all.
#if defined(__x86_64__) || defined(__aarch64__)
inline constexpr bool kHasTicks = true;
#else
inline constexpr bool kHasTicks = false;
#endif

// Nanoseconds per tick in 32.32 fixed point; 0 until measured, without a
// reliable counter, and again once it stops being one. Written by the
// ticker only.
extern std::atomic<uint64_t> tick_nanos_q32;

// The counter now; 0 without one. Not ordered with the instructions around
// it: a load's time, not a fence. Thread-safe.
inline uint64_t Ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

// The tick rate as last measured, 0 if not known. Thread-safe.
inline uint64_t TickNanosQ32() {
  return tick_nanos_q32.load(std::memory_order_relaxed);
}

// Nanoseconds from tick `from` to tick `to` at rate `q32` (nonzero, from
// TickNanosQ32); 0 if `to` is not later (two cores' counters may disagree by
// a few ticks).
inline int64_t TicksToNanos(uint64_t from, uint64_t to, uint64_t q32) {
  if (to <= from) return 0;
  const absl::uint128 nanos = (absl::uint128(to - from) * q32) >> 32;
  return nanos > absl::uint128(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(absl::Uint128Low64(nanos));
}

// Measures the rate from a pair of (tick, CLOCK_MONOTONIC nanoseconds)
// readings taken `window` apart, and publishes it; for the ticker (and
// tests). Returns the published rate, or 0 (none published) if the readings
// cannot give one.
uint64_t PublishTickRate(uint64_t ticks0, int64_t nanos0, uint64_t ticks1,
                         int64_t nanos1);

// Whether the counter can time a load on any core: it runs at a constant
// rate in every power state and is in step across CPUs. x86-64: CPUID's
// invariant-TSC bit, and the kernel keeping time by the TSC (clocksource
// `tsc`, which Linux keeps only while it finds the CPUs' TSCs in step);
// AArch64: always (the generic timer is system-wide). Reads a sysfs file:
// for the ticker (at its start and once a second), not a hot path.
bool TicksAreReliable();

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_TICKS_H_
