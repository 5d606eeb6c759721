// File: paddock/testing/policy_contract_faults.h
// -----------------------------------------------------------------------------
// PolicyContract: the loader returns an error, throws, or fails only
// sometimes.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_FAULTS_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_FAULTS_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, LoaderErrorReachesTheCallerAndNothingIsStored) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  EXPECT_EQ(this->Get(*cache, "k").status(),
            absl::UnavailableError("backend down: k"));
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->GetIfPresent("k"), std::nullopt);
  const Stats s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.load_failures, 1u);
  EXPECT_EQ(s.negative_hits, 0u);
  // Not remembered (error_ttl = 0): the next caller loads again.
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
}

TYPED_TEST_P(PolicyContract,
             LoaderErrorIsRememberedForErrorTtlThenLoadedAgain) {
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(this->Get(*cache, "k").status(),
              absl::UnavailableError("backend down: k"));
  }
  EXPECT_EQ(this->backend_.calls(), 1);
  EXPECT_EQ(cache->stats().negative_hits, 9u);
  EXPECT_EQ(cache->size(), 1u);  // The remembered error is an entry.
  this->backend_.set_fault(Fault::kNone);
  this->clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract,
             LoaderThrowingAStdExceptionBecomesInternalWithWhat) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kThrowStd);
  const absl::Status s = this->Get(*cache, "k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("disk on fire: k"));
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->stats().load_failures, 1u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
}

TYPED_TEST_P(PolicyContract, LoaderThrowingSomethingElseBecomesInternal) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kThrowOther);
  const absl::Status s = this->Get(*cache, "k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("not a std::exception"));
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->stats().load_failures, 1u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
}

// Every waiter of a failed load gets the same error; nobody hangs; the loader
// ran once.
TYPED_TEST_P(PolicyContract, LoaderFailureReachesEveryWaiterOfThatLoad) {
  if (!TestFixture::kCoalesces) GTEST_SKIP() << "no waiters: no coalescing";
  for (const Fault fault : {Fault::kError, Fault::kThrowStd}) {
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    backend.set_fault(Fault::kHang);
    auto leader = this->AsyncGet(*cache, "k");
    ASSERT_TRUE(backend.WaitUntilHung(1));
    std::vector<std::future<absl::StatusOr<std::string>>> waiters;
    for (int i = 0; i < 4; ++i) waiters.push_back(this->AsyncGet(*cache, "k"));
    while (cache->stats().coalesced_waits < 4) std::this_thread::yield();
    backend.set_resume_fault(fault);
    backend.Release();
    const absl::StatusOr<std::string> led = leader.get();
    EXPECT_EQ(led.status().code(), fault == Fault::kError
                                       ? absl::StatusCode::kUnavailable
                                       : absl::StatusCode::kInternal);
    for (auto& w : waiters) {
      const absl::StatusOr<std::string> got = w.get();
      EXPECT_EQ(got.status(), led.status());
    }
    EXPECT_EQ(backend.calls(), 1);
  }
}

TYPED_TEST_P(PolicyContract, FailedRefreshKeepsServingTheValueAndRetries) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  for (const Fault fault :
       {Fault::kError, Fault::kThrowStd, Fault::kThrowOther}) {
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    backend.set_fault(fault);
    EXPECT_EQ(this->executor_.RunAll(), 1u);
    EXPECT_EQ(cache->stats().load_failures, 1u);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
    // The value is kept and a later hit refreshes again.
    this->QueueRefresh(*cache, "k", "k#1");
    backend.set_fault(Fault::kNone);
    EXPECT_EQ(this->executor_.RunAll(), 1u);
    EXPECT_EQ(*this->Get(*cache, "k"), "k#3");
  }
}

// error_ttl throttles the retries of a failed refresh; it must not take away
// a value the policy still serves.
TYPED_TEST_P(PolicyContract, FailedRefreshWithErrorTtlKeepsServingTheValue) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  this->options_.error_ttl = absl::Seconds(1);
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  this->backend_.set_fault(Fault::kError);
  EXPECT_EQ(this->executor_.RunAll(), 1u);
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<std::string> v = this->Get(*cache, "k");
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, "k#1");
  }
  EXPECT_EQ(this->executor_.pending(), 0u);  // No retry within error_ttl.
}

TYPED_TEST_P(PolicyContract,
             FlappingLoaderServesEachGoodValueAndCachesNoError) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kFlap);
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    // Past every policy's window.
    this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(100)));
    EXPECT_EQ(this->Get(*cache, "k").status(),
              absl::UnavailableError("backend down: k"));
    const std::string good = absl::StrCat("k#", 2 * round + 2);
    EXPECT_EQ(*this->Get(*cache, "k"), good);
    EXPECT_EQ(*this->Get(*cache, "k"), good);  // A hit.
  }
  Stats s = cache->stats();
  EXPECT_EQ(s.loads, 2u * kRounds);
  EXPECT_EQ(s.load_failures, 1u * kRounds);
  EXPECT_EQ(s.hits, 1u * kRounds);
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract, RecoversAtOnceAfterALongFailureStreak) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(this->Get(*cache, "k").ok());
  EXPECT_EQ(cache->stats().load_failures, 1000u);
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1001");
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1001");
  EXPECT_EQ(cache->stats().hits, 1u);
}

TYPED_TEST_P(PolicyContract,
             LongFailureStreakWithErrorTtlLoadsOncePerErrorTtl) {
  this->options_.error_ttl = absl::Seconds(1);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  // 100 s of callers, ten a second.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_FALSE(this->Get(*cache, "k").ok());
    this->clock_.Advance(absl::Milliseconds(100));
  }
  EXPECT_EQ(this->backend_.calls(), 100);
  EXPECT_EQ(cache->stats().negative_hits, 900u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#101");  // error_until has just passed.
  EXPECT_EQ(*this->Get(*cache, "k"), "k#101");
  EXPECT_EQ(cache->size(), 1u);
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_FAULTS_H_
