// SystemClock (monotonic clock plus a millisecond ticker) and ManualClock.

#include "paddock/clock.h"

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

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

void TickerLoop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    SystemClock::NowNanos();
  }
}

}  // namespace

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
