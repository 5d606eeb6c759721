#include "paddock/prometheus.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace paddock {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

// Distinct values, so that a field rendered under the wrong name shows.
Stats DistinctStats() {
  Stats s;
  s.hits = 1;
  s.stale_hits = 2;
  s.misses = 3;
  s.loads = 4;
  s.load_failures = 5;
  s.coalesced_waits = 6;
  s.refreshes = 7;
  s.wait_timeouts = 8;
  s.evictions = 9;
  s.negative_hits = 10;
  s.stale_fallbacks = 11;
  s.refreshes_skipped = 12;
  s.shared_hits = 13;
  s.leases_acquired = 14;
  s.lease_waits = 15;
  s.shared_errors = 16;
  s.total_load_time = absl::Milliseconds(1500);
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(ToPrometheusTest, RendersEveryFieldAsALabelledCounter) {
  const std::string text = ToPrometheus(DistinctStats(), "exhibition");
  const std::vector<std::string> expected_samples = {
      R"(paddock_hits_total{cache="exhibition"} 1)",
      R"(paddock_stale_hits_total{cache="exhibition"} 2)",
      R"(paddock_misses_total{cache="exhibition"} 3)",
      R"(paddock_loads_total{cache="exhibition"} 4)",
      R"(paddock_load_failures_total{cache="exhibition"} 5)",
      R"(paddock_coalesced_waits_total{cache="exhibition"} 6)",
      R"(paddock_refreshes_total{cache="exhibition"} 7)",
      R"(paddock_wait_timeouts_total{cache="exhibition"} 8)",
      R"(paddock_evictions_total{cache="exhibition"} 9)",
      R"(paddock_negative_hits_total{cache="exhibition"} 10)",
      R"(paddock_stale_fallbacks_total{cache="exhibition"} 11)",
      R"(paddock_refreshes_skipped_total{cache="exhibition"} 12)",
      R"(paddock_shared_hits_total{cache="exhibition"} 13)",
      R"(paddock_leases_acquired_total{cache="exhibition"} 14)",
      R"(paddock_lease_waits_total{cache="exhibition"} 15)",
      R"(paddock_shared_errors_total{cache="exhibition"} 16)",
      R"(paddock_load_seconds_total{cache="exhibition"} 1.5)",
  };
  std::vector<std::string> samples;
  for (const std::string& line : Lines(text)) {
    if (line[0] != '#') samples.push_back(line);
  }
  EXPECT_EQ(samples, expected_samples);
}

TEST(ToPrometheusTest, EachMetricHasHelpThenTypeThenItsSample) {
  const std::vector<std::string> lines =
      Lines(ToPrometheus(DistinctStats(), "exhibition"));
  ASSERT_EQ(lines.size(), 17u * 3);
  std::set<std::string> names;
  for (size_t i = 0; i < lines.size(); i += 3) {
    ASSERT_THAT(lines[i], MatchesRegex("# HELP paddock_[a-z_]+_total [^ ].*"));
    const std::string name = lines[i].substr(7, lines[i].find(' ', 7) - 7);
    EXPECT_EQ(lines[i + 1], "# TYPE " + name + " counter");
    EXPECT_TRUE(lines[i + 2].starts_with(name + "{")) << lines[i + 2];
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 17u) << "a metric name appears twice";
}

TEST(ToPrometheusTest, EverySampleLineParses) {
  Stats s = DistinctStats();
  s.hits = std::numeric_limits<uint64_t>::max();
  s.total_load_time = absl::Nanoseconds(1);
  // name{cache="value"} number, in POSIX extended regex syntax: the value
  // holds no bare `"` or `\`, and the number is an integer or a float that
  // Prometheus parses. (A raw newline would have split the line.)
  const std::string sample =
      R"re(paddock_[a-z_]+_total[{]cache="([^"\\]|\\\\|\\"|\\n)*"[}] )re"
      R"re(([0-9]+|[0-9.]+(e[-+][0-9]+)?|[+]Inf))re";
  for (const std::string& line : Lines(ToPrometheus(s, "a\"b\\c\nd"))) {
    if (line[0] == '#') continue;
    EXPECT_THAT(line, MatchesRegex(sample));
  }
}

TEST(ToPrometheusTest, EscapesBackslashQuoteAndNewlineInTheLabelValue) {
  const std::string text = ToPrometheus(Stats{}, "a\\b\"c\nd");
  EXPECT_THAT(text, HasSubstr(R"(paddock_hits_total{cache="a\\b\"c\nd"} 0)"
                              "\n"));
  // A raw newline inside the label would split the sample line.
  for (const std::string& line : Lines(text)) {
    EXPECT_TRUE(line.starts_with("# ") || line.starts_with("paddock_")) << line;
  }
}

TEST(ToPrometheusTest, LeavesOtherCharactersOfTheLabelValueAlone) {
  EXPECT_THAT(ToPrometheus(Stats{}, "전시회 {x}='y'"),
              HasSubstr(R"(paddock_hits_total{cache="전시회 {x}='y'"} 0)"));
  EXPECT_THAT(ToPrometheus(Stats{}, ""),
              HasSubstr(R"(paddock_hits_total{cache=""} 0)"));
}

TEST(ToPrometheusTest, LoadTimeIsInSeconds) {
  Stats s;
  s.total_load_time = absl::Milliseconds(80);
  EXPECT_THAT(ToPrometheus(s, "x"),
              HasSubstr("paddock_load_seconds_total{cache=\"x\"} 0.08\n"));
  s.total_load_time = absl::ZeroDuration();
  EXPECT_THAT(ToPrometheus(s, "x"),
              HasSubstr("paddock_load_seconds_total{cache=\"x\"} 0\n"));
  s.total_load_time = absl::Seconds(3600);
  EXPECT_THAT(ToPrometheus(s, "x"),
              HasSubstr("paddock_load_seconds_total{cache=\"x\"} 3600\n"));
  s.total_load_time = absl::InfiniteDuration();
  EXPECT_THAT(ToPrometheus(s, "x"),
              HasSubstr("paddock_load_seconds_total{cache=\"x\"} +Inf\n"));
}

TEST(ToPrometheusTest, HelpAndTypeComeBeforeTheSample) {
  const std::string text = ToPrometheus(DistinctStats(), "exhibition");
  EXPECT_THAT(text, HasSubstr("# HELP paddock_loads_total Loader calls "
                              "started, foreground and background.\n"
                              "# TYPE paddock_loads_total counter\n"
                              "paddock_loads_total{cache=\"exhibition\"} 4\n"));
  EXPECT_TRUE(text.ends_with("\n"));
}

TEST(AppendPrometheusTest, GroupsTheSamplesOfSeveralCachesUnderOneHeader) {
  Stats a;
  a.loads = 22;
  Stats b;
  b.loads = 536;
  const NamedStats caches[] = {{"single_flight", a}, {"jitter", b}};
  std::string out = "# some other metrics\n";
  AppendPrometheus(caches, &out);
  EXPECT_TRUE(out.starts_with("# some other metrics\n# HELP"));
  EXPECT_THAT(out, HasSubstr("# TYPE paddock_loads_total counter\n"
                             "paddock_loads_total{cache=\"single_flight\"} 22\n"
                             "paddock_loads_total{cache=\"jitter\"} 536\n"));
  size_t types = 0;
  for (const std::string& line : Lines(out)) {
    if (line.starts_with("# TYPE ")) ++types;
  }
  EXPECT_EQ(types, 17u);
}

TEST(AppendPrometheusTest, OneCacheMatchesToPrometheus) {
  const NamedStats one[] = {{"exhibition", DistinctStats()}};
  std::string out;
  AppendPrometheus(one, &out);
  EXPECT_EQ(out, ToPrometheus(DistinctStats(), "exhibition"));
}

TEST(AppendPrometheusTest, NoCachesAppendsNothing) {
  std::string out = "unchanged";
  AppendPrometheus({}, &out);
  EXPECT_EQ(out, "unchanged");
}

TEST(ToPrometheusTest, RendersTheStatsOfALiveCache) {
  ManualClock clock;
  int calls = 0;
  Cache<int, int, SingleFlight> cache(
      [&](const int& key) -> absl::StatusOr<int> {
        ++calls;
        clock.Advance(absl::Milliseconds(250));
        return key;
      },
      Options{.ttl = absl::Seconds(1), .clock = &clock});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.Get(7).ok());
  const std::string text = ToPrometheus(cache.stats(), "exhibition");
  EXPECT_THAT(text, HasSubstr("paddock_loads_total{cache=\"exhibition\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("paddock_hits_total{cache=\"exhibition\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("paddock_misses_total{cache=\"exhibition\"} 1\n"));
  EXPECT_THAT(
      text,
      HasSubstr("paddock_load_seconds_total{cache=\"exhibition\"} 0.25\n"));
  EXPECT_THAT(text, Not(HasSubstr("{cache=\"exhibition\"} -")));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace paddock
