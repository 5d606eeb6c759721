// File: paddock/testing/policy_contract_lookups.h
// -----------------------------------------------------------------------------
// PolicyContract: hits, loads and writes.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_LOOKUPS_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_LOOKUPS_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, FreshValueIsServedWithoutCallingTheLoader) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads;
        return "value of " + key;
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "value of a");
  EXPECT_EQ(*this->Get(cache, "a"), "value of a");
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TYPED_TEST_P(PolicyContract, ExpiredValueIsLoadedAgain) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "1");
  // Past every policy's window (100 s; longer if the policy keeps values
  // longer).
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(100)));
  EXPECT_EQ(*this->Get(cache, "a"), "2");
}

// The ttl counts from the end of the load, not its start.
TYPED_TEST_P(PolicyContract, LifetimeStartsWhenTheLoadCompletes) {
  // A 5 s load, then 7 s: fresh counted from the end of the load (the
  // shortest freshness of the built-in policies is NaiveJitter's 8 s),
  // expired counted from its start (the longest is 12 s). Other policies:
  // half their shortest freshness, after a load long enough.
  const PolicyProfile& profile = this->Profile();
  const absl::Duration age = absl::Seconds(7) < profile.shortest_fresh
                                 ? absl::Seconds(7)
                                 : profile.shortest_fresh / 2;
  const absl::Duration load_time =
      std::max(absl::Seconds(5), profile.longest_fresh - age);
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        this->clock_.Advance(load_time);  // A slow load.
        return "v";
      },
      this->options_);
  ASSERT_TRUE(this->Get(cache, "a").ok());
  this->clock_.Advance(age);
  ASSERT_TRUE(this->Get(cache, "a").ok());
  EXPECT_EQ(loads, 1);
}

TYPED_TEST_P(PolicyContract, PutValueIsServedWithoutLoading) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        return "loaded";
      },
      this->options_);
  cache.Put("a", "put");
  EXPECT_EQ(*this->Get(cache, "a"), "put");
  EXPECT_EQ(cache.GetIfPresent("a"), "put");
  EXPECT_EQ(loads, 0);
}

TYPED_TEST_P(PolicyContract, InvalidateMakesTheNextGetLoad) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "1");
  cache.Invalidate("a");
  EXPECT_EQ(cache.GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(*this->Get(cache, "a"), "2");
  cache.InvalidateAll();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*this->Get(cache, "a"), "3");
}

TYPED_TEST_P(PolicyContract, SizeNeverExceedsMaxEntries) {
  this->options_.max_entries = 10;
  typename TestFixture::StringCache cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      this->options_);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(*this->Get(cache, absl::StrCat(i)), absl::StrCat(i));
    ASSERT_LE(cache.size(), 10u);
  }
  EXPECT_EQ(cache.stats().evictions, 990u);
}

TYPED_TEST_P(PolicyContract, OneThousandConcurrentCallersOfAColdKey) {
  constexpr int kCallers = 1000;
  std::atomic<int> loads{0};
  Gate gate;
  this->options_.wait_timeout = absl::Minutes(1);
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads;
        if (TypeParam::kCoalesceLoads) gate.Wait();
        return "value of " + key;
      },
      this->options_);
  std::vector<std::thread> threads;
  std::atomic<int> correct{0};
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&] {
      absl::StatusOr<std::string> v = this->Get(cache, "exhibition");
      if (v.ok() && *v == "value of exhibition") ++correct;
    });
  }
  if (TypeParam::kCoalesceLoads) {
    // Every caller but the leader is waiting on the leader's load.
    while (cache.stats().coalesced_waits < kCallers - 1) {
      std::this_thread::yield();
    }
    gate.Open();
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(correct, kCallers);
  if (TypeParam::kCoalesceLoads) {
    EXPECT_EQ(loads, 1);
    EXPECT_EQ(cache.loads_in_flight(), 0u);
  } else {
    EXPECT_GE(loads, 1);
  }
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_LOOKUPS_H_
