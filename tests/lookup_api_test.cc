// One typed suite over the three ways to look a key up — `Get` (blocks),
// `GetAsync` (a callback) and `Await` (a coroutine) — for every policy: the
// behaviour they share is the same, counted the same. Each runs twice: with
// the `std::string` key, and with a `std::string_view` of it (heterogeneous
// lookup, which must behave exactly alike). Loads run on a real
// thread pool (GetAsync never runs a blocking loader on its caller's
// thread); time moves only when a test says so.

#include <atomic>
#include <coroutine>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "built_in_policies.h"
#include "eager_coroutine.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::EagerCoroutine;
using ::paddock::testing::Gate;

// -- The three lookup APIs, each turned into "start a lookup, get a future",
// each given the key as the std::string it is or as a view of it.

struct AsKey {
  static const std::string& Of(const std::string& key) { return key; }
};
struct AsView {
  static std::string_view Of(const std::string& key) { return key; }
};

template <typename As>
struct BlockingGet {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    return std::async(std::launch::async, [&cache, key = std::move(key)] {
      return cache.Get(As::Of(key));
    });
  }
};

template <typename As>
struct CallbackGetAsync {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    // The key dies before the callback may run: GetAsync promises that it
    // need only live until it returns.
    auto owned = std::make_unique<std::string>(std::move(key));
    cache.GetAsync(As::Of(*owned), [promise](absl::StatusOr<std::string> v) {
      promise->set_value(std::move(v));
    });
    owned.reset();
    return result;
  }
};

template <typename As, typename C>
EagerCoroutine AwaitInto(
    C& cache, std::string key,
    std::shared_ptr<std::promise<absl::StatusOr<std::string>>> promise) {
  promise->set_value(co_await cache.Await(As::Of(key)));
}

template <typename As>
struct CoroutineAwait {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    AwaitInto<As>(cache, std::move(key), promise);
    return result;
  }
};

template <typename Api, typename Policy>
struct Case {
  using A = Api;
  using P = Policy;
};

template <typename C>
class LookupApi : public ::testing::Test {
 protected:
  using Api = typename C::A;
  using P = typename C::P;
  using StringCache = Cache<std::string, std::string, P>;
  static constexpr bool kCoalesces = P::kCoalesceLoads;

  std::unique_ptr<StringCache> MakeCache(P policy = P{}) {
    return std::make_unique<StringCache>(
        [this](const std::string& k) -> absl::StatusOr<std::string> {
          const int call = ++loads_;
          const int now = ++running_;
          int seen = most_running_.load();
          while (now > seen &&
                 !most_running_.compare_exchange_weak(seen, now)) {
          }
          entered_.Increment();
          if (hold_) release_.Wait();
          --running_;
          if (!error_.ok()) return error_;
          return absl::StrCat(k, "#", call);
        },
        options_, policy);
  }
  absl::StatusOr<std::string> Lookup(StringCache& cache, std::string key) {
    return Api::Start(cache, std::move(key)).get();
  }

  ManualClock clock_;
  ThreadPool pool_{4};
  Options options_{.ttl = absl::Seconds(10),
                   .wait_timeout = absl::Seconds(60),
                   .clock = &clock_,
                   .executor = &pool_};
  std::atomic<int> loads_{0};
  std::atomic<int> running_{0};
  std::atomic<int> most_running_{0};
  Counter entered_;
  Gate release_;
  std::atomic<bool> hold_{false};
  absl::Status error_;
};

using Cases = testing::EveryPair<
    Case, testing::TypeList<BlockingGet<AsKey>, BlockingGet<AsView>,
                            CallbackGetAsync<AsKey>, CallbackGetAsync<AsView>,
                            CoroutineAwait<AsKey>, CoroutineAwait<AsView>>>;

template <typename A, template <typename> class Api>
constexpr bool kIs =
    std::is_same_v<A, Api<AsKey>> || std::is_same_v<A, Api<AsView>>;

class CaseNames {
 public:
  template <typename C>
  static std::string GetName(int) {
    using A = typename C::A;
    const std::string api = kIs<A, BlockingGet>        ? "Get"
                            : kIs<A, CallbackGetAsync> ? "GetAsync"
                                                       : "Await";
    const bool view = std::is_same_v<A, BlockingGet<AsView>> ||
                      std::is_same_v<A, CallbackGetAsync<AsView>> ||
                      std::is_same_v<A, CoroutineAwait<AsView>>;
    std::string policy =
        std::is_same_v<typename C::P, NaiveJitter>    ? "NaiveJitter"
        : std::is_same_v<typename C::P, SingleFlight> ? "SingleFlight"
        : std::is_same_v<typename C::P, XFetch>       ? "XFetch"
                                                      : "SoftTtl";
    return api + (view ? "View" : "") + "_" + policy;
  }
};
TYPED_TEST_SUITE(LookupApi, Cases, CaseNames);

TYPED_TEST(LookupApi, AFreshValueIsServedWithoutALoad) {
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Lookup(*cache, "k"), "k#1");
  EXPECT_EQ(*this->Lookup(*cache, "k"), "k#1");
  EXPECT_EQ(this->loads_, 1);
  const Stats s = cache->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.loads, 1u);
}

TYPED_TEST(LookupApi, ManyCallersOfAColdKeyLoadItOnceWhenThePolicyCoalesces) {
  auto cache = this->MakeCache();
  this->hold_ = true;
  constexpr int kCallers = 16;
  std::vector<std::future<absl::StatusOr<std::string>>> results;
  results.push_back(TestFixture::Api::Start(*cache, "k"));
  ASSERT_TRUE(this->entered_.WaitFor(1));  // The first load runs...
  for (int i = 1; i < kCallers; ++i) {
    results.push_back(TestFixture::Api::Start(*cache, "k"));
  }
  // ...and every later caller has joined it before it returns (or, without
  // coalescing, runs a load of its own).
  while (cache->stats().misses < kCallers) std::this_thread::yield();
  this->release_.Open();
  for (auto& r : results) EXPECT_TRUE(r.get().ok());
  EXPECT_EQ(this->loads_, TestFixture::kCoalesces ? 1 : kCallers);
  EXPECT_EQ(cache->stats().coalesced_waits,
            TestFixture::kCoalesces ? kCallers - 1u : 0u);
}

TYPED_TEST(LookupApi, AnExpiredValueIsLoadedAgain) {
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Lookup(*cache, "k"), "k#1");
  this->clock_.Advance(absl::Minutes(5));  // Past what any policy keeps.
  EXPECT_EQ(*this->Lookup(*cache, "k"), "k#2");
}

TYPED_TEST(LookupApi, ALoadErrorReachesTheCallerAndErrorTtlRemembersIt) {
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  this->error_ = absl::UnavailableError("down");
  EXPECT_EQ(this->Lookup(*cache, "k").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(this->Lookup(*cache, "k").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(this->loads_, 1);
  EXPECT_EQ(cache->stats().negative_hits, 1u);
  this->error_ = absl::OkStatus();
  this->clock_.Advance(absl::Seconds(6));
  EXPECT_TRUE(this->Lookup(*cache, "k").ok());
}

TYPED_TEST(LookupApi, SoftTtlServesTheStaleValueAtOnceWhileOneRefreshRuns) {
  if (!std::is_same_v<typename TestFixture::P, SoftTtl>) GTEST_SKIP();
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Lookup(*cache, "k"), "k#1");
  this->clock_.Advance(absl::Seconds(11));
  this->hold_ = true;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(*this->Lookup(*cache, "k"), "k#1");
  ASSERT_TRUE(this->entered_.WaitFor(2));  // One refresh, on the pool.
  EXPECT_EQ(cache->stats().stale_hits, 5u);
  EXPECT_EQ(cache->stats().refreshes, 1u);
  this->release_.Open();
  while (cache->loads_in_flight() != 0) std::this_thread::yield();
  EXPECT_EQ(*this->Lookup(*cache, "k"), "k#2");
}

TYPED_TEST(LookupApi, MaxConcurrentLoadsBoundsTheLoaderCalls) {
  this->options_.max_concurrent_loads = 2;
  auto cache = this->MakeCache();
  this->hold_ = true;
  std::vector<std::future<absl::StatusOr<std::string>>> results;
  for (int i = 0; i < 6; ++i) {
    results.push_back(TestFixture::Api::Start(*cache, absl::StrCat("k", i)));
  }
  ASSERT_TRUE(this->entered_.WaitFor(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(this->most_running_, 2);  // Not more, even given time.
  this->release_.Open();
  for (auto& r : results) EXPECT_TRUE(r.get().ok());
  EXPECT_EQ(this->most_running_, 2);
  EXPECT_EQ(this->loads_, 6);
}

TYPED_TEST(LookupApi, TwoCachesSharingATierLoadAColdKeyOnce) {
  ManualClock tier_clock;
  auto tier = std::make_shared<testing::FakeSharedTier>(&tier_clock);
  this->options_.shared = tier;
  auto a = this->MakeCache();
  auto b = this->MakeCache();
  EXPECT_EQ(*this->Lookup(*a, "k"), "k#1");
  EXPECT_EQ(*this->Lookup(*b, "k"), "k#1");
  EXPECT_EQ(this->loads_, 1);
  EXPECT_EQ(b->stats().shared_hits, 1u);
}

}  // namespace
}  // namespace paddock
