// Tests of paddock/internal/time_math.h: saturating arithmetic on the int64
// nanosecond timestamps the cache stores.

#include "paddock/internal/time_math.h"

#include <cstdint>
#include <limits>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

constexpr int64_t kLatest = std::numeric_limits<int64_t>::max();
constexpr int64_t kEarliest = std::numeric_limits<int64_t>::min();

// A century of 365-day years: where IsForever starts.
const absl::Duration kCentury = absl::Hours(24 * 365 * 100);

TEST(ToNanosSaturatedTest, FiniteDurationsAreTheirNanoseconds) {
  EXPECT_EQ(ToNanosSaturated(absl::ZeroDuration()), 0);
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(1)), 1);
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(-1)), -1);
  EXPECT_EQ(ToNanosSaturated(absl::Milliseconds(1500)), 1'500'000'000);
  EXPECT_EQ(ToNanosSaturated(-absl::Hours(3)), -10'800'000'000'000);
}

TEST(ToNanosSaturatedTest, FractionsOfANanosecondTruncateTowardZero) {
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(1) / 4), 0);
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(7) / 4), 1);
  EXPECT_EQ(ToNanosSaturated(-absl::Nanoseconds(7) / 4), -1);
}

TEST(ToNanosSaturatedTest, InfiniteDurationsAreTheInt64Bounds) {
  EXPECT_EQ(ToNanosSaturated(absl::InfiniteDuration()), kLatest);
  EXPECT_EQ(ToNanosSaturated(-absl::InfiniteDuration()), kEarliest);
}

// 292 years is the int64 range of nanoseconds.
TEST(ToNanosSaturatedTest, FiniteDurationsBeyondTheInt64RangeSaturate) {
  EXPECT_EQ(ToNanosSaturated(absl::Hours(24 * 365 * 300)), kLatest);
  EXPECT_EQ(ToNanosSaturated(-absl::Hours(24 * 365 * 300)), kEarliest);
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(kLatest)), kLatest);
  EXPECT_EQ(ToNanosSaturated(absl::Nanoseconds(kEarliest)), kEarliest);
}

TEST(ToNanosSaturatedTest, AgreesWithAbslOnBothSidesOfTheFastPath) {
  // The inline fast path covers [0, 2^33 s); absl converts everything else.
  const absl::Duration edge = absl::Seconds(int64_t{1} << 33);
  for (absl::Duration d :
       {absl::ZeroDuration(), absl::Nanoseconds(1), absl::Nanoseconds(999),
        absl::Nanoseconds(1) / 4, absl::Nanoseconds(7) / 2, absl::Seconds(1),
        absl::Hours(1) + absl::Nanoseconds(3), absl::Hours(24 * 365 * 200),
        edge - absl::Nanoseconds(1), edge, edge + absl::Nanoseconds(1),
        -absl::Nanoseconds(1), -absl::Nanoseconds(1) / 4, -absl::Hours(1),
        -edge}) {
    EXPECT_EQ(ToNanosSaturated(d), absl::ToInt64Nanoseconds(d))
        << absl::FormatDuration(d);
  }
}

TEST(AddSaturatedTest, AddsWithinTheRange) {
  EXPECT_EQ(AddSaturated(1'000, absl::Nanoseconds(234)), 1'234);
  EXPECT_EQ(AddSaturated(1'000, -absl::Microseconds(2)), -1'000);
  EXPECT_EQ(AddSaturated(kLatest - 1, absl::Nanoseconds(1)), kLatest);
  EXPECT_EQ(AddSaturated(kEarliest + 1, -absl::Nanoseconds(1)), kEarliest);
}

TEST(AddSaturatedTest, OverflowClampsToTheLatestTime) {
  EXPECT_EQ(AddSaturated(kLatest - 1, absl::Nanoseconds(2)), kLatest);
  EXPECT_EQ(AddSaturated(kLatest, absl::Seconds(1)), kLatest);
  EXPECT_EQ(AddSaturated(1, absl::Nanoseconds(kLatest)), kLatest);
}

TEST(AddSaturatedTest, UnderflowClampsToTheEarliestTime) {
  EXPECT_EQ(AddSaturated(kEarliest + 1, -absl::Nanoseconds(2)), kEarliest);
  EXPECT_EQ(AddSaturated(kEarliest, -absl::Seconds(1)), kEarliest);
  EXPECT_EQ(AddSaturated(-2, absl::Nanoseconds(kEarliest)), kEarliest);
}

// What the cache stores for an infinite ttl: never reached by a clock that
// started at or after the Unix epoch (SystemClock, ManualClock's default).
TEST(AddSaturatedTest, AnInfiniteDurationAfterTheEpochIsTheLatestTime) {
  const int64_t now = absl::ToUnixNanos(absl::FromCivil(
      absl::CivilSecond(2030, 1, 1, 0, 0, 0), absl::UTCTimeZone()));
  EXPECT_EQ(AddSaturated(0, absl::InfiniteDuration()), kLatest);
  EXPECT_EQ(AddSaturated(now, absl::InfiniteDuration()), kLatest);
  EXPECT_EQ(AddSaturated(now, absl::Hours(24 * 365 * 1000)), kLatest);
}

TEST(AddSaturatedTest, MinusAnInfiniteDurationBeforeTheEpochIsTheEarliestTime) {
  EXPECT_EQ(AddSaturated(0, -absl::InfiniteDuration()), kEarliest);
  EXPECT_EQ(AddSaturated(-5, -absl::InfiniteDuration()), kEarliest);
}

TEST(IsForeverTest, ACenturyOrMoreIsForever) {
  EXPECT_TRUE(IsForever(kCentury));
  EXPECT_TRUE(IsForever(kCentury * 10));
  EXPECT_TRUE(IsForever(absl::InfiniteDuration()));
}

TEST(IsForeverTest, LessThanACenturyIsNot) {
  EXPECT_FALSE(IsForever(kCentury - absl::Nanoseconds(1)));
  EXPECT_FALSE(IsForever(absl::Hours(24 * 365)));
  EXPECT_FALSE(IsForever(absl::ZeroDuration()));
  EXPECT_FALSE(IsForever(-absl::InfiniteDuration()));
}

}  // namespace
}  // namespace paddock::internal
