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
using ::paddock::testing::Gate;

// -- The three lookup APIs, each turned into "start a lookup, get a future".

struct BlockingGet {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    return std::async(std::launch::async,
                      [&cache, key] { return cache.Get(key); });
  }
};

struct CallbackGetAsync {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    cache.GetAsync(key, [promise](absl::StatusOr<std::string> v) {
      promise->set_value(std::move(v));
    });
    return result;
  }
};

// The same two with a std::string_view of the key: the lookup makes no
// std::string unless it has to load.
struct ViewGet {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    return std::async(std::launch::async, [&cache, key = std::move(key)] {
      return cache.Get(std::string_view(key));
    });
  }
};

struct ViewGetAsync {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    // The view dies before the callback may run: GetAsync promises that the
    // key need only live until it returns.
    auto owned = std::make_unique<std::string>(std::move(key));
    cache.GetAsync(std::string_view(*owned),
                   [promise](absl::StatusOr<std::string> v) {
                     promise->set_value(std::move(v));
                   });
    owned.reset();
    return result;
  }
};

// A coroutine that starts at once and writes its result to a promise.
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

template <typename C>
Detached AwaitInto(
    C& cache, std::string key,
    std::shared_ptr<std::promise<absl::StatusOr<std::string>>> promise) {
  promise->set_value(co_await cache.Await(key));
}

template <typename C>
Detached AwaitViewInto(
    C& cache, std::string key,
    std::shared_ptr<std::promise<absl::StatusOr<std::string>>> promise) {
  promise->set_value(co_await cache.Await(std::string_view(key)));
}

struct CoroutineAwait {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    AwaitInto(cache, std::move(key), promise);
    return result;
  }
};

struct ViewAwait {
  template <typename C>
  static std::future<absl::StatusOr<std::string>> Start(C& cache,
                                                        std::string key) {
    auto promise =
        std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> result = promise->get_future();
    AwaitViewInto(cache, std::move(key), promise);
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

using Cases = ::testing::Types<
    Case<BlockingGet, NaiveJitter>, Case<BlockingGet, SingleFlight>,
    Case<BlockingGet, XFetch>, Case<BlockingGet, SoftTtl>,
    Case<CallbackGetAsync, NaiveJitter>, Case<CallbackGetAsync, SingleFlight>,
    Case<CallbackGetAsync, XFetch>, Case<CallbackGetAsync, SoftTtl>,
    Case<CoroutineAwait, NaiveJitter>, Case<CoroutineAwait, SingleFlight>,
    Case<CoroutineAwait, XFetch>, Case<CoroutineAwait, SoftTtl>,
    Case<ViewGet, NaiveJitter>, Case<ViewGet, SingleFlight>,
    Case<ViewGet, XFetch>, Case<ViewGet, SoftTtl>,
    Case<ViewGetAsync, NaiveJitter>, Case<ViewGetAsync, SingleFlight>,
    Case<ViewGetAsync, XFetch>, Case<ViewGetAsync, SoftTtl>,
    Case<ViewAwait, NaiveJitter>, Case<ViewAwait, SingleFlight>,
    Case<ViewAwait, XFetch>, Case<ViewAwait, SoftTtl>>;

class CaseNames {
 public:
  template <typename C>
  static std::string GetName(int) {
    using A = typename C::A;
    std::string api = std::is_same_v<A, BlockingGet>        ? "Get"
                      : std::is_same_v<A, CallbackGetAsync> ? "GetAsync"
                      : std::is_same_v<A, ViewGet>          ? "GetView"
                      : std::is_same_v<A, ViewGetAsync>     ? "GetAsyncView"
                      : std::is_same_v<A, ViewAwait>        ? "AwaitView"
                                                            : "Await";
    std::string policy =
        std::is_same_v<typename C::P, NaiveJitter>    ? "NaiveJitter"
        : std::is_same_v<typename C::P, SingleFlight> ? "SingleFlight"
        : std::is_same_v<typename C::P, XFetch>       ? "XFetch"
                                                      : "SoftTtl";
    return api + "_" + policy;
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
