// A cache given its own `Hash` and `Eq` objects (the constructors that take
// them): it calls those, not default-made ones, wherever it hashes or
// compares keys: the lock-free table, the loads in flight (inline and
// spilled), the loader's own key, and `hash_function()` / `key_eq()`. They
// need not be default-constructible.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "built_in_policies.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock {
namespace {

std::string Folded(const std::string& key, bool fold) {
  std::string out = key;
  if (fold) {
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
      return static_cast<char>(std::tolower(c));
    });
  }
  return out;
}

// Hashes and compares keys with or without case, as told at construction;
// counts its calls. No default constructor: a cache must be given one.
struct CaseHash {
  CaseHash(bool fold, std::atomic<int>* calls) : fold(fold), calls(calls) {}
  size_t operator()(const std::string& key) const {
    ++*calls;
    return absl::Hash<std::string>()(Folded(key, fold));
  }
  bool fold;
  std::atomic<int>* calls;
};
struct CaseEq {
  CaseEq(bool fold, std::atomic<int>* calls) : fold(fold), calls(calls) {}
  bool operator()(const std::string& a, const std::string& b) const {
    ++*calls;
    return Folded(a, fold) == Folded(b, fold);
  }
  bool fold;
  std::atomic<int>* calls;
};
static_assert(!std::default_initializable<CaseHash>);
static_assert(!std::default_initializable<CaseEq>);

template <typename P>
using CaseCache = Cache<std::string, std::string, P, CaseHash, CaseEq>;

template <typename P>
class KeyFunctionsTest : public ::testing::Test {
 protected:
  CaseCache<P> MakeCache(bool fold, Options options = {}) {
    options.clock = &clock_;
    options.executor = &executor_;
    return CaseCache<P>(
        [this](const std::string& key) -> absl::StatusOr<std::string> {
          return absl::StrCat(key, "#", ++loads_);
        },
        options, P(), CaseHash(fold, &hash_calls_), CaseEq(fold, &eq_calls_));
  }

  ManualClock clock_;
  ManualExecutor executor_;
  std::atomic<int> loads_{0};
  std::atomic<int> hash_calls_{0};
  std::atomic<int> eq_calls_{0};
};

using Policies = testing::BuiltInPolicies;
TYPED_TEST_SUITE(KeyFunctionsTest, Policies);

TYPED_TEST(KeyFunctionsTest, TheCacheCallsTheObjectsItWasGiven) {
  CaseCache<TypeParam> cache = this->MakeCache(/*fold=*/true);
  EXPECT_EQ(*cache.Get("Key"), "Key#1");
  EXPECT_GT(this->hash_calls_.load(), 0);
  const int eq_calls = this->eq_calls_.load();
  EXPECT_EQ(*cache.Get("Key"), "Key#1");  // A hit compares the keys.
  EXPECT_GT(this->eq_calls_.load(), eq_calls);
  EXPECT_TRUE(cache.hash_function().fold);
  EXPECT_EQ(cache.hash_function().calls, &this->hash_calls_);
  EXPECT_TRUE(cache.key_eq().fold);
  EXPECT_EQ(cache.key_eq().calls, &this->eq_calls_);
}

TYPED_TEST(KeyFunctionsTest, KeysTheGivenEqFindsEqualAreOneEntry) {
  CaseCache<TypeParam> folding = this->MakeCache(/*fold=*/true);
  EXPECT_EQ(*folding.Get("Key"), "Key#1");
  EXPECT_EQ(*folding.Get("KEY"), "Key#1");
  EXPECT_EQ(folding.GetIfPresent("key"), "Key#1");
  folding.Put("kEy", "put");
  EXPECT_EQ(*folding.Get("Key"), "put");
  folding.Invalidate("KEY");
  EXPECT_EQ(folding.GetIfPresent("Key"), std::nullopt);
  EXPECT_EQ(folding.size(), 0u);

  // The same types, told otherwise: three keys.
  CaseCache<TypeParam> exact = this->MakeCache(/*fold=*/false);
  EXPECT_EQ(*exact.Get("Key"), "Key#2");
  EXPECT_EQ(*exact.Get("KEY"), "KEY#3");
  EXPECT_EQ(exact.GetIfPresent("key"), std::nullopt);
  EXPECT_EQ(exact.size(), 2u);
}

// What only a coalescing policy does: one load per key at a time.
template <typename P>
using KeyFunctionsCoalescingTest = KeyFunctionsTest<P>;
using testing::CoalescingPolicies;
TYPED_TEST_SUITE(KeyFunctionsCoalescingTest, CoalescingPolicies);

TYPED_TEST(KeyFunctionsCoalescingTest,
           ALoaderAskingForItsOwnKeyIsToldSoByTheGivenEq) {
  static_assert(TypeParam::kCoalesceLoads);
  absl::StatusOr<std::string> inner;
  CaseCache<TypeParam>* self = nullptr;
  CaseCache<TypeParam> cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "Key") inner = self->Get("KEY");
        return key;
      },
      Options{.clock = &this->clock_, .executor = &this->executor_},
      TypeParam(), CaseHash(true, &this->hash_calls_),
      CaseEq(true, &this->eq_calls_));
  self = &cache;
  EXPECT_EQ(*cache.Get("Key"), "Key");
  EXPECT_EQ(inner.status().code(), absl::StatusCode::kFailedPrecondition)
      << inner.status();
}

// Six keys in flight in one shard: past the four registrations kept
// inline, so the spilled ones are compared by the given Eq too.
TYPED_TEST(KeyFunctionsCoalescingTest,
           CallersOfKeysTheGivenEqFindsEqualShareOneLoad) {
  static_assert(TypeParam::kCoalesceLoads);
  CaseCache<TypeParam> cache =
      this->MakeCache(/*fold=*/true, Options{.shards = 1});
  constexpr int kKeys = 6;
  std::vector<absl::StatusOr<std::string>> lower(kKeys);
  std::vector<absl::StatusOr<std::string>> upper(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    cache.GetAsync(absl::StrCat("key", i),
                   [&lower, i](absl::StatusOr<std::string> v) {
                     lower[i] = std::move(v);
                   });
  }
  for (int i = 0; i < kKeys; ++i) {
    cache.GetAsync(absl::StrCat("KEY", i),
                   [&upper, i](absl::StatusOr<std::string> v) {
                     upper[i] = std::move(v);
                   });
  }
  EXPECT_EQ(cache.loads_in_flight(), static_cast<size_t>(kKeys));
  EXPECT_EQ(this->executor_.RunAll(), static_cast<size_t>(kKeys));
  EXPECT_EQ(this->loads_.load(), kKeys);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(lower[i].ok()) << lower[i].status();
    ASSERT_TRUE(upper[i].ok()) << upper[i].status();
    EXPECT_EQ(*upper[i], *lower[i]);
    EXPECT_TRUE(lower[i]->starts_with(absl::StrCat("key", i, "#")));
  }
}

TEST(KeyFunctionsAsyncLoaderTest, AnAsyncLoaderCacheTakesTheObjectsToo) {
  std::atomic<int> hash_calls{0}, eq_calls{0};
  CaseCache<SingleFlight> cache(
      CaseCache<SingleFlight>::AsyncLoader(
          [](const std::string& key, Completion<std::string> done) {
            std::move(done)(key);
          }),
      Options{}, SingleFlight(), CaseHash(true, &hash_calls),
      CaseEq(true, &eq_calls));
  EXPECT_EQ(*cache.Get("Key"), "Key");
  EXPECT_EQ(*cache.Get("KEY"), "Key");
  EXPECT_GT(hash_calls.load(), 0);
  EXPECT_GT(eq_calls.load(), 0);
}

// A default-constructible pair still may be given, and the default one is
// what the cache uses otherwise.
TEST(KeyFunctionsDefaultTest, TheDefaultsAreDefaultMade) {
  Cache<int, int> cache([](int k) -> absl::StatusOr<int> { return k; });
  EXPECT_EQ(cache.hash_function()(7), KeyHash<int>()(7));
  EXPECT_TRUE(cache.key_eq()(7, 7));
  Cache<int, int> given([](int k) -> absl::StatusOr<int> { return k; },
                        Options{}, SoftTtl(), KeyHash<int>(), KeyEq<int>());
  EXPECT_EQ(*given.Get(3), 3);
}

}  // namespace
}  // namespace paddock
