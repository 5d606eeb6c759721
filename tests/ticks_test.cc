// Tests of paddock/internal/ticks.h: the conversion, the rate's publication,
// the ticker's measurement of it, and a cache on the default clock timing its
// loads with it.

#include "paddock/internal/ticks.h"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

// A bound on polling loops, far beyond what any healthy run needs.
constexpr int kMaxPolls = 20'000;
constexpr uint64_t kOneNanoPerTick = uint64_t{1} << 32;

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool TickerMeasuresTicks() { return kHasTicks && TicksAreReliable(); }

// Starts the ticker and waits until it published a rate; false if it never
// does here.
bool WaitForTickRate() {
  if (!TickerMeasuresTicks()) return false;
  SystemClock::CoarseNowNanos();
  for (int i = 0; i < kMaxPolls && TickNanosQ32() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return TickNanosQ32() != 0;
}

TEST(TicksTest, TicksToNanosConvertsAtTheRate) {
  EXPECT_EQ(TicksToNanos(100, 1'100, kOneNanoPerTick), 1'000);
  EXPECT_EQ(TicksToNanos(100, 1'100, kOneNanoPerTick / 2), 500);
  EXPECT_EQ(TicksToNanos(0, 1'000, 40 * kOneNanoPerTick), 40'000);
  // A counter read on another core may be a little behind.
  EXPECT_EQ(TicksToNanos(1'100, 100, kOneNanoPerTick), 0);
  EXPECT_EQ(TicksToNanos(5, 5, kOneNanoPerTick), 0);
  EXPECT_EQ(TicksToNanos(0, std::numeric_limits<uint64_t>::max(),
                         40 * kOneNanoPerTick),
            std::numeric_limits<int64_t>::max());
}

TEST(TicksTest, PublishTickRateMeasuresNanosPerTickOrPublishesNothing) {
  // A ticker of this process would publish its own rate meanwhile.
  const bool alone = CoarseNowNanosIfTicking() == 0;
  const uint64_t before = TickNanosQ32();
  EXPECT_EQ(PublishTickRate(1'000, 5'000, 3'000, 11'000), 3 * kOneNanoPerTick);
  if (alone) {
    EXPECT_EQ(TickNanosQ32(), 3 * kOneNanoPerTick);
  }
  // Readings that give no rate leave the published one.
  EXPECT_EQ(PublishTickRate(3'000, 5'000, 3'000, 11'000), 0u);
  EXPECT_EQ(PublishTickRate(1'000, 11'000, 3'000, 5'000), 0u);
  EXPECT_EQ(PublishTickRate(0, 0, std::numeric_limits<uint64_t>::max(), 1), 0u);
  if (alone) {
    EXPECT_EQ(TickNanosQ32(), 3 * kOneNanoPerTick);
  }
  tick_nanos_q32.store(before);
}

TEST(TicksTest, TheTickerMeasuresTheRateOfTheMonotonicClock) {
  if (!WaitForTickRate()) GTEST_SKIP() << "no reliable counter here";
  const uint64_t ticks0 = Ticks();
  const int64_t nanos0 = MonotonicNanos();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const uint64_t ticks1 = Ticks();
  const int64_t nanos1 = MonotonicNanos();
  const int64_t by_clock = nanos1 - nanos0;
  const int64_t by_ticks = TicksToNanos(ticks0, ticks1, TickNanosQ32());
  // Generous: a rate measured over 10 ms is within a fraction of a percent.
  EXPECT_NEAR(static_cast<double>(by_ticks), static_cast<double>(by_clock),
              0.05 * static_cast<double>(by_clock) + 200'000);
}

// A cache on the default clock counts its loads' time whichever way it times
// them: by the clock before the tick rate is known, by ticks after.
TEST(TicksTest, ACacheOnTheDefaultClockCountsTheTimeOfItsLoads) {
  constexpr auto kLoadTime = std::chrono::milliseconds(20);
  Cache<int, int, SingleFlight> cache(
      [&](const int& k) -> absl::StatusOr<int> {
        std::this_thread::sleep_for(kLoadTime);
        return k;
      },
      Options{.ttl = absl::Hours(1)});
  ASSERT_EQ(cache.Get(1).value(), 1);
  const bool by_ticks = WaitForTickRate();
  ASSERT_EQ(cache.Get(2).value(), 2);
  const Stats stats = cache.stats();
  EXPECT_EQ(stats.loads, 2u);
  // Slept at least that long; the bound above only catches nonsense.
  EXPECT_GE(stats.total_load_time, 2 * absl::FromChrono(kLoadTime) * 0.95)
      << (by_ticks ? "timed by ticks" : "timed by the clock");
  EXPECT_LT(stats.total_load_time, absl::Seconds(60));
  // Both stored, and fresh: served without another load.
  EXPECT_EQ(cache.Get(1).value(), 1);
  EXPECT_EQ(cache.Get(2).value(), 2);
  EXPECT_EQ(cache.stats().loads, 2u);
}

}  // namespace
}  // namespace paddock::internal
