// SystemClock (monotonic clock plus a millisecond ticker) and ManualClock.

#include "paddock/clock.h"

#include <pthread.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "paddock/internal/ticks.h"

namespace paddock {
namespace {

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  // +1 keeps 0 free to mean "not started" in the coarse clock.
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + 1;
}

}  // namespace

std::atomic<int64_t> SystemClock::coarse_nanos_{0};

SystemClock* SystemClock::Get() {
  static SystemClock* const clock = new SystemClock;
  return clock;
}

int64_t SystemClock::NowNanos() {
  const int64_t now = MonotonicNanos();
  // Publish forward only: keeps the coarse clock fresh when the ticker lags
  // (e.g. on a saturated core) and never moves it backwards.
  int64_t seen = coarse_nanos_.load(std::memory_order_relaxed);
  // Only a reading 100 us ahead is worth writing the line every hit reads.
  while (seen != 0 && seen < now - 100'000 &&
         !coarse_nanos_.compare_exchange_weak(seen, now,
                                              std::memory_order_relaxed)) {
  }
  return now;
}

absl::Time SystemClock::Now() const {
  return absl::UnixEpoch() + absl::Nanoseconds(NowNanos());
}

namespace {

// The ticker's state. A process has at most one ticker; `fork()` leaves the
// child without it (threads do not survive a fork), so the child forgets it
// had one and starts its own on first use.
std::mutex ticker_mu;
bool ticker_running = false;     // Guarded by ticker_mu.
int64_t next_start_attempt = 0;  // Guarded by ticker_mu.

// How long after a failed start a reader tries again; until then hits read
// the precise clock.
constexpr int64_t kRetryNanos = 1'000'000'000;

// A tick and a clock reading taken together: the best of three, the one
// with the fewest ticks around the clock read (a preemption inside one
// shows as many).
void ReadTicksAndNanos(uint64_t* ticks, int64_t* nanos) {
  uint64_t best_spread = UINT64_MAX;
  for (int i = 0; i < 3; ++i) {
    const uint64_t before = internal::Ticks();
    const int64_t now = SystemClock::NowNanos();
    const uint64_t after = internal::Ticks();
    if (after - before < best_spread) {
      best_spread = after - before;
      *ticks = before + (after - before) / 2;
      *nanos = now;
    }
  }
}

void TickerLoop() {
  const bool ticks = internal::kHasTicks && internal::TicksHaveAConstantRate();
  internal::TickRateMeter meter;
  for (;;) {
    if (!ticks) {
      SystemClock::NowNanos();
    } else {
      uint64_t t = 0;
      int64_t nanos = 0;
      ReadTicksAndNanos(&t, &nanos);  // Also publishes the coarse time.
      const uint64_t rate = meter.Observe(t, nanos);
      if (rate != internal::tick_nanos_q32.load(std::memory_order_relaxed)) {
        internal::tick_nanos_q32.store(rate, std::memory_order_relaxed);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

namespace internal {

std::atomic<uint64_t> tick_nanos_q32{0};

uint64_t TickRateMeter::Observe(uint64_t ticks, int64_t nanos) {
  // How far one step's counted time may stray from the clock's before the
  // counter is taken to have jumped: the readings' own error is tens of
  // nanoseconds (ReadTicksAndNanos), a preemption inside all three of its
  // tries more.
  constexpr int64_t kStepSlackNanos = 50'000;
  if (started_ && nanos <= last_nanos_) return rate_;  // No time passed.
  bool jumped = !started_ || ticks <= last_ticks_;
  if (!jumped && rate_ != 0) {
    const int64_t step = nanos - last_nanos_;
    const int64_t counted = TicksToNanos(last_ticks_, ticks, rate_);
    const int64_t off = counted > step ? counted - step : step - counted;
    jumped = off > step / 50 + kStepSlackNanos;
  }
  last_ticks_ = ticks;
  last_nanos_ = nanos;
  if (jumped) {
    started_ = true;
    ticks0_ = ticks;
    nanos0_ = nanos;
    rate_ = 0;
    return 0;
  }
  if (nanos - nanos0_ >= kWindowNanos) {
    const absl::uint128 q32 =
        (absl::uint128(static_cast<uint64_t>(nanos - nanos0_)) << 32) /
        (ticks - ticks0_);
    if (q32 != 0 && absl::Uint128High64(q32) == 0) {
      rate_ = absl::Uint128Low64(q32);
    }
  }
  return rate_;
}

bool TicksHaveAConstantRate() {
#if defined(__x86_64__)
  unsigned int eax, ebx, ecx, edx;
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) == 0 ||
      eax < 0x80000007) {
    return false;
  }
  __get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx);
  return (edx & (1u << 8)) != 0;  // The invariant-TSC bit.
#elif defined(__aarch64__)
  return true;  // The generic timer's counter has a fixed frequency.
#else
  return false;
#endif
}

}  // namespace internal

void SystemClock::ForgetTickerAfterFork() {
  // The child has one thread and the ticker is gone: the coarse clock goes
  // back to "not started" (0) so the next hit starts a ticker of its own.
  // (A mutex held across the fork would be held forever; reinitialise it.)
  new (&ticker_mu) std::mutex;
  ticker_running = false;
  next_start_attempt = 0;
  coarse_nanos_.store(0, std::memory_order_relaxed);
}

int64_t SystemClock::StartTicker() {
  static const int registered = pthread_atfork(
      nullptr, nullptr, [] { SystemClock::ForgetTickerAfterFork(); });
  (void)registered;
  const int64_t now = MonotonicNanos();
  // One thread tries at a time; the others read the precise clock.
  std::unique_lock<std::mutex> lock(ticker_mu, std::try_to_lock);
  if (!lock.owns_lock() || ticker_running || now < next_start_attempt) {
    return now;
  }
  try {
    // Lives as long as the process; detached so that exit never waits on it.
    std::thread(TickerLoop).detach();
  } catch (const std::exception&) {
    // No thread (EAGAIN): hits keep reading the precise clock, which costs
    // more but never lets a value outlive its ttl; try again later.
    next_start_attempt = now + kRetryNanos;
    return now;
  }
  ticker_running = true;
  // Published only once a ticker runs: a coarse time that nobody advances
  // would serve expired values as fresh.
  coarse_nanos_.store(now, std::memory_order_relaxed);
  return now;
}

ManualClock::ManualClock(absl::Time start) : nanos_(absl::ToUnixNanos(start)) {}

absl::Time ManualClock::Now() const {
  return absl::FromUnixNanos(nanos_.load(std::memory_order_acquire));
}

void ManualClock::Advance(absl::Duration d) {
  if (d < absl::ZeroDuration()) {
    throw std::invalid_argument(
        absl::StrCat("paddock::ManualClock::Advance: d must be >= 0, got ",
                     absl::FormatDuration(d)));
  }
  const int64_t step = absl::ToInt64Nanoseconds(d);  // Saturates.
  int64_t current = nanos_.load(std::memory_order_acquire);
  int64_t next;
  do {
    // Saturate at the latest representable time instead of wrapping.
    if (__builtin_add_overflow(current, step, &next)) {
      next = std::numeric_limits<int64_t>::max();
    }
  } while (
      !nanos_.compare_exchange_weak(current, next, std::memory_order_acq_rel));
}

void ManualClock::Set(absl::Time t) {
  const int64_t target = absl::ToUnixNanos(t);
  int64_t current = nanos_.load(std::memory_order_acquire);
  do {
    if (target < current) {
      throw std::invalid_argument(absl::StrCat(
          "paddock::ManualClock::Set: time must not go back, got ",
          absl::FormatTime(t), " before ", absl::FormatTime(Now())));
    }
  } while (!nanos_.compare_exchange_weak(current, target,
                                         std::memory_order_acq_rel));
}

}  // namespace paddock
