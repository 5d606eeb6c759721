// File: paddock/testing/policy_contract_fixture.h
// -----------------------------------------------------------------------------
// The fixtures: `PolicyContractTest` (the one `Get` every lookup goes through)
// and the `PolicyContract` suite's fixture.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_FIXTURE_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_FIXTURE_H_

#include "paddock/testing/policy_contract_profile.h"

namespace paddock::testing {

// The fixtures.

// PolicyContractTest
//
// What both suites' fixtures share: the one call through which they look a
// key up. Every lookup in this file, including those a loader makes, goes
// through `Get`, so that the same contract can run over another lookup API
// (an asynchronous `Cache::GetAsync` is planned): make `Get` depend on a
// second type parameter and instantiate the suites once per API.
class PolicyContractTest : public ::testing::Test {
 protected:
  template <typename CacheType, typename Key>
  auto Get(CacheType& cache, const Key& key) const {
    return cache.Get(key);
  }

  // `Get`, timed on the real clock.
  template <typename CacheType, typename Key>
  TimedResult TimedGet(CacheType& cache, const Key& key) const {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> value = Get(cache, key);
    return {std::move(value),
            absl::FromChrono(std::chrono::steady_clock::now() - start)};
  }

  // `Get` on a thread of its own.
  template <typename CacheType>
  std::future<absl::StatusOr<std::string>> AsyncGet(CacheType& cache,
                                                    std::string key) const {
    return std::async(std::launch::async, [this, &cache, key = std::move(key)] {
      return Get(cache, key);
    });
  }
};

// PolicyContract
//
// The fixture of the contract: a ManualClock, a ReplaceableExecutor, a
// Backend on that clock and the options of a cache of strings with a 10 s ttl.
template <typename P>
class PolicyContract : public PolicyContractTest {
 protected:
  static_assert(RefreshPolicy<P>, "PolicyContract needs a RefreshPolicy");
  static_assert(std::is_default_constructible_v<P>,
                "PolicyContract tests P{}: give your configuration a type");

  using StringCache = Cache<std::string, std::string, P>;
  static constexpr bool kCoalesces = P::kCoalesceLoads;
  static constexpr absl::Duration kTtl = absl::Seconds(10);

  // What `P{}` declares for values stored with `kTtl`.
  static const PolicyProfile& Profile() {
    static const PolicyProfile profile = ProfileOf<P>(kTtl);
    return profile;
  }
  // Whether the policy serves some values while it refreshes them.
  static bool Refreshes() { return Profile().refreshes; }
  // `RefreshChance` of `P{}`.
  static double RefreshChance(absl::Duration ttl, absl::Duration load_duration,
                              absl::Duration age) {
    return ::paddock::testing::RefreshChance(P{}, ttl, load_duration, age);
  }
  // `at_least`, or longer if the policy keeps values longer: no value stored
  // that long ago is served any more.
  static absl::Duration PastWhatThePolicyKeeps(absl::Duration at_least) {
    return std::max(at_least, Profile().longest_kept);
  }

  std::unique_ptr<StringCache> MakeCache(Backend& backend) {
    return std::make_unique<StringCache>(backend.template Loader<StringCache>(),
                                         options_);
  }
  std::unique_ptr<StringCache> MakeCache() { return MakeCache(backend_); }

  // Gives every load the duration the policy must see to refresh early
  // (XFetch: 100 ms on the ManualClock, β·Δ·21 = 2.1 s of draw window).
  void GiveLoadsADuration(Backend& backend) {
    if (Profile().refresh_load_duration > absl::ZeroDuration()) {
      backend.set_load_time(Profile().refresh_load_duration);
    }
  }

  // Loads `key` and moves the clock to where the policy serves that value and
  // queues one background refresh (`PolicyProfile::refresh_age`: 11 s for
  // SoftTtl, 10 ms before expiry for XFetch, where each hit triggers with
  // chance e^-0.1).
  void LoadThenQueueRefresh(StringCache& cache, Backend& backend,
                            const std::string& key) {
    if (!Refreshes()) {
      ADD_FAILURE() << "this policy never refreshes in the background";
      return;
    }
    GiveLoadsADuration(backend);
    absl::StatusOr<std::string> first = Get(cache, key);
    ASSERT_TRUE(first.ok()) << first.status();
    backend.set_load_time(absl::ZeroDuration());
    clock_.Advance(Profile().refresh_age);
    QueueRefresh(cache, key, *first);
  }

  // Hits `key` until the policy queues a refresh; every hit gets `expected`.
  void QueueRefresh(StringCache& cache, const std::string& key,
                    const std::string& expected) {
    const size_t before = executor_.pending();
    for (int i = 0; i < 100 && executor_.pending() == before; ++i) {
      absl::StatusOr<std::string> v = Get(cache, key);
      ASSERT_TRUE(v.ok()) << v.status();
      ASSERT_EQ(*v, expected);
    }
    ASSERT_EQ(executor_.pending(), before + 1);
  }

  ManualClock clock_;
  ReplaceableExecutor executor_;
  Backend backend_{&clock_};
  Options options_{.ttl = kTtl,
                   .wait_timeout = absl::Seconds(5),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 42};
};

TYPED_TEST_SUITE_P(PolicyContract);

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_FIXTURE_H_
