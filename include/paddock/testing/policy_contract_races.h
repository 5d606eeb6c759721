// File: paddock/testing/policy_contract_races.h
// -----------------------------------------------------------------------------
// PolicyContract: Invalidate, Put and InvalidateAll racing with a load and
// with a refresh.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_RACES_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_RACES_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, WriteDuringAForegroundLoadWinsOverItsResult) {
  this->options_.wait_timeout = absl::Minutes(1);
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    backend.set_fault(Fault::kHang);
    auto leader = this->AsyncGet(*cache, "k");
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    std::optional<std::future<absl::StatusOr<std::string>>> waiter;
    if constexpr (TestFixture::kCoalesces) {
      waiter = this->AsyncGet(*cache, "k");
      while (cache->stats().coalesced_waits < 1) std::this_thread::yield();
    }
    Apply(write, *cache, "k");
    // A caller after the write does not join the superseded load.
    const std::string after = write == Write::kPut ? "put" : "k#2";
    EXPECT_EQ(*this->Get(*cache, "k"), after);
    backend.Release();
    EXPECT_EQ(*leader.get(), "k#1");  // Its callers still get its result ...
    if (waiter.has_value()) {
      EXPECT_EQ(*waiter->get(), "k#1");
    }
    EXPECT_EQ(cache->GetIfPresent("k"), after);  // ... but it did not store.
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

TYPED_TEST_P(PolicyContract, WriteWhileARefreshIsQueuedWinsOverItsResult) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    Apply(write, *cache, "k");
    EXPECT_EQ(this->executor_.RunAll(), 1u);
    EXPECT_EQ(backend.calls(), 2);       // The refresh still ran ...
    EXPECT_EQ(cache->GetIfPresent("k"),  // ... but did not store.
              write == Write::kPut ? std::optional<std::string>("put")
                                   : std::nullopt);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

TYPED_TEST_P(PolicyContract, WriteWhileARefreshRunsWinsOverItsResult) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    backend.set_fault(Fault::kHang);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    Apply(write, *cache, "k");
    const std::string after = write == Write::kPut ? "put" : "k#3";
    EXPECT_EQ(*this->Get(*cache, "k"), after);
    backend.Release();
    refresh.join();
    EXPECT_EQ(cache->GetIfPresent("k"), after);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_RACES_H_
