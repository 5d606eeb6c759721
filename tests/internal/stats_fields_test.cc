// Tests for internal::kStatsFields: the one table the formatter, the
// Prometheus exposition and the recorder read the counters through names
// every counter of `Stats` once, in the order of StatsCounter, with help
// text a Prometheus HELP line can carry.

#include "paddock/internal/stats_fields.h"

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "paddock/stats.h"

namespace paddock::internal {
namespace {

TEST(StatsFieldsTest, EveryCounterOnceUnderItsOwnName) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kStatsCounters; ++i) {
    EXPECT_TRUE(names.insert(kStatsFields[i].name).second)
        << kStatsFields[i].name;
    for (size_t j = 0; j < i; ++j) {  // Member pointers have no order.
      EXPECT_NE(kStatsFields[i].field, kStatsFields[j].field)
          << kStatsFields[i].name;
    }
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kStatsCounters));
  EXPECT_EQ(kStatsFields[kHits].name, "hits");
  EXPECT_EQ(kStatsFields[kSharedErrors].name, "shared_errors");
}

TEST(StatsFieldsTest, EachFieldReadsItsOwnMember) {
  Stats s;
  for (size_t i = 0; i < kStatsCounters; ++i) s.*kStatsFields[i].field = i + 1;
  EXPECT_EQ(s.hits, kHits + 1);
  EXPECT_EQ(s.misses, kMisses + 1);
  EXPECT_EQ(s.lease_waits, kLeaseWaits + 1);
}

TEST(StatsFieldsTest, HelpFitsOnOnePrometheusLine) {
  for (const StatsField& f : kStatsFields) {
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_EQ(f.help.find('\n'), std::string_view::npos) << f.name;
    EXPECT_EQ(f.help.find('\\'), std::string_view::npos) << f.name;
  }
}

}  // namespace
}  // namespace paddock::internal
