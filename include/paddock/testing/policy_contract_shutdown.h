// File: paddock/testing/policy_contract_shutdown.h
// -----------------------------------------------------------------------------
// PolicyContract: destroying the cache, or the executor, with background work
// pending.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_SHUTDOWN_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_SHUTDOWN_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract,
             DestroyingTheCacheDropsRefreshesQueuedOnAnExecutor) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  {
    auto cache = this->MakeCache();
    this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  }
  EXPECT_EQ(this->executor_.RunAll(), 1u);  // Runs, skips the dead cache.
  EXPECT_EQ(this->backend_.calls(), 1);
}

TYPED_TEST_P(PolicyContract,
             DestroyingTheCacheDropsRefreshesQueuedOnAThreadPool) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  Gate unblock_pool;
  Counter pool_blocked;
  std::promise<void> drained;
  ThreadPool pool(1);  // Declared last: joined before what its tasks use.
  pool.Schedule([&] {
    pool_blocked.Increment();
    unblock_pool.Wait();
  });
  ASSERT_TRUE(pool_blocked.WaitFor(1));
  this->options_.executor = &pool;
  this->GiveLoadsADuration(this->backend_);
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  this->clock_.Advance(TestFixture::Profile().refresh_age);
  for (int i = 0; i < 100 && cache->stats().refreshes == 0; ++i) {
    ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  }
  ASSERT_EQ(cache->stats().refreshes, 1u);  // Queued behind the blocker.
  // The destructor does not wait for queued work.
  auto destroyed = std::async(std::launch::async, [&] { cache.reset(); });
  ASSERT_EQ(destroyed.wait_for(kNoHang), std::future_status::ready);
  // The pool then runs the orphaned refresh; it must not call the loader.
  unblock_pool.Open();
  pool.Schedule([&] { drained.set_value(); });
  ASSERT_EQ(drained.get_future().wait_for(kNoHang), std::future_status::ready);
  EXPECT_EQ(this->backend_.calls(), 1);
}

TYPED_TEST_P(PolicyContract, DestroyingTheCacheWaitsForARunningRefresh) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  ThreadPool pool(1);
  this->options_.executor = &pool;
  this->GiveLoadsADuration(this->backend_);
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  this->backend_.set_load_time(absl::ZeroDuration());
  this->clock_.Advance(TestFixture::Profile().refresh_age);
  this->backend_.set_fault(Fault::kHang);
  for (int i = 0; i < 100 && cache->stats().refreshes == 0; ++i) {
    ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  }
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));  // Running on the pool.
  auto destroyed = std::async(std::launch::async, [&] { cache.reset(); });
  // Not a timing assertion: it can only pass wrongly, never fail wrongly.
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  this->backend_.Release();
  ASSERT_EQ(destroyed.wait_for(kNoHang), std::future_status::ready);
  EXPECT_EQ(this->backend_.calls(), 2);
}

// An executor that drops a queued refresh (here: destroyed with it) ends that
// load: its waiters get CancelledError and the key loads normally next time.
TYPED_TEST_P(PolicyContract, DroppedRefreshEndsItsLoadWithCancelled) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Hours(1);
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  EXPECT_EQ(cache->loads_in_flight(), 1u);
  EXPECT_EQ(this->executor_.DropAll(), 1u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  // Past what the policy serves: the next caller loads at once.
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(35)));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
  EXPECT_EQ(cache->stats().loads, 2u);  // The dropped refresh never loaded.
}

TYPED_TEST_P(PolicyContract, CallerNeedingAValueRunsTheRefreshQueuedForIt) {
  // The executor may be busy with this very caller (a refresh whose loader
  // calls Get, on a one-thread pool): a caller never waits for a task that
  // has not started.
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Hours(1);
  this->options_.wait_timeout = absl::Minutes(1);
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  // Past what the policy serves.
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(35)));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");  // Loaded on this thread.
  EXPECT_EQ(cache->stats().coalesced_waits, 0u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  EXPECT_EQ(this->executor_.RunAll(), 1u);  // The task finds it done.
  EXPECT_EQ(cache->stats().loads, 2u);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_SHUTDOWN_H_
