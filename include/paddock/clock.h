// File: paddock/clock.h
// -----------------------------------------------------------------------------
// The time source of a cache. `Clock` is the interface a cache reads all of its
// time from (expiry, load durations); `SystemClock` is the default, backed by
// the monotonic clock; `ManualClock` moves only when a test says so.

#ifndef PADDOCK_CLOCK_H_
#define PADDOCK_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace paddock {

// Clock
//
// A source of monotonic time. Implementations must be thread-safe and must
// never go backwards. Only differences between two `Now()` values carry
// meaning; the absolute value need not be wall-clock time.
class Clock {
 public:
  virtual ~Clock() = default;

  // Clock::Now()
  //
  // Returns the current time. Never blocks, must not throw. Thread-safe.
  virtual absl::Time Now() const = 0;
};

namespace internal {
int64_t CoarseNowNanosIfTicking();  // Defined below.
}  // namespace internal

// SystemClock
//
// The default clock: CLOCK_MONOTONIC, expressed as `absl::UnixEpoch()` plus
// the time since boot. A cache that uses it (`Options::clock == nullptr`)
// checks freshness on the hit path against `CoarseNow()` instead, which costs
// one relaxed atomic load, and times a miss's load by the CPU's counter once
// the ticker has measured its rate (its entry's times then start from the
// coarse time: up to about a millisecond early, never late).
class SystemClock final : public Clock {
 public:
  // SystemClock::Get()
  //
  // Returns the process-wide instance. Thread-safe.
  static SystemClock* Get();

  // SystemClock::Now()
  //
  // Returns the precise monotonic time (a vDSO clock read). Thread-safe.
  absl::Time Now() const override;

  // SystemClock::NowNanos()
  //
  // `Now()` as nanoseconds since `absl::UnixEpoch()`, without a virtual call.
  // Also publishes the reading to `CoarseNowNanos()`. Thread-safe.
  static int64_t NowNanos();

  // SystemClock::CoarseNowNanos()
  //
  // Returns the monotonic time in nanoseconds since `absl::UnixEpoch()` as
  // last published by a background ticker thread (every 1 ms) or by any
  // `Now()` call, whichever is newer: never ahead of `Now()`, and behind it by
  // about a millisecond when the ticker is scheduled on time. The first call in
  // a process (and in a child after `fork()`) starts the ticker; while no
  // ticker can be started (no thread available), it returns the precise time
  // and tries again about once a second. Never blocks, never throws.
  // Thread-safe.
  static int64_t CoarseNowNanos() {
    int64_t now = coarse_nanos_.load(std::memory_order_relaxed);
    if (now == 0) [[unlikely]] {
      now = StartTicker();
    }
    return now;
  }

 private:
  SystemClock() = default;
  static int64_t StartTicker();
  static void ForgetTickerAfterFork();

  static std::atomic<int64_t> coarse_nanos_;
  friend int64_t internal::CoarseNowNanosIfTicking();
};

// ManualClock
//
// A clock that moves only when told to; for tests and simulations.
// Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch());

  // ManualClock::Now()
  //
  // Returns the time last set. Never blocks. Thread-safe.
  absl::Time Now() const override;

  // ManualClock::Advance()
  //
  // Moves the clock forward by `d`. Throws `std::invalid_argument` if `d` is
  // negative (a clock never goes back). Thread-safe.
  void Advance(absl::Duration d);

  // ManualClock::Set()
  //
  // Sets the clock to `t`. Throws `std::invalid_argument` if `t` is earlier
  // than the current time. Thread-safe.
  void Set(absl::Time t);

 private:
  // Nanoseconds since the Unix epoch; one word so reads need no lock.
  std::atomic<int64_t> nanos_;
};

namespace internal {

// What `SystemClock::CoarseNowNanos()` returns while a ticker runs, else 0
// (before its first call, in a child after `fork()` until one, or while no
// ticker can be started). One relaxed load that never calls out, so a hit
// path that reads it needs no call frame. Thread-safe.
inline int64_t CoarseNowNanosIfTicking() {
  return SystemClock::coarse_nanos_.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace paddock

#endif  // PADDOCK_CLOCK_H_
