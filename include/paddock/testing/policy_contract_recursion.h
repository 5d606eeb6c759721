// File: paddock/testing/policy_contract_recursion.h
// -----------------------------------------------------------------------------
// PolicyContract: a loader that looks keys up itself.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_RECURSION_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_RECURSION_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, RecursiveGetOnTheLoadersThreadFailsForItsOwnKey) {
  typename TestFixture::StringCache* self = nullptr;
  absl::Status own, mutual;
  absl::StatusOr<std::string> other;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "a") {
          own = this->Get(*self, "a").status();
          other = this->Get(*self, "b");  // Works; b's loader recurses into a.
        } else if (key == "b") {
          mutual = this->Get(*self, "a").status();
        }
        return absl::StrCat("value of ", key);
      },
      this->options_);
  self = &cache;
  EXPECT_EQ(*this->Get(cache, "a"), "value of a");
  EXPECT_EQ(own.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mutual.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*other, "value of b");
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  EXPECT_EQ(cache.stats().loads, 2u);
}

TYPED_TEST_P(PolicyContract, RecursiveGetFromARefreshGetsTheStoredValue) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  typename TestFixture::StringCache* self = nullptr;
  std::atomic<int> calls{0};
  std::optional<absl::StatusOr<std::string>> inner;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        const int call = ++calls;
        if (call == 1) {
          // The load duration the policy must see to refresh early (XFetch).
          this->clock_.Advance(TestFixture::Profile().refresh_load_duration);
        }
        if (call == 2) inner = this->Get(*self, key);  // The refresh.
        return absl::StrCat(key, "#", call);
      },
      this->options_);
  self = &cache;
  ASSERT_EQ(*this->Get(cache, "k"), "k#1");
  this->clock_.Advance(TestFixture::Profile().refresh_age);
  this->QueueRefresh(cache, "k", "k#1");
  EXPECT_EQ(this->executor_.RunAll(), 1u);
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(**inner, "k#1");  // Still servable: no wait, no deadlock.
  EXPECT_EQ(*this->Get(cache, "k"), "k#2");
}

// Recursion through another thread is not detectable; it is bounded by
// wait_timeout like any wait.
TYPED_TEST_P(PolicyContract,
             RecursiveGetThroughAnotherThreadIsBoundedByWaitTimeout) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  typename TestFixture::StringCache* self = nullptr;
  std::atomic<int> calls{0};
  std::optional<TimedResult> inner;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        const int call = ++calls;
        if (call == 1) {
          inner = std::async(std::launch::async, [&] {
                    return this->TimedGet(*self, key);
                  }).get();
        }
        return absl::StrCat(key, "#", call);
      },
      this->options_);
  self = &cache;
  EXPECT_EQ(*this->Get(cache, "k"), "k#1");
  ASSERT_TRUE(inner.has_value());
  EXPECT_LT(inner->took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(inner->value.status().code(),
              absl::StatusCode::kDeadlineExceeded);
  } else {
    EXPECT_EQ(*inner->value, "k#2");
  }
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_RECURSION_H_
