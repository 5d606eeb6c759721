// File: paddock/testing/policy_contract_keys.h
// -----------------------------------------------------------------------------
// PolicyContract: keys and hashes.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_KEYS_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_KEYS_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

TYPED_TEST_P(PolicyContract, HugeKeysAreStoredFoundAndDetectedIntact) {
  const std::string big(8 << 20, 'x');
  const std::string a = big + "a", b = big + "b";  // Differ in the last byte.
  typename TestFixture::StringCache* self = nullptr;
  absl::Status recursive;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == a) recursive = this->Get(*self, a).status();
        return absl::StrCat(key.size(), ":", key.substr(key.size() - 1));
      },
      this->options_);
  self = &cache;
  const std::string size = absl::StrCat(big.size() + 1);
  EXPECT_EQ(*this->Get(cache, a), size + ":a");
  EXPECT_EQ(recursive.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*this->Get(cache, b), size + ":b");
  EXPECT_EQ(*this->Get(cache, a), size + ":a");
  EXPECT_EQ(cache.stats().loads, 2u);
  cache.Put(b, "put");
  EXPECT_EQ(cache.GetIfPresent(b), "put");
  cache.Invalidate(a);
  EXPECT_EQ(cache.GetIfPresent(a), std::nullopt);
  EXPECT_EQ(cache.size(), 1u);
}

// The cache hashes a key once per hit and a bounded number of times per miss,
// however many entries there are.
TYPED_TEST_P(PolicyContract, ExpensiveHashIsComputedOnceOnAHit) {
  Cache<SlowKey, std::string, TypeParam, SlowKeyHash> cache(
      [](const SlowKey& key) -> absl::StatusOr<std::string> {
        return key.name;
      },
      this->options_);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(*this->Get(cache, SlowKey{absl::StrCat(i)}), absl::StrCat(i));
  }
  slow_hashes = 0;
  EXPECT_EQ(*this->Get(cache, SlowKey{"7"}), "7");
  EXPECT_EQ(slow_hashes, 1);
  slow_hashes = 0;
  EXPECT_EQ(*this->Get(cache, SlowKey{"miss"}), "miss");
  EXPECT_LE(slow_hashes, 4);  // The entry and the in-flight map.
}

// Every key collides: lookups must still compare keys.
TYPED_TEST_P(PolicyContract, CollidingHashesKeepKeysApart) {
  this->options_.max_entries = 64;
  this->options_.shards = 1;
  Cache<std::string, std::string, TypeParam, ConstantHash> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        return "value of " + key;
      },
      this->options_);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 200; ++i) {
      const std::string key = absl::StrCat(i);
      ASSERT_EQ(*this->Get(cache, key), "value of " + key);
      ASSERT_LE(cache.size(), 64u);
    }
  }
  cache.Invalidate("199");
  EXPECT_EQ(cache.GetIfPresent("199"), std::nullopt);
  EXPECT_EQ(cache.GetIfPresent("198"), "value of 198");
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_KEYS_H_
