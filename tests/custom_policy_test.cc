// Tests of RefreshAhead, the user-written policy of examples/custom_policy.cpp.

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "../examples/refresh_ahead_policy.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace {

using ::paddock::Decision;
using ::paddock::EntryState;
using ::paddock_examples::RefreshAhead;

static_assert(paddock::RefreshPolicy<RefreshAhead>);

constexpr absl::Duration kTtl = absl::Seconds(1);

// The decision for a value loaded at the epoch with `kTtl`, `age` later.
Decision DecideAt(const RefreshAhead& policy, absl::Duration age,
                  bool refresh_in_flight = false) {
  paddock::Random rng(1);
  const absl::Time loaded_at = absl::UnixEpoch();
  const EntryState state{loaded_at, loaded_at + kTtl, absl::Milliseconds(40),
                         refresh_in_flight};
  return policy.Decide(state, loaded_at + age, rng);
}

TEST(RefreshAheadPolicyTest, OnStoreKeepsHitsOnTheFastPathUntilTheFraction) {
  paddock::Random rng(1);
  const paddock::Lifetime life = RefreshAhead{.refresh_at = 0.75}.OnStore(
      kTtl, absl::Milliseconds(40), rng);
  EXPECT_EQ(life.expires_after, kTtl);
  EXPECT_EQ(life.quiet_for, absl::Milliseconds(750));
  EXPECT_EQ(life.keep_for, kTtl);
  EXPECT_LE(life.serve_on_error_for, life.keep_for);
  EXPECT_EQ(rng.draws(), 0u) << "RefreshAhead uses no randomness";
}

TEST(RefreshAheadPolicyTest, DecidesServeThenServeAndRefreshThenLoad) {
  const RefreshAhead policy{.refresh_at = 0.75};
  EXPECT_EQ(DecideAt(policy, absl::Milliseconds(100)), Decision::kServe);
  EXPECT_EQ(DecideAt(policy, absl::Milliseconds(749)), Decision::kServe);
  EXPECT_EQ(DecideAt(policy, absl::Milliseconds(750)),
            Decision::kServeAndRefresh);
  EXPECT_EQ(DecideAt(policy, absl::Milliseconds(999)),
            Decision::kServeAndRefresh);
  EXPECT_EQ(DecideAt(policy, kTtl), Decision::kLoad);
  EXPECT_EQ(DecideAt(policy, absl::Seconds(5)), Decision::kLoad);
}

TEST(RefreshAheadPolicyTest, ServesWithoutAnotherRefreshWhileOneIsInFlight) {
  const RefreshAhead policy{.refresh_at = 0.75};
  EXPECT_EQ(
      DecideAt(policy, absl::Milliseconds(800), /*refresh_in_flight=*/true),
      Decision::kServe);
  EXPECT_EQ(DecideAt(policy, kTtl, /*refresh_in_flight=*/true),
            Decision::kLoad);
}

TEST(RefreshAheadPolicyTest, AFractionOfOneNeverRefreshesAhead) {
  const RefreshAhead policy{.refresh_at = 1.0};
  EXPECT_EQ(DecideAt(policy, absl::Milliseconds(999)), Decision::kServe);
  EXPECT_EQ(DecideAt(policy, kTtl), Decision::kLoad);
}

TEST(RefreshAheadPolicyTest, ValidateAcceptsOnlyFractionsInZeroToOne) {
  EXPECT_TRUE(RefreshAhead{.refresh_at = 0.5}.Validate().ok());
  EXPECT_TRUE(RefreshAhead{.refresh_at = 1.0}.Validate().ok());
  for (const double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    const absl::Status s = RefreshAhead{.refresh_at = bad}.Validate();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("refresh_at"), std::string::npos) << s;
  }
}

// A RefreshAhead cache on a ManualClock whose refreshes wait in a
// ManualExecutor. The loader returns its call number.
class RefreshAheadCacheTest : public ::testing::Test {
 protected:
  paddock::ManualClock clock_;
  paddock::ManualExecutor executor_;
  int calls_ = 0;
  paddock::Cache<std::string, int, RefreshAhead> cache_{
      [this](const std::string&) -> absl::StatusOr<int> { return ++calls_; },
      paddock::Options{
          .ttl = kTtl, .clock = &clock_, .executor = &executor_, .seed = 1},
      RefreshAhead{.refresh_at = 0.75}};
};

TEST_F(RefreshAheadCacheTest, FreshHitsDoNotRefresh) {
  ASSERT_EQ(cache_.Get("k").value(), 1);
  for (int ms = 0; ms < 700; ms += 50) {
    EXPECT_EQ(cache_.Get("k").value(), 1) << ms << " ms";
    clock_.Advance(absl::Milliseconds(50));
  }
  // Just before the fraction.
  clock_.Set(absl::UnixEpoch() + absl::Milliseconds(749));
  EXPECT_EQ(cache_.Get("k").value(), 1);
  EXPECT_EQ(executor_.pending(), 0u);
  EXPECT_EQ(calls_, 1);
  EXPECT_EQ(cache_.stats().refreshes, 0u);
  EXPECT_EQ(cache_.stats().misses, 1u);
}

TEST_F(RefreshAheadCacheTest, AfterTheFractionOneRefreshIsQueued) {
  ASSERT_EQ(cache_.Get("k").value(), 1);
  clock_.Advance(absl::Milliseconds(750));
  // Served the current value at once; the refresh waits in the executor.
  EXPECT_EQ(cache_.Get("k").value(), 1);
  EXPECT_EQ(executor_.pending(), 1u);
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_EQ(cache_.Get("k").value(), 1);
  EXPECT_EQ(cache_.Get("k").value(), 1);
  EXPECT_EQ(executor_.pending(), 1u) << "one refresh per key";
  EXPECT_EQ(calls_, 1);
  const paddock::Stats stats = cache_.stats();
  EXPECT_EQ(stats.refreshes, 1u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.stale_hits, 0u) << "the value is still fresh";
}

TEST_F(RefreshAheadCacheTest, RunningTheRefreshInstallsTheNewValue) {
  ASSERT_EQ(cache_.Get("k").value(), 1);
  clock_.Advance(absl::Milliseconds(800));
  EXPECT_EQ(cache_.Get("k").value(), 1);
  ASSERT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(calls_, 2);
  EXPECT_EQ(cache_.Get("k").value(), 2);
  EXPECT_EQ(cache_.GetIfPresent("k"), 2);

  // The new value has a schedule of its own: fresh from the refresh on, next
  // refreshed 750 ms after it.
  clock_.Advance(absl::Milliseconds(700));  // Past the first value's ttl.
  EXPECT_EQ(cache_.Get("k").value(), 2);
  EXPECT_EQ(executor_.pending(), 0u);
  clock_.Advance(absl::Milliseconds(50));
  EXPECT_EQ(cache_.Get("k").value(), 2);
  EXPECT_EQ(executor_.pending(), 1u);
  executor_.RunAll();
  EXPECT_EQ(cache_.Get("k").value(), 3);

  const paddock::Stats stats = cache_.stats();
  EXPECT_EQ(stats.loads, 3u);
  EXPECT_EQ(stats.refreshes, 2u);
  EXPECT_EQ(stats.misses, 1u) << "no caller waited after the first load";
}

TEST_F(RefreshAheadCacheTest, AValueNotRefreshedInTimeIsLoadedOnExpiry) {
  ASSERT_EQ(cache_.Get("k").value(), 1);
  clock_.Advance(kTtl);
  EXPECT_EQ(cache_.GetIfPresent("k"), std::nullopt)
      << "never served past its ttl";
  EXPECT_EQ(cache_.Get("k").value(), 2);
  EXPECT_EQ(executor_.pending(), 0u);
  EXPECT_EQ(cache_.stats().misses, 2u);
  EXPECT_EQ(cache_.stats().refreshes, 0u);
}

TEST(RefreshAheadCacheConstructionTest, RejectsAnInvalidFraction) {
  auto make = [] {
    paddock::Cache<int, int, RefreshAhead> cache(
        [](const int& k) -> absl::StatusOr<int> { return k; },
        paddock::Options{}, RefreshAhead{.refresh_at = 2.0});
  };
  EXPECT_THROW(make(), std::invalid_argument);
}

}  // namespace
