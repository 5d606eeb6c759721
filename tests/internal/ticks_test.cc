// Tests of paddock/internal/ticks.h: the conversion, the rate's measurement
// (and how a jump of the counter restarts it), the check of a load's counted
// time against the coarse clock, the ticker, and a cache on the default clock
// timing its loads with the counter.

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

bool TickerMeasuresTicks() { return kHasTicks && TicksHaveAConstantRate(); }

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

// `readings` readings into `meter`, a millisecond apart, of a counter that
// ticks `ticks_per_ms` times a millisecond, after (`ticks`, `nanos`), which
// they advance; returns the last rate it gave.
uint64_t ObserveSteadily(TickRateMeter& meter, uint64_t& ticks, int64_t& nanos,
                         int readings, uint64_t ticks_per_ms) {
  uint64_t rate = 0;
  for (int i = 0; i < readings; ++i) {
    ticks += ticks_per_ms;
    nanos += 1'000'000;
    rate = meter.Observe(ticks, nanos);
  }
  return rate;
}

TEST(TickRateMeterTest, KnowsTheRateOnceItsReadingsSpanTheWindow) {
  TickRateMeter meter;
  uint64_t ticks = 1'000'000;
  int64_t nanos = 5'000'000'000;
  EXPECT_EQ(meter.Observe(ticks, nanos), 0u);
  // 3 ticks a nanosecond: a third of a nanosecond per tick.
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 9, 3'000'000), 0u);
  const uint64_t rate = ObserveSteadily(meter, ticks, nanos, 1, 3'000'000);
  EXPECT_EQ(rate, kOneNanoPerTick / 3);
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 100, 3'000'000), rate);
}

TEST(TickRateMeterTest, ToleratesTheReadingsOwnError) {
  TickRateMeter meter;
  uint64_t ticks = 0;
  int64_t nanos = 1'000'000;
  meter.Observe(ticks, nanos);
  ObserveSteadily(meter, ticks, nanos, 10, 1'000'000);
  // A reading 20 us off (a preemption inside ReadTicksAndNanos) is not a jump.
  ticks += 1'020'000;
  nanos += 1'000'000;
  EXPECT_NE(meter.Observe(ticks, nanos), 0u);
  ticks += 980'000;
  nanos += 1'000'000;
  EXPECT_NE(meter.Observe(ticks, nanos), 0u);
  // Nor is a reading at the same clock time, which it ignores.
  EXPECT_NE(meter.Observe(ticks + 5, nanos), 0u);
}

TEST(TickRateMeterTest, ACounterThatJumpsForgetsTheRateUntilANewWindow) {
  TickRateMeter meter;
  uint64_t ticks = 0;
  int64_t nanos = 1'000'000;
  meter.Observe(ticks, nanos);
  ASSERT_EQ(ObserveSteadily(meter, ticks, nanos, 10, 1'000'000),
            kOneNanoPerTick);
  // Forward by a second within a millisecond (a VM restored elsewhere).
  ticks += 1'000'000'000;
  nanos += 1'000'000;
  EXPECT_EQ(meter.Observe(ticks, nanos), 0u);
  // The new window knows the new rate, not a blend with the jump.
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 9, 2'000'000), 0u);
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 1, 2'000'000),
            kOneNanoPerTick / 2);
  // Back.
  ticks -= 5'000;
  nanos += 1'000'000;
  EXPECT_EQ(meter.Observe(ticks, nanos), 0u);
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 10, 2'000'000),
            kOneNanoPerTick / 2);
  // A rate that changes by a tenth.
  EXPECT_EQ(ObserveSteadily(meter, ticks, nanos, 1, 2'200'000), 0u);
}

// A precise clock for CountedLoadTimes that counts its reads.
struct CountingClock {
  int64_t now;
  int* reads;
  int64_t operator()() const {
    ++*reads;
    return now;
  }
};

TEST(CountedLoadTimesTest, ACountedTimeTheCoarseClockAllowsReadsNoClock) {
  int reads = 0;
  const CountingClock precise{.now = 50'700'000, .reads = &reads};
  // A 40 us load inside one coarse tick: it ends at the coarse time, never
  // later, and keeps its counted duration.
  LoadTimes t = CountedLoadTimes(50'000'000, 40'000, 50'000'000, precise);
  EXPECT_EQ(t.finished, 50'000'000);
  EXPECT_EQ(t.finished - t.started, 40'000);
  // A 1.05 ms load across one tick: the coarse end is the earlier.
  t = CountedLoadTimes(50'000'000, 1'050'000, 51'000'000, precise);
  EXPECT_EQ(t.finished, 51'000'000);
  EXPECT_EQ(t.started, 49'950'000);
  // A 300 us load across a tick: the counted end is the earlier.
  t = CountedLoadTimes(50'000'000, 300'000, 51'000'000, precise);
  EXPECT_EQ(t.finished, 50'300'000);
  EXPECT_EQ(t.started, 50'000'000);
  EXPECT_EQ(reads, 0);
}

TEST(CountedLoadTimesTest, ACountedTimeTheCoarseClockDeniesAsksThePreciseOne) {
  int reads = 0;
  // The coarse clock stalled (its ticker preempted) during a 700 us load:
  // the precise clock allows the counted time.
  LoadTimes t = CountedLoadTimes(50'000'000, 700'000, 50'000'000,
                                 CountingClock{50'750'000, &reads});
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(t.finished, 50'750'000);
  EXPECT_EQ(t.finished - t.started, 700'000);
  // The counter jumped ahead: the load took at most the time since its
  // coarse start.
  t = CountedLoadTimes(50'000'000, 3'000'000'000, 50'000'000,
                       CountingClock{50'020'000, &reads});
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(t.finished, 50'020'000);
  EXPECT_EQ(t.started, 50'000'000);
  // No ticker (0), or a coarse clock that went back (a fork's new ticker).
  t = CountedLoadTimes(50'000'000, 10, 0, CountingClock{50'020'000, &reads});
  EXPECT_EQ(reads, 3);
  EXPECT_EQ(t.finished, 50'020'000);
  EXPECT_EQ(t.finished - t.started, 10);
  t = CountedLoadTimes(50'000'000, 10, 40'000'000,
                       CountingClock{50'020'000, &reads});
  EXPECT_EQ(reads, 4);
  EXPECT_EQ(t.finished - t.started, 10);
}

TEST(CountedLoadTimesTest, NeverEndsLaterThanThePreciseClock) {
  // The coarse clock is never ahead of the precise one, so an end at or
  // before the coarse time at the call is never late, whatever the counter
  // says, and one from the precise clock is its reading.
  int reads = 0;
  for (int64_t counted :
       {int64_t{0}, int64_t{50'000}, int64_t{99'999}, int64_t{100'000},
        int64_t{100'001}, int64_t{5'000'000}, int64_t{1} << 62}) {
    for (int64_t coarse_end : {int64_t{50'000'000}, int64_t{51'000'000}}) {
      const int64_t precise_now = coarse_end + 400'000;
      const LoadTimes t = CountedLoadTimes(50'000'000, counted, coarse_end,
                                           CountingClock{precise_now, &reads});
      EXPECT_LE(t.finished, precise_now) << counted << " " << coarse_end;
      EXPECT_LE(t.started, t.finished);
      EXPECT_LE(t.finished - t.started, counted);
    }
  }
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
