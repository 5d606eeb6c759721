// File: paddock/internal/ticks.h
// -----------------------------------------------------------------------------
// `Ticks()`: the CPU's constant-rate counter (x86-64's invariant TSC,
// AArch64's virtual counter), for timing a load on the default clock. A
// vDSO clock read costs 16 ns on the Intel VM of docs/benchmarks.md and 27 ns
// on a VM whose kernel keeps time by kvm-clock, and a miss made two; a
// counter read costs 7-12 ns. The rate is measured by the coarse clock's
// ticker against CLOCK_MONOTONIC (src/clock.cc); until it is known, after the
// counter jumped, or where there is no constant-rate counter,
// `TickNanosQ32()` is 0 and callers read the clock instead.
//
// The counter is not trusted beyond its rate: the kernel may not keep time by
// it (a VM booted with `tsc=unstable`, whose counter can jump when it is
// migrated or restored, and whose CPUs' counters need not be in step), so a
// load's counted time is checked against the coarse clock
// (`CountedLoadTimes`), and a load's end is never later than the clock's.

#ifndef PADDOCK_INTERNAL_TICKS_H_
#define PADDOCK_INTERNAL_TICKS_H_

#include <algorithm>
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

// The start and end of a load, in nanoseconds on the default clock.
struct LoadTimes {
  int64_t started = 0;
  int64_t finished = 0;
};

// How far a load's counted time may exceed the coarse clock's elapsed time
// before the precise clock is asked. A load shorter than this is timed with
// no clock read; a wrong counter misstates a load's duration by at most this
// much plus the coarse clock's staleness.
inline constexpr int64_t kCountedSlackNanos = 100'000;

// The times of a load that began at coarse time `coarse_start` and was
// counted to take `counted` nanoseconds, now that the coarse clock reads
// `coarse_end` (0: not ticking). `precise_now()` reads the precise clock; it
// is called only when the two disagree: a coarse clock that stalled, or a
// counter that jumped.
//
// Either way `finished` is never later than the precise time of the call
// (the coarse clock never runs ahead of it) and `finished - started` is the
// counted time when the clocks allow it. Pure; thread-safe.
template <typename PreciseNow>
LoadTimes CountedLoadTimes(int64_t coarse_start, int64_t counted,
                           int64_t coarse_end, const PreciseNow& precise_now) {
  if (coarse_end != 0 && coarse_end >= coarse_start &&
      counted <= coarse_end - coarse_start + kCountedSlackNanos) {
    int64_t end;
    if (__builtin_add_overflow(coarse_start, counted, &end)) end = coarse_end;
    const int64_t finished = std::min(end, coarse_end);
    return {finished - counted, finished};
  }
  const int64_t now = precise_now();
  // A counter that ran ahead of the clock is not believed: the load took at
  // most the time since its coarse start.
  const int64_t took =
      now > coarse_start ? std::min(counted, now - coarse_start) : 0;
  return {now - took, now};
}

// The counter's rate, measured by the ticker from (tick, CLOCK_MONOTONIC
// nanoseconds) readings taken about a millisecond apart. The rate is known
// once the readings span `kWindowNanos`, and is then refined against the
// first one, so its error shrinks as the window grows. A reading whose step
// from the previous one disagrees with the known rate (the counter jumped,
// went back or changed rate: a VM migrated or restored) starts the window
// anew, and the rate is unknown until it spans kWindowNanos again.
// Not thread-safe: the ticker's.
class TickRateMeter {
 public:
  static constexpr int64_t kWindowNanos = 10'000'000;

  // Takes a reading; returns the rate in 32.32 nanoseconds per tick, or 0
  // while it is not known.
  uint64_t Observe(uint64_t ticks, int64_t nanos);

 private:
  bool started_ = false;
  uint64_t ticks0_ = 0;  // The window's first reading.
  int64_t nanos0_ = 0;
  uint64_t last_ticks_ = 0;  // The previous reading.
  int64_t last_nanos_ = 0;
  uint64_t rate_ = 0;
};

// Whether the counter runs at a constant rate in every power state: x86-64's
// CPUID invariant-TSC bit; always on AArch64 (the generic timer has a fixed
// frequency). Whether the kernel keeps time by it does not matter (see the
// file comment). For the ticker, at its start.
bool TicksHaveAConstantRate();

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_TICKS_H_
