// File: paddock/testing/policy_contract_slow_loads.h
// -----------------------------------------------------------------------------
// PolicyContract: the loader is slow, or never returns until the test releases
// it.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_SLOW_LOADS_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_SLOW_LOADS_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, SlowLoadTimesOutItsWaitersAndStillStores) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto leader = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = this->TimedGet(*cache, "k");
  EXPECT_LT(waiter.took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(waiter.value.status().code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_GE(waiter.took, this->options_.wait_timeout);
    const Stats s = cache->stats();
    EXPECT_EQ(s.coalesced_waits, 1u);
    EXPECT_EQ(s.wait_timeouts, 1u);
    EXPECT_EQ(s.loads, 1u);
  } else {
    EXPECT_EQ(*waiter.value, "k#2");  // Its own load.
  }
  this->backend_.Release();
  EXPECT_EQ(*leader.get(), "k#1");
  // Without coalescing: the last load to finish stores.
  EXPECT_EQ(cache->GetIfPresent("k"), "k#1");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
}

TYPED_TEST_P(PolicyContract, SlowLoadOfAnExpiredValueServesItStaleMeanwhile) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  // Expired: 13 s (NaiveJitter's longest ttl is 12 s), or a second past the
  // policy's longest freshness. Kept as a fallback by SingleFlight and XFetch
  // (2·ttl); served stale while refreshed by SoftTtl.
  const absl::Duration age =
      std::max(absl::Seconds(13),
               TestFixture::Profile().longest_fresh + absl::Seconds(1));
  this->clock_.Advance(age);
  this->backend_.set_fault(Fault::kHang);
  if (TestFixture::RefreshChance(TestFixture::kTtl, absl::ZeroDuration(),
                                 age) == 1.0) {
    // Nobody waits: the stale value at once, the slow load in the background.
    const TimedResult hit = this->TimedGet(*cache, "k");
    EXPECT_EQ(*hit.value, "k#1");
    EXPECT_LT(hit.took, kMargin);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(this->backend_.WaitUntilHung(1));
    EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
    EXPECT_EQ(cache->stats().wait_timeouts, 0u);
    this->backend_.Release();
    refresh.join();
    EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
    return;
  }
  auto leader = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = this->TimedGet(*cache, "k");
  EXPECT_LT(waiter.took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    if (age < TestFixture::Profile().shortest_kept) {
      EXPECT_EQ(*waiter.value, "k#1");  // Stale, at wait_timeout.
      EXPECT_EQ(cache->stats().stale_fallbacks, 1u);
    } else {
      // A policy that keeps nothing past freshness has no stale value to give.
      EXPECT_EQ(waiter.value.status().code(),
                absl::StatusCode::kDeadlineExceeded);
      EXPECT_EQ(cache->stats().stale_fallbacks, 0u);
    }
    EXPECT_EQ(cache->stats().wait_timeouts, 1u);
  } else {
    EXPECT_EQ(*waiter.value, "k#3");  // Its own load.
  }
  this->backend_.Release();
  EXPECT_EQ(*leader.get(), "k#2");
}

// The bound on a hung load (Options::max_load_age, like nginx's
// proxy_cache_lock_age): once the load is older, the next caller that needs
// the key starts a fresh load; the hung one, when it returns, answers only
// its own callers and stores nothing.
TYPED_TEST_P(PolicyContract, HungLoadStopsBlockingItsKeyAfterMaxLoadAge) {
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  absl::StatusOr<std::string> second = this->Get(*cache, "k");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
  } else {
    EXPECT_EQ(*second, "k#2");  // No coalescing: nothing to be blocked on.
  }
  this->clock_.Advance(absl::Seconds(29));
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(this->Get(*cache, "k").status().code(),
              absl::StatusCode::kDeadlineExceeded);  // Still within the bound.
    EXPECT_EQ(cache->loads_in_flight(), 1u);
  }
  this->clock_.Advance(absl::Seconds(2));  // 31 s: past max_load_age.
  const std::string fresh = absl::StrCat("k#", TestFixture::kCoalesces ? 2 : 3);
  EXPECT_EQ(*this->Get(*cache, "k"), fresh);
  EXPECT_EQ(*this->Get(*cache, "k"), fresh);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(cache->GetIfPresent("k"), fresh);
  }
}

TYPED_TEST_P(PolicyContract, HungRefreshStopsBlockingItsKeyAfterMaxLoadAge) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Seconds(20);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  this->backend_.set_fault(Fault::kHang);
  std::thread refresh([&] { this->executor_.RunOne(); });
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");  // Served while the refresh hangs.
  // Past the policy's window and past max_load_age: a foreground load.
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(45)));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#3");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  refresh.join();
  EXPECT_EQ(cache->GetIfPresent("k"), "k#3");  // The hung one did not store.
}

// With a load limit, a hung load holds a slot. It must not hold it past
// max_load_age, or one hung loader makes every key unusable for good.
TYPED_TEST_P(PolicyContract,
             HungLoadHoldingTheOnlyLoadSlotDoesNotWedgeTheCache) {
  this->options_.max_concurrent_loads = 1;
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(this->Get(*cache, "b").status().code(),
            absl::StatusCode::kDeadlineExceeded);  // Within the bound.
  this->clock_.Advance(absl::Seconds(31));
  const absl::StatusOr<std::string> b = this->Get(*cache, "b");
  EXPECT_TRUE(b.ok()) << b.status();
  const absl::StatusOr<std::string> a = this->Get(*cache, "a");
  EXPECT_TRUE(a.ok()) << a.status();
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_SLOW_LOADS_H_
