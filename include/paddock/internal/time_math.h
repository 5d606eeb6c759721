// File: paddock/internal/time_math.h
// -----------------------------------------------------------------------------
// Saturating arithmetic on the int64 nanosecond timestamps the cache stores,
// so an infinite or huge duration never overflows.

#ifndef PADDOCK_INTERNAL_TIME_MATH_H_
#define PADDOCK_INTERNAL_TIME_MATH_H_

#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace paddock::internal {

// `d` in nanoseconds, clamped to the int64 range.
inline int64_t ToNanosSaturated(absl::Duration d) {
  // Every store converts a few durations; absl's conversion is out of line
  // and costs more than the rest of building an entry. A Duration is whole
  // seconds plus quarter nanoseconds: below 2^33 s (272 years) the sum
  // cannot overflow. Everything else (negative, infinite, huge) goes to absl.
  const int64_t seconds = absl::time_internal::GetRepHi(d);
  if (seconds >= 0 && (seconds >> 33) == 0) {
    return seconds * 1'000'000'000 + absl::time_internal::GetRepLo(d) / 4;
  }
  if (d == absl::InfiniteDuration()) return std::numeric_limits<int64_t>::max();
  if (d == -absl::InfiniteDuration()) {
    return std::numeric_limits<int64_t>::min();
  }
  return absl::ToInt64Nanoseconds(d);  // Saturates on overflow.
}

// `t + d`, clamped to the int64 range.
inline int64_t AddSaturated(int64_t t, absl::Duration d) {
  // Infinite stays infinite whatever `t` is (before 1970 on a ManualClock).
  if (d == absl::InfiniteDuration()) return std::numeric_limits<int64_t>::max();
  if (d == -absl::InfiniteDuration()) {
    return std::numeric_limits<int64_t>::min();
  }
  const int64_t n = ToNanosSaturated(d);
  int64_t sum;
  if (__builtin_add_overflow(t, n, &sum)) {
    return n > 0 ? std::numeric_limits<int64_t>::max()
                 : std::numeric_limits<int64_t>::min();
  }
  return sum;
}

// Whether a wait of `d` is, for all purposes, unbounded (a century or more):
// waiting on such a duration must not overflow a clock.
inline bool IsForever(absl::Duration d) {
  return d >= absl::Hours(24 * 365 * 100);
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_TIME_MATH_H_
