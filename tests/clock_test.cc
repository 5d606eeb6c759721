// Tests of paddock/clock.h: ManualClock and SystemClock.

#include "paddock/clock.h"

#include <sys/wait.h>
#include <time.h>  // clock_gettime: the clock SystemClock documents it reads.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <latch>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/internal/ticks.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "sanitizers.h"
#include "thread_limit.h"

namespace paddock {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// A bound on polling loops, far beyond what any healthy run needs: the tests
// assert what eventually holds, never how soon.
constexpr int kMaxPolls = 20'000;

TEST(ManualClockTest, StartsAtTheUnixEpochByDefault) {
  ManualClock clock;
  EXPECT_EQ(clock.Now(), absl::UnixEpoch());
}

TEST(ManualClockTest, StartsAtTheGivenTime) {
  const absl::Time start = absl::FromUnixSeconds(1'700'000'000);
  ManualClock clock(start);
  EXPECT_EQ(clock.Now(), start);
}

TEST(ManualClockTest, AdvanceMovesTheClockForwardByTheDuration) {
  ManualClock clock;
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Seconds(3));
  clock.Advance(absl::Nanoseconds(7));
  EXPECT_EQ(clock.Now(),
            absl::UnixEpoch() + absl::Seconds(3) + absl::Nanoseconds(7));
}

TEST(ManualClockTest, AdvanceByZeroLeavesTheClockWhereItWas) {
  ManualClock clock(absl::FromUnixSeconds(100));
  clock.Advance(absl::ZeroDuration());
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
}

TEST(ManualClockTest, SetMovesTheClockToTheGivenTime) {
  ManualClock clock;
  const absl::Time later = absl::UnixEpoch() + absl::Minutes(5);
  clock.Set(later);
  EXPECT_EQ(clock.Now(), later);
}

TEST(ManualClockTest, SetToTheCurrentTimeIsAllowed) {
  ManualClock clock(absl::FromUnixSeconds(42));
  clock.Set(absl::FromUnixSeconds(42));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(42));
}

TEST(ManualClockTest, AdvanceByANegativeDurationThrowsNamingTheDuration) {
  ManualClock clock(absl::FromUnixSeconds(10));
  EXPECT_THAT([&] { clock.Advance(absl::Seconds(-1)); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("-1s")));
  EXPECT_THAT([&] { clock.Advance(absl::Milliseconds(-250)); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("-250ms")));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(10));
}

TEST(ManualClockTest, SetToAnEarlierTimeThrowsNamingTheTime) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  const absl::Time earlier = absl::FromUnixSeconds(999);
  ManualClock clock(start);
  EXPECT_THAT([&] { clock.Set(earlier); },
              ThrowsMessage<std::invalid_argument>(
                  AllOf(HasSubstr(absl::FormatTime(earlier)),
                        HasSubstr(absl::FormatTime(start)))));
  EXPECT_EQ(clock.Now(), start);
}

// Advance() accepts any d >= 0, so it may refuse one it cannot represent or
// stop at the largest time, but it must not wrap around into the past.
TEST(ManualClockTest, AdvanceByAnInfiniteDurationNeverMovesTheClockBack) {
  ManualClock clock(absl::UnixEpoch() + absl::Seconds(1));
  const absl::Time before = clock.Now();
  try {
    clock.Advance(absl::InfiniteDuration());
  } catch (const std::invalid_argument&) {
    // Refusing is fine too.
  }
  EXPECT_GE(clock.Now(), before);
}

TEST(ManualClockTest, AdvancePastTheLatestRepresentableTimeNeverMovesItBack) {
  ManualClock clock(absl::FromUnixNanos(INT64_MAX - 10));
  const absl::Time before = clock.Now();
  try {
    clock.Advance(absl::Nanoseconds(100));
  } catch (const std::invalid_argument&) {
    // Refusing is fine too.
  }
  EXPECT_GE(clock.Now(), before);
}

TEST(ManualClockTest, ConcurrentAdvancesFromSeveralThreadsSumExactly) {
  constexpr int kThreads = 4;
  constexpr int kAdvancesPerThread = 20'000;
  ManualClock clock;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      // Threads advance by different steps so a lost update shows in the sum.
      for (int i = 0; i < kAdvancesPerThread; ++i) {
        clock.Advance(absl::Nanoseconds(t + 1));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Each thread t adds (t + 1) ns per advance: 1 + 2 + 3 + 4 = 10.
  EXPECT_EQ(clock.Now(),
            absl::UnixEpoch() + absl::Nanoseconds(10 * kAdvancesPerThread));
}

TEST(ManualClockTest, ConcurrentReadersNeverSeeTheClockGoBack) {
  constexpr int kAdvances = 50'000;
  ManualClock clock;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    absl::Time last = clock.Now();
    while (!done.load(std::memory_order_acquire)) {
      const absl::Time now = clock.Now();
      ASSERT_GE(now, last);
      last = now;
    }
  });
  for (int i = 0; i < kAdvances; ++i) clock.Advance(absl::Nanoseconds(1));
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Nanoseconds(kAdvances));
}

TEST(SystemClockTest, GetReturnsOneInstanceOnEveryThread) {
  SystemClock* const here = SystemClock::Get();
  ASSERT_NE(here, nullptr);
  EXPECT_EQ(SystemClock::Get(), here);
  SystemClock* there = nullptr;
  std::thread([&] { there = SystemClock::Get(); }).join();
  EXPECT_EQ(there, here);
}

TEST(SystemClockTest, NowNeverGoesBackwards) {
  const Clock& clock = *SystemClock::Get();
  absl::Time last = clock.Now();
  for (int i = 0; i < 100'000; ++i) {
    const absl::Time now = clock.Now();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(SystemClockTest, NowNanosIsNowInNanosecondsSinceTheUnixEpoch) {
  const int64_t before = SystemClock::NowNanos();
  const absl::Time now = SystemClock::Get()->Now();
  const int64_t after = SystemClock::NowNanos();
  EXPECT_LE(before, absl::ToUnixNanos(now));
  EXPECT_LE(absl::ToUnixNanos(now), after);
}

TEST(SystemClockTest, CoarseNowNeverRunsAheadOfNow) {
  int64_t last_coarse = SystemClock::CoarseNowNanos();
  EXPECT_GT(last_coarse, 0);
  for (int i = 0; i < 100'000; ++i) {
    const int64_t coarse = SystemClock::CoarseNowNanos();
    const int64_t precise = SystemClock::NowNanos();
    ASSERT_LE(coarse, precise);
    ASSERT_GE(coarse, last_coarse) << "the coarse clock went back";
    last_coarse = coarse;
  }
}

TEST(SystemClockTest, CoarseNowNeverRunsAheadOfNowOnAnotherThread) {
  SystemClock::CoarseNowNanos();  // Starts the ticker.
  std::atomic<bool> done{false};
  // Publishes readings from another thread while this one checks.
  std::thread publisher([&] {
    while (!done.load(std::memory_order_relaxed)) SystemClock::NowNanos();
  });
  for (int i = 0; i < 100'000; ++i) {
    const int64_t coarse = SystemClock::CoarseNowNanos();
    const int64_t precise = SystemClock::NowNanos();
    ASSERT_LE(coarse, precise);
  }
  done.store(true, std::memory_order_relaxed);
  publisher.join();
}

TEST(SystemClockTest, CoarseNowCatchesUpWithAnEarlierNow) {
  SystemClock::CoarseNowNanos();  // Starts the ticker.
  const int64_t precise = SystemClock::NowNanos();
  int64_t coarse = SystemClock::CoarseNowNanos();
  for (int i = 0; i < kMaxPolls && coarse < precise; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    coarse = SystemClock::CoarseNowNanos();
  }
  EXPECT_GE(coarse, precise);
}

// No `Now()` call here: only the ticker can move the coarse clock past the
// monotonic reading taken directly from the OS.
TEST(SystemClockTest, CoarseNowCatchesUpWithoutCallsToNow) {
  SystemClock::CoarseNowNanos();  // Starts the ticker.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t monotonic = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  int64_t coarse = SystemClock::CoarseNowNanos();
  for (int i = 0; i < kMaxPolls && coarse < monotonic; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    coarse = SystemClock::CoarseNowNanos();
  }
  EXPECT_GE(coarse, monotonic);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Counts loads of a cache on the default clock (ttl 50 ms) while it is read
// every 100 ms for a second: about ten when expiry is noticed on hits.
int LoadsOverOneSecondOfReads() {
  int loads = 0;
  Cache<int, int, SingleFlight> cache(
      [&](const int& k) -> absl::StatusOr<int> {
        ++loads;
        return k;
      },
      Options{.ttl = absl::Milliseconds(50)});
  for (int i = 0; i < 10; ++i) {
    if (!cache.Get(1).ok()) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return loads;
}

TEST(SystemClockDeathTest, WithoutATickerThreadHitsReadThePreciseClock) {
  // The coarse time is published only once the ticker thread runs: were it
  // published first and the start failed, the first hit would throw
  // std::system_error and the coarse clock never move (1 load, not ~10).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!testing::LimitTasksOfThisUser(1)) std::_Exit(2);
        try {
          std::_Exit(LoadsOverOneSecondOfReads() >= 5 ? 0 : 1);
        } catch (...) {
          std::_Exit(3);
        }
      },
      ::testing::ExitedWithCode(0), "");
}

// Asked about every hit (no quiet window); remembers when the value it was
// asked about was stored.
struct RecordsLoadedAt {
  static constexpr bool kCoalesceLoads = true;
  Lifetime OnStore(absl::Duration ttl, absl::Duration, Random&) const {
    return {.expires_after = ttl,
            .quiet_for = absl::ZeroDuration(),
            .keep_for = ttl,
            .serve_on_error_for = ttl};
  }
  Decision Decide(const EntryState& s, absl::Time, Random&) const {
    loaded_at->store(absl::ToUnixNanos(s.loaded_at));
    return Decision::kServe;
  }
  std::atomic<int64_t>* loaded_at;
};

TEST(SystemClockTest, APutIsStoredAtATimeNeverAheadOfThePreciseClock) {
  // A Put takes the coarse time while the ticker runs: at most a tick early
  // (the bound below only catches nonsense), never late, so a value is never
  // fresh for longer than its ttl.
  std::atomic<int64_t> loaded_at{0};
  Cache<int, int, RecordsLoadedAt> cache(
      [](const int& k) -> absl::StatusOr<int> { return k; },
      Options{.ttl = absl::Hours(1)}, {.loaded_at = &loaded_at});
  SystemClock::CoarseNowNanos();  // Starts the ticker.
  for (int i = 0; i < 3; ++i) {
    const int64_t before = SystemClock::NowNanos();
    cache.Put(1, i);
    const int64_t after = SystemClock::NowNanos();
    loaded_at.store(0);
    ASSERT_EQ(cache.Get(1).value(), i);
    ASSERT_NE(loaded_at.load(), 0) << "the policy was not asked";
    EXPECT_LE(loaded_at.load(), after);
    EXPECT_GE(loaded_at.load(), before - int64_t{10'000'000'000});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(SystemClockTest, AForkedChildStartsATickerOfItsOwn) {
  if (PADDOCK_TEST_TSAN) {
    GTEST_SKIP() << "ThreadSanitizer stops a forked child that starts a thread";
  }
  // The parent's ticker does not survive fork(): unless the child starts its
  // own, its coarse clock stops and hits serve expired values as fresh.
  //
  // Fork only once the parent's ticker is in its loop, as in a pre-fork
  // server whose ticker has run for a while. A fork while the ticker thread
  // is still starting is another matter: under clang 14's ASan that start
  // may hold a lock of the sanitizer's allocator (its stack lookup callocs),
  // the child inherits it held, and the child's own ticker hangs in calloc
  // before its first tick (9 runs in 40 here, seen with gdb); glibc's malloc
  // resets its locks in a forked child.
  const int64_t started = SystemClock::CoarseNowNanos();
  const bool counts = internal::kHasTicks && internal::TicksHaveAConstantRate();
  for (int i = 0; i < 10'000; ++i) {
    if (internal::CoarseNowNanosIfTicking() != started &&
        (!counts || internal::TickNanosQ32() != 0)) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(internal::CoarseNowNanosIfTicking(), started)
      << "the parent's ticker never ticked";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  // About 10 loads when the child's ticker runs; 1 with a stopped clock. The
  // bound leaves room for a ticker starved for 50 ms at a few of the reads, as
  // on a two-core machine running sanitised tests two at a time (seen once).
  if (child == 0) _exit(LoadsOverOneSecondOfReads() >= 3 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace paddock
