// Tests of paddock/stats.h: the {fmt} formatter and equality of Stats.

#include "paddock/stats.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddock {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Sixteen counters and one duration. If this fails, Stats gained a field: add
// it to internal/stats_fields.h, to `kCounters` and to the tests below.
static_assert(sizeof(Stats) == 16 * sizeof(uint64_t) + sizeof(absl::Duration));

// Every counter of Stats, so a test can cover each one.
constexpr uint64_t Stats::*kCounters[] = {
    &Stats::hits,          &Stats::stale_hits,      &Stats::misses,
    &Stats::loads,         &Stats::load_failures,   &Stats::coalesced_waits,
    &Stats::refreshes,     &Stats::wait_timeouts,   &Stats::evictions,
    &Stats::negative_hits, &Stats::stale_fallbacks, &Stats::refreshes_skipped,
    &Stats::shared_hits,   &Stats::leases_acquired, &Stats::lease_waits,
    &Stats::shared_errors,
};

// A Stats with a different value in every field.
Stats DistinctStats() {
  return Stats{
      .hits = 1,
      .stale_hits = 2,
      .misses = 4,
      .loads = 3,
      .load_failures = 5,
      .coalesced_waits = 6,
      .refreshes = 7,
      .wait_timeouts = 8,
      .evictions = 9,
      .negative_hits = 10,
      .stale_fallbacks = 11,
      .refreshes_skipped = 12,
      .shared_hits = 13,
      .leases_acquired = 14,
      .lease_waits = 15,
      .shared_errors = 16,
      .total_load_time = absl::Milliseconds(1500),
  };
}

TEST(StatsFormatTest, ListsEveryFieldAsNameEqualsValueOnOneLine) {
  const std::string text = fmt::format("{}", DistinctStats());
  EXPECT_THAT(text, Not(HasSubstr("\n")));
  const std::vector<std::string> fields = absl::StrSplit(text, ' ');
  EXPECT_THAT(
      fields,
      ElementsAre("hits=1", "stale_hits=2", "misses=4", "loads=3",
                  "load_failures=5", "coalesced_waits=6", "refreshes=7",
                  "wait_timeouts=8", "evictions=9", "negative_hits=10",
                  "stale_fallbacks=11", "refreshes_skipped=12",
                  "shared_hits=13", "leases_acquired=14", "lease_waits=15",
                  "shared_errors=16", "total_load_time=1.5s"));
}

TEST(StatsFormatTest, FormatsEmptyStatsAsZeros) {
  EXPECT_EQ(fmt::format("{}", Stats{}),
            "hits=0 stale_hits=0 misses=0 loads=0 load_failures=0 "
            "coalesced_waits=0 refreshes=0 wait_timeouts=0 evictions=0 "
            "negative_hits=0 stale_fallbacks=0 refreshes_skipped=0 "
            "shared_hits=0 leases_acquired=0 lease_waits=0 shared_errors=0 "
            "total_load_time=0");
}

TEST(StatsFormatTest, FormatsTheLoadTimeAsAnAbslDuration) {
  EXPECT_THAT(
      fmt::format("{}", Stats{.total_load_time = absl::Microseconds(2500)}),
      HasSubstr("total_load_time=2.5ms"));
  EXPECT_THAT(fmt::format("{}", Stats{.total_load_time =
                                          absl::Hours(2) + absl::Seconds(3)}),
              HasSubstr("total_load_time=2h3s"));
}

TEST(StatsFormatTest, FormatsTheLargestCounterInFull) {
  EXPECT_THAT(fmt::format("{}", Stats{.loads = UINT64_MAX}),
              HasSubstr("loads=18446744073709551615"));
}

TEST(StatsFormatTest, WorksInsideALargerFormatString) {
  EXPECT_EQ(fmt::format("[{}]", Stats{.hits = 9}).substr(0, 8), "[hits=9 ");
}

TEST(StatsEqualityTest, StatsWithTheSameFieldsAreEqual) {
  EXPECT_EQ(Stats{}, Stats{});
  EXPECT_EQ(DistinctStats(), DistinctStats());
  EXPECT_FALSE(DistinctStats() != DistinctStats());
}

TEST(StatsEqualityTest, StatsDifferingInAnyOneCounterAreUnequal) {
  for (uint64_t Stats::*counter : kCounters) {
    Stats changed = DistinctStats();
    ++(changed.*counter);
    EXPECT_NE(changed, DistinctStats()) << fmt::format("{}", changed);
    EXPECT_FALSE(changed == DistinctStats());
  }
}

TEST(StatsEqualityTest, StatsDifferingInTotalLoadTimeAreUnequal) {
  Stats changed = DistinctStats();
  changed.total_load_time += absl::Nanoseconds(1);
  EXPECT_NE(changed, DistinctStats());
}

}  // namespace
}  // namespace paddock
