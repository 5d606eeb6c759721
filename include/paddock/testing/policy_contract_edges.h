// File: paddock/testing/policy_contract_edges.h
// -----------------------------------------------------------------------------
// PolicyContract: options at their edges.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_EDGES_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_EDGES_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, MaxEntriesOfOneHoldsOnlyTheLatestEntry) {
  this->options_.max_entries = 1;
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "a"), "a#1");
  EXPECT_EQ(*this->Get(*cache, "b"), "b#2");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(cache->GetIfPresent("b"), "b#2");
  cache->Put("c", "put");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), "put");
  this->backend_.set_fault(Fault::kError);
  EXPECT_FALSE(this->Get(*cache, "d").ok());  // A remembered error is an entry.
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), std::nullopt);
  EXPECT_EQ(cache->stats().evictions, 3u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "c"), "c#4");
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract, TtlOfOneNanosecondReloadsAfterEveryTick) {
  this->options_.ttl = absl::Nanoseconds(1);
  // Whether the policy serves a 1 ns old value while refreshing it (SoftTtl),
  // or loads it anew (the others).
  const double stale_then_refreshed = TestFixture::RefreshChance(
      absl::Nanoseconds(1), absl::ZeroDuration(), absl::Nanoseconds(1));
  if (stale_then_refreshed != 0.0 && stale_then_refreshed != 1.0) {
    GTEST_SKIP() << "the policy refreshes a 1 ns old value only sometimes";
  }
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  for (int tick = 1; tick <= 100; ++tick) {
    this->clock_.Advance(absl::Nanoseconds(1));
    absl::StatusOr<std::string> v = this->Get(*cache, "k");
    ASSERT_TRUE(v.ok()) << v.status();
    if (stale_then_refreshed == 1.0) {
      EXPECT_EQ(*v, absl::StrCat("k#", tick));  // Stale; refresh queued.
      EXPECT_EQ(this->executor_.RunAll(), 1u);
    } else {
      EXPECT_EQ(*v, absl::StrCat("k#", tick + 1));
    }
  }
  EXPECT_EQ(this->backend_.calls(), 101);
  EXPECT_LE(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract, InfiniteTtlNeverExpires) {
  this->options_.ttl = absl::InfiniteDuration();
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  this->clock_.Advance(absl::Hours(24 * 365 * 100));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  EXPECT_EQ(this->executor_.pending(), 0u);
}

TYPED_TEST_P(PolicyContract, WaitTimeoutZeroAnswersAtOnceWhileALoadRuns) {
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = this->TimedGet(*cache, "k");
  EXPECT_LT(r.took, kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(r.value.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(cache->stats().wait_timeouts, 1u);
  } else {
    EXPECT_EQ(*r.value, "k#2");
  }
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
}

TYPED_TEST_P(PolicyContract, WaitTimeoutZeroWithoutAFreeLoadSlotAnswersAtOnce) {
  this->options_.wait_timeout = absl::ZeroDuration();
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = this->TimedGet(*cache, "b");
  EXPECT_LT(r.took, kMargin);
  EXPECT_EQ(r.value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache->loads_in_flight(), TestFixture::kCoalesces ? 1u : 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
  EXPECT_EQ(*this->Get(*cache, "b"), "b#2");
}

// A wait_timeout far beyond any deadline (a thousand years) means "wait for
// the load", not "time out at once" through an overflow of now + timeout.
TYPED_TEST_P(PolicyContract, HugeWaitTimeoutWaitsForTheLoad) {
  this->options_.wait_timeout = absl::Hours(24 * 365 * 1000);
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  // Waits for the load (coalescing) or for the load slot (every policy).
  auto same_key = this->AsyncGet(*cache, "k");
  auto other_key = this->AsyncGet(*cache, "other");
  EXPECT_EQ(same_key.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  EXPECT_EQ(other_key.wait_for(std::chrono::milliseconds(1)),
            std::future_status::timeout);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
  const absl::StatusOr<std::string> same = same_key.get();
  const absl::StatusOr<std::string> other = other_key.get();
  ASSERT_TRUE(same.ok()) << same.status();
  ASSERT_TRUE(other.ok()) << other.status();
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(*same, "k#1");
  }
  EXPECT_THAT(*other, ::testing::HasSubstr("other#"));
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_EDGES_H_
