// Heterogeneous lookup: `Get`, `GetAsync`, `Await`, `GetIfPresent`, `Put`
// and `Invalidate` with a key of another type than K, for a transparent
// Hash and Eq. What they share with the K overloads is tested in
// lookup_api_test.cc; here, what is particular to them: a hit makes no K,
// anything else makes one, and which key types are accepted at all.

#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "built_in_policies.h"
#include "eager_coroutine.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/key_hash.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock {
namespace {

// A key that counts how often one is made (constructed or copied).
struct CountedKey {
  explicit CountedKey(std::string_view t) : text(t) { ++made; }
  CountedKey(const CountedKey& other) : text(other.text) { ++made; }
  CountedKey& operator=(const CountedKey& other) {
    text = other.text;
    ++made;
    return *this;
  }
  ~CountedKey() = default;

  std::string text;
  static std::atomic<int> made;
};
std::atomic<int> CountedKey::made{0};

struct CountedHash {
  using is_transparent = void;
  size_t operator()(std::string_view key) const {
    return absl::Hash<std::string_view>()(key);
  }
  size_t operator()(const CountedKey& key) const { return (*this)(key.text); }
};

struct CountedEq {
  using is_transparent = void;
  static std::string_view View(std::string_view key) { return key; }
  static std::string_view View(const CountedKey& key) { return key.text; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return View(a) == View(b);
  }
};

template <typename C>
testing::EagerCoroutine AwaitInto(
    C& cache, std::string_view key,
    std::optional<absl::StatusOr<std::string>>& out) {
  out = co_await cache.Await(key);
}

template <typename P>
using CountedCache = Cache<CountedKey, std::string, P, CountedHash, CountedEq>;

template <typename P>
class HeterogeneousLookupTest : public ::testing::Test {
 protected:
  CountedCache<P> MakeCache() {
    return CountedCache<P>(
        [this](const CountedKey& key) -> absl::StatusOr<std::string> {
          ++loads_;
          return absl::StrCat(key.text, "#", loads_.load());
        },
        Options{.ttl = absl::Seconds(10), .clock = clock_, .executor = &pool_});
  }

  // Each case runs once on the system clock (the prepared hit path) and
  // once on a cache clock of its own (the path that reads it).
  ManualClock manual_;
  Clock* clock_ = nullptr;
  ManualExecutor pool_;
  std::atomic<int> loads_{0};
};

using Policies = testing::BuiltInPolicies;
TYPED_TEST_SUITE(HeterogeneousLookupTest, Policies);

TYPED_TEST(HeterogeneousLookupTest, AHitMakesNoKeyAndAMissMakesOne) {
  for (Clock* clock :
       {static_cast<Clock*>(nullptr), static_cast<Clock*>(&this->manual_)}) {
    this->clock_ = clock;
    auto cache = this->MakeCache();
    const std::string text = "member:page:0:size:10";
    const std::string_view view = text;

    CountedKey::made = 0;
    EXPECT_EQ(*cache.Get(view), "member:page:0:size:10#1");
    EXPECT_GE(CountedKey::made, 1);  // The miss stored a K.

    CountedKey::made = 0;
    for (int i = 0; i < 100; ++i) EXPECT_EQ(*cache.Get(view), text + "#1");
    EXPECT_EQ(*cache.GetIfPresent(view), text + "#1");
    int called = 0;
    cache.GetAsync(view, [&](absl::StatusOr<std::string> v) {
      EXPECT_EQ(*v, text + "#1");
      ++called;
    });
    EXPECT_EQ(called, 1);  // A hit answers inline.
    std::optional<absl::StatusOr<std::string>> awaited;
    AwaitInto(cache, view, awaited);
    ASSERT_TRUE(awaited.has_value());  // Ready at once: never suspended.
    EXPECT_EQ(**awaited, text + "#1");
    EXPECT_EQ(CountedKey::made, 0);
    EXPECT_EQ(cache.stats().hits, 102u);  // GetIfPresent counts nothing.

    // The K overloads find what the view stored, and the other way round.
    EXPECT_EQ(*cache.Get(CountedKey(text)), text + "#1");
    EXPECT_EQ(this->loads_, 1);
    this->loads_ = 0;
  }
}

// Past the hit, a view makes its K once: a lookup by view makes as many
// keys as one by a K the caller made for it (a miss, then a reload of the
// expired entry), on either clock path.
TYPED_TEST(HeterogeneousLookupTest, PastTheHitAViewMakesItsKeyOnce) {
  for (Clock* clock :
       {static_cast<Clock*>(nullptr), static_cast<Clock*>(&this->manual_)}) {
    this->clock_ = clock;
    auto cache = this->MakeCache();
    const auto made_by = [](auto&& lookup) {
      CountedKey::made = 0;
      lookup();
      return CountedKey::made.load();
    };
    const auto by_key = [&](const char* key) {
      return made_by([&] { EXPECT_TRUE(cache.Get(CountedKey(key)).ok()); });
    };
    const auto by_view = [&](const char* key) {
      return made_by(
          [&] { EXPECT_TRUE(cache.Get(std::string_view(key)).ok()); });
    };
    const auto async_by_key = [&](const char* key) {
      return made_by([&] {
        cache.GetAsync(CountedKey(key),
                       [](const absl::StatusOr<std::string>&) {});
      });
    };
    const auto async_by_view = [&](const char* key) {
      return made_by([&] {
        cache.GetAsync(std::string_view(key),
                       [](const absl::StatusOr<std::string>&) {});
      });
    };
    EXPECT_EQ(by_view("a"), by_key("b"));  // Misses.
    cache.InvalidateAll();                 // Not a hit either: entries gone.
    EXPECT_EQ(async_by_view("a"), async_by_key("b"));
    this->pool_.RunAll();
    EXPECT_EQ(by_view("a"), 0);  // Hits now.
    EXPECT_EQ(async_by_view("a"), 0);
    if (clock == &this->manual_) {
      this->manual_.Advance(absl::Hours(1));  // Both entries expire.
      EXPECT_EQ(by_view("a"), by_key("b"));
    }
  }
}

TYPED_TEST(HeterogeneousLookupTest, InvalidateByViewDropsTheKey) {
  auto cache = this->MakeCache();
  EXPECT_EQ(*cache.Get(std::string_view("k")), "k#1");
  cache.Invalidate(std::string_view("k"));
  EXPECT_EQ(cache.GetIfPresent(std::string_view("k")), std::nullopt);
  EXPECT_EQ(*cache.Get(std::string_view("k")), "k#2");
  EXPECT_EQ(cache.size(), 1u);
}

TYPED_TEST(HeterogeneousLookupTest, PutByViewStoresUnderTheKey) {
  auto cache = this->MakeCache();
  cache.Put(std::string_view("k"), "put");
  EXPECT_EQ(*cache.Get(CountedKey("k")), "put");
  EXPECT_EQ(*cache.Get(std::string_view("k")), "put");
  EXPECT_EQ(this->loads_, 0);
}

TYPED_TEST(HeterogeneousLookupTest, AMissByViewGivesTheLoaderTheFullKey) {
  auto cache = this->MakeCache();
  // A view into a longer buffer: the key is the view's characters only.
  const std::string buffer = "abcdef";
  EXPECT_EQ(*cache.Get(std::string_view(buffer).substr(1, 3)), "bcd#1");
  EXPECT_EQ(*cache.Get(CountedKey("bcd")), "bcd#1");
  EXPECT_EQ(cache.GetIfPresent(CountedKey("bcdef")), std::nullopt);
}

// With the default Hash and Eq (absl::Hash, std::equal_to, as pinned), a
// std::string-keyed cache looks up through their transparent equivalents.
TEST(HeterogeneousLookupDefaults, AStringKeyedCacheLooksUpByViewAndLiteral) {
  std::atomic<int> loads{0};
  Cache<std::string, int, SingleFlight> cache(
      [&](const std::string& key) -> absl::StatusOr<int> {
        ++loads;
        return static_cast<int>(key.size());
      },
      Options{.ttl = absl::Seconds(10)});
  EXPECT_EQ(*cache.Get("a literal"), 9);
  EXPECT_EQ(*cache.Get(std::string_view("a literal")), 9);
  EXPECT_EQ(*cache.Get(std::string("a literal")), 9);
  const char* pointer = "a literal";
  EXPECT_EQ(*cache.Get(pointer), 9);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.stats().hits, 3u);
}

// The default string hash is absl's, seeded per process, for every way of
// spelling the key: not std::hash (unseeded, so that chosen keys collide),
// which is what absl::Hash<std::string_view> falls back to when abseil has
// a string_view of its own.
TEST(HeterogeneousLookupDefaults, TheStringHashIsAbslsHashOfTheString) {
  for (const std::string& key :
       {std::string(), std::string("k"), std::string("member:page:0:size:10"),
        std::string("nul\0inside", 10)}) {
    const size_t expected = absl::Hash<std::string>()(key);
    EXPECT_EQ(StringKeyHash()(key), expected);
    EXPECT_EQ(StringKeyHash()(std::string_view(key)), expected);
  }
  EXPECT_EQ(StringKeyHash()("literal"), absl::Hash<std::string>()("literal"));
}

// Which key types each cache takes. Checked at compile time, reported here.
using StringCache = Cache<std::string, int>;
using IntCache = Cache<int, int>;
// A hash that is not transparent, and may not agree with absl's.
struct OpaqueStringHash {
  size_t operator()(const std::string& key) const { return key.size(); }
};
using OpaqueStringCache = Cache<std::string, int, SoftTtl, OpaqueStringHash>;

template <typename C, typename Q>
constexpr bool kGets = requires(C& c, const Q& q) {
  c.Get(q);
};
template <typename C, typename Q>
constexpr bool kGetsIfPresent = requires(const C& c, const Q& q) {
  c.GetIfPresent(q);
};

// The defaults are the pinned absl::Hash<K> and std::equal_to<K>, for string
// keys too: a user who spells them names the same type.
static_assert(
    std::is_same_v<StringCache,
                   Cache<std::string, int, SoftTtl, absl::Hash<std::string>,
                         std::equal_to<std::string>>>);
static_assert(std::is_same_v<IntCache, Cache<int, int, SoftTtl, absl::Hash<int>,
                                             std::equal_to<int>>>);
static_assert(std::is_same_v<KeyHash<std::string>, absl::Hash<std::string>>);
static_assert(std::is_same_v<KeyEq<std::string>, std::equal_to<std::string>>);
static_assert(
    std::is_same_v<decltype(std::declval<StringCache&>().hash_function()),
                   absl::Hash<std::string>>);
static_assert(StringCache::kLooksUp<std::string_view>);
static_assert(StringCache::kLooksUp<const char*>);
static_assert(kGets<StringCache, std::string_view>);
static_assert(kGetsIfPresent<StringCache, std::string_view>);
// Not a K, and no way to make one: no lookup.
static_assert(!StringCache::kLooksUp<int>);
static_assert(!kGets<StringCache, int>);
// An int cache does not take a string.
static_assert(!IntCache::kLooksUp<std::string_view>);
static_assert(!kGets<IntCache, std::string_view>);
// A std::string_view key with the default absl::Hash is hashed by absl's
// seeded hash too, not by the std::hash that absl::Hash<std::string_view>
// is where abseil has its own string_view.
static_assert(
    std::is_same_v<internal::LookupHashOf<std::string_view,
                                          absl::Hash<std::string_view>>::type,
                   StringKeyHash>);
// A hash that is not transparent: the view is refused rather than hashed by
// a function that may not agree with the key's.
static_assert(!OpaqueStringCache::kLooksUp<std::string_view>);
static_assert(!kGets<OpaqueStringCache, std::string_view>);
// absl::Hash<std::string> with a transparent Eq, or the reverse: both are
// taken (each default has its transparent equivalent).
static_assert(Cache<std::string, int, SoftTtl, absl::Hash<std::string>,
                    StringKeyEq>::kLooksUp<std::string_view>);
static_assert(Cache<std::string, int, SoftTtl, StringKeyHash,
                    std::equal_to<std::string>>::kLooksUp<std::string_view>);

TEST(HeterogeneousLookupDefaults, TheAcceptedKeyTypesAreCheckedAtCompileTime) {
  SUCCEED() << "see the static_asserts above";
}

// The methods are overloaded for other key types, so `auto` cannot take one's
// address; naming its type can, as the header says.
TEST(HeterogeneousLookupDefaults, AMethodsAddressIsTakenWithItsTypeNamed) {
  using C = Cache<std::string, int>;
  std::optional<int> (C::*get_if_present)(const std::string&) const =
      &C::GetIfPresent;
  void (C::*put)(const std::string&, int) = &C::Put;
  void (C::*invalidate)(const std::string&) = &C::Invalidate;
  C cache([](const std::string&) -> absl::StatusOr<int> { return 1; });
  (cache.*put)("k", 2);
  EXPECT_EQ((cache.*get_if_present)("k"), 2);
  (cache.*invalidate)("k");
  EXPECT_EQ((cache.*get_if_present)("k"), std::nullopt);
}

}  // namespace
}  // namespace paddock
