// Tests of paddock/policy.h: each policy's decisions on their own, then what
// each does inside a cache under a ManualClock and a ManualExecutor, then the
// failure and load-control options the policies build on.

#include "paddock/policy.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/internal/seed.h"
#include "paddock/testing/sync.h"
#include "sanitizers.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;

static_assert(RefreshPolicy<NaiveJitter>);
static_assert(RefreshPolicy<SingleFlight>);
static_assert(RefreshPolicy<XFetch>);
static_assert(RefreshPolicy<SoftTtl>);
static_assert(std::is_same_v<Cache<int, int>, Cache<int, int, SoftTtl>>,
              "SoftTtl is the default policy");

// A policy with no `kCoalesceLoads` is not a RefreshPolicy.
struct NotAPolicy {
  Lifetime OnStore(absl::Duration, absl::Duration, Random&) const { return {}; }
};
static_assert(!RefreshPolicy<NotAPolicy>);

const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1);

EntryState StateAt(absl::Duration ttl, absl::Duration load_duration) {
  return {kStart, kStart + ttl, load_duration, false};
}

// ---------------------------------------------------------------------------
// Decisions.

TEST(XFetchDecide, TriggerFrequencyMatchesTheFormula) {
  const XFetch policy{.beta = 1.0};
  const absl::Duration delta = absl::Milliseconds(100);
  const EntryState state = StateAt(absl::Seconds(10), delta);
  Random rng(12345);
  constexpr int kLookups = 200000;
  for (const double ratio : {0.5, 1.0, 2.0}) {
    // τ = ratio·β·Δ before expiry.
    const absl::Time now = state.expires_at - delta * ratio;
    int triggered = 0;
    for (int i = 0; i < kLookups; ++i) {
      triggered += policy.Decide(state, now, rng) == Decision::kServeAndRefresh;
    }
    const double p = std::exp(-ratio);
    const double sigma = std::sqrt(p * (1 - p) / kLookups);
    EXPECT_NEAR(static_cast<double>(triggered) / kLookups, p, 4 * sigma)
        << "τ/(βΔ) = " << ratio;
  }
}

TEST(XFetchDecide, FarFromExpiryDrawsNoRandomNumber) {
  const XFetch policy{.beta = 2.0};
  const absl::Duration delta = absl::Milliseconds(100);
  const EntryState state = StateAt(absl::Seconds(10), delta);
  Random rng(1);
  // τ just above Δ·β·c: no draw. Just below: a draw.
  const absl::Duration cap = delta * (2.0 * XFetch::kCap);
  EXPECT_EQ(
      policy.Decide(state, state.expires_at - cap - absl::Milliseconds(1), rng),
      Decision::kServe);
  EXPECT_EQ(rng.draws(), 0u);
  policy.Decide(state, state.expires_at - cap + absl::Milliseconds(1), rng);
  EXPECT_EQ(rng.draws(), 1u);
  EXPECT_LT(std::exp(-XFetch::kCap), 1e-9);
}

TEST(XFetchDecide, QuietWindowEndsAtTheDrawCap) {
  Random rng(1);
  const Lifetime life = XFetch{.beta = 1.0}.OnStore(
      absl::Seconds(10), absl::Milliseconds(100), rng);
  EXPECT_EQ(life.quiet_for, absl::Seconds(10) - absl::Milliseconds(2100));
  EXPECT_EQ(life.expires_after, absl::Seconds(10));
}

TEST(XFetchDecide, ExpiredLoadsAndInFlightRefreshServes) {
  const XFetch policy;
  EntryState state = StateAt(absl::Seconds(10), absl::Seconds(1));
  Random rng(1);
  EXPECT_EQ(policy.Decide(state, state.expires_at, rng), Decision::kLoad);
  state.refresh_in_flight = true;
  EXPECT_EQ(policy.Decide(state, state.expires_at - absl::Milliseconds(1), rng),
            Decision::kServe);
  EXPECT_EQ(rng.draws(), 0u);
}

TEST(SoftTtlDecide, FreshThenStaleThenLoad) {
  const SoftTtl policy{.stale_for = absl::Seconds(30)};
  const EntryState state = StateAt(absl::Seconds(10), absl::Seconds(1));
  Random rng(1);
  EXPECT_EQ(policy.Decide(state, kStart + absl::Seconds(9), rng),
            Decision::kServe);
  EXPECT_EQ(policy.Decide(state, kStart + absl::Seconds(10), rng),
            Decision::kServeAndRefresh);
  EXPECT_EQ(policy.Decide(state, kStart + absl::Seconds(39), rng),
            Decision::kServeAndRefresh);
  EXPECT_EQ(policy.Decide(state, kStart + absl::Seconds(40), rng),
            Decision::kLoad);
  EXPECT_EQ(rng.draws(), 0u);  // No randomness, no cost for it.
}

TEST(SoftTtlLifetime, NeverServedPastTtlPlusTheLongerWindow) {
  Random rng(1);
  const Lifetime life =
      SoftTtl{.stale_for = absl::Seconds(30), .stale_if_error = absl::Hours(1)}
          .OnStore(absl::Seconds(10), absl::ZeroDuration(), rng);
  EXPECT_EQ(life.keep_for, absl::Seconds(10) + absl::Hours(1));
  EXPECT_EQ(life.serve_on_error_for, absl::Seconds(10) + absl::Hours(1));
}

TEST(NaiveJitterLifetime, SpreadsOverTheWholeRange) {
  const NaiveJitter policy{.jitter = 0.2};
  Random rng(99);
  absl::Duration lo = absl::InfiniteDuration(), hi = absl::ZeroDuration();
  for (int i = 0; i < 10000; ++i) {
    const absl::Duration d =
        policy.OnStore(absl::Seconds(10), absl::ZeroDuration(), rng)
            .expires_after;
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_GE(lo, absl::Seconds(8));
  EXPECT_LE(hi, absl::Seconds(12));
  EXPECT_LT(lo, absl::Milliseconds(8100));
  EXPECT_GT(hi, absl::Milliseconds(11900));
}

TEST(SingleFlightDecide, UsesNoRandomness) {
  Random rng(1);
  const SingleFlight policy;
  const Lifetime life =
      policy.OnStore(absl::Seconds(10), absl::ZeroDuration(), rng);
  EXPECT_EQ(life.expires_after, absl::Seconds(10));
  const EntryState state = StateAt(absl::Seconds(10), absl::Seconds(1));
  EXPECT_EQ(policy.Decide(state, kStart, rng), Decision::kServe);
  EXPECT_EQ(policy.Decide(state, state.expires_at, rng), Decision::kLoad);
  EXPECT_EQ(rng.draws(), 0u);
}

TEST(RandomTest, SameSeedSameSequenceAndOpenClosedRange) {
  Random a(5), b(5);
  for (int i = 0; i < 1000; ++i) {
    const double u = a.UniformOpenClosed();
    EXPECT_EQ(u, b.UniformOpenClosed());
    EXPECT_GT(u, 0.0);
    EXPECT_LE(u, 1.0);
  }
}

// A pre-fork server builds its caches before it forks: in each child, a
// stream seeded from entropy draws numbers of its own (the same TTL jitter
// and early-refresh draws in every child before); a seed given repeats the
// parent's, as a seed promises.
TEST(RandomTest, AChildAfterForkDrawsItsOwnNumbersUnlessSeeded) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "fork() of a threaded process";
  Random drawn(internal::SeedOrRandom(0), /*reseed_after_fork=*/true);
  Random seeded(7);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const uint64_t mine[2] = {drawn.Next(), seeded.Next()};
    _exit(write(fds[1], mine, sizeof(mine)) == sizeof(mine) ? 0 : 1);
  }
  uint64_t childs[2] = {};
  EXPECT_EQ(read(fds[0], childs, sizeof(childs)),
            static_cast<ssize_t>(sizeof(childs)));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(fds[0]);
  close(fds[1]);
  EXPECT_NE(childs[0], drawn.Next());
  EXPECT_EQ(childs[1], seeded.Next());
}

// ---------------------------------------------------------------------------
// Policies inside a cache.

class PolicyInCache : public ::testing::Test {
 public:  // For the helpers below that take the fixture.
  // A loader whose values count up ("v1", "v2", ...) and whose load takes
  // `load_time` on the ManualClock.
  auto CountingLoader(absl::Duration load_time = absl::ZeroDuration()) {
    return
        [this, load_time](const std::string&) -> absl::StatusOr<std::string> {
          clock_.Advance(load_time);
          if (fail_) return absl::UnavailableError("backend down");
          return absl::StrCat("v", ++loads_);
        };
  }

  // A loader that returns its key and holds a load of "busy" (counted in
  // `entered`) until `gate` opens: a load slot taken for as long as a test
  // needs.
  static auto BusyLoader(Gate& gate, Counter& entered) {
    return [&gate,
            &entered](const std::string& key) -> absl::StatusOr<std::string> {
      if (key == "busy") {
        entered.Increment();
        gate.Wait();
      }
      return key;
    };
  }

  ManualClock clock_;
  ManualExecutor executor_;
  Options options_{.ttl = absl::Seconds(10),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 3};
  std::atomic<int> loads_{0};
  std::atomic<bool> fail_{false};
};

// A SingleFlight that counts its OnStore calls; `kFixed` says whether it
// declares kFixedLifetime.
template <bool kFixed>
struct CountingOnStore {
  static constexpr bool kCoalesceLoads = true;
  static constexpr bool kFixedLifetime = kFixed;
  Lifetime OnStore(absl::Duration ttl, absl::Duration load_duration,
                   Random& rng) const {
    calls->fetch_add(1);
    return SingleFlight().OnStore(ttl, load_duration, rng);
  }
  Decision Decide(const EntryState& s, absl::Time now, Random& rng) const {
    return SingleFlight().Decide(s, now, rng);
  }
  std::atomic<int>* calls;
};

TEST_F(PolicyInCache, AFixedLifetimeIsAskedForOnceAndHoldsForEveryStore) {
  std::atomic<int> fixed_calls{0};
  std::atomic<int> plain_calls{0};
  Cache<std::string, std::string, CountingOnStore<true>> fixed(
      CountingLoader(), options_, {.calls = &fixed_calls});
  Cache<std::string, std::string, CountingOnStore<false>> plain(
      CountingLoader(), options_, {.calls = &plain_calls});
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE(fixed.Get(key).ok());
    ASSERT_TRUE(plain.Get(key).ok());
  }
  fixed.Put("d", "put");
  plain.Put("d", "put");
  EXPECT_EQ(fixed_calls.load(), 1);  // At construction.
  EXPECT_EQ(plain_calls.load(), 4);  // Once per store.
  // The one lifetime applies to every store: fresh for the ttl, then loaded.
  clock_.Advance(absl::Seconds(10) - absl::Nanoseconds(1));
  EXPECT_EQ(fixed.GetIfPresent("a"), "v1");
  const int loads = loads_.load();
  ASSERT_TRUE(fixed.Get("d").ok());
  EXPECT_EQ(loads_.load(), loads);
  clock_.Advance(absl::Nanoseconds(1));
  EXPECT_NE(*fixed.Get("d"), "put");
  EXPECT_EQ(loads_.load(), loads + 1);
}

static_assert(SingleFlight::kFixedLifetime && SoftTtl::kFixedLifetime);
static_assert(XFetch::kFixedExpiry);

// A policy that claims kFixedExpiry but whose expiry (not only its quiet
// window) grows with the load's duration: wrongly, or `kLies` = false to
// make only the claim XFetch makes.
template <bool kLies>
struct StretchedExpiry {
  static constexpr bool kCoalesceLoads = true;
  static constexpr bool kFixedExpiry = true;
  Lifetime OnStore(absl::Duration ttl, absl::Duration load_duration,
                   Random&) const {
    const absl::Duration expires = kLies ? ttl + load_duration : ttl;
    return {.expires_after = expires,
            .quiet_for = expires - 2 * load_duration,
            .keep_for = 2 * expires,
            .serve_on_error_for = expires};
  }
  Decision Decide(const EntryState& s, absl::Time now, Random&) const {
    return now < s.expires_at ? Decision::kServe : Decision::kLoad;
  }
};

// Whatever a kFixedExpiry policy claims, each value is fresh exactly as long
// as its OnStore said, through its quiet window and after.
template <bool kLies>
void ExpectServedForItsOwnLifetime(PolicyInCache& test) {
  Cache<std::string, std::string, StretchedExpiry<kLies>> cache(
      test.CountingLoader(absl::Milliseconds(100)), test.options_);
  ASSERT_EQ(*cache.Get("k"), "v1");  // Loaded at 100 ms, in 100 ms.
  const absl::Duration fresh =
      kLies ? absl::Seconds(10) + absl::Milliseconds(100) : absl::Seconds(10);
  test.clock_.Advance(fresh - absl::Milliseconds(250));  // Still quiet.
  EXPECT_EQ(*cache.Get("k"), "v1");
  test.clock_.Advance(absl::Milliseconds(249));  // Past quiet, fresh.
  EXPECT_EQ(*cache.Get("k"), "v1");
  test.clock_.Advance(absl::Milliseconds(1));  // Expired: loads.
  EXPECT_EQ(*cache.Get("k"), "v2");
  EXPECT_EQ(test.loads_.load(), 2);
}

TEST_F(PolicyInCache, AFixedExpiryPolicyIsServedForItsLifetime) {
  ExpectServedForItsOwnLifetime<false>(*this);
}

TEST_F(PolicyInCache, AWrongFixedExpiryClaimCostsMemoryNotCorrectness) {
  ExpectServedForItsOwnLifetime<true>(*this);
}

TEST_F(PolicyInCache, NaiveJitterLetsEveryBlockedCallerLoad) {
  constexpr int kCallers = 8;
  Counter entered;
  Cache<std::string, std::string, NaiveJitter> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        entered.Increment();
        // Every caller is inside the loader at once: no coalescing.
        EXPECT_TRUE(entered.WaitFor(kCallers));
        return "v";
      },
      options_);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&] { EXPECT_TRUE(cache.Get("hot").ok()); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.stats().loads, static_cast<uint64_t>(kCallers));
}

TEST_F(PolicyInCache, NaiveJitterStoredLifetimesSpreadOverTheRange) {
  Cache<int, int, NaiveJitter> cache(
      [](const int& key) -> absl::StatusOr<int> { return key; }, options_,
      NaiveJitter{.jitter = 0.2});
  constexpr int kKeys = 1000;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(cache.Get(i).ok());
  auto present = [&] {
    int n = 0;
    for (int i = 0; i < kKeys; ++i) n += cache.GetIfPresent(i).has_value();
    return n;
  };
  clock_.Advance(absl::Milliseconds(7999));
  EXPECT_EQ(present(), kKeys);  // None before 0.8·ttl.
  clock_.Advance(absl::Milliseconds(2001));
  const int at_ttl = present();
  EXPECT_GT(at_ttl, kKeys / 3);  // About half at ttl.
  EXPECT_LT(at_ttl, 2 * kKeys / 3);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(present(), 0);  // All gone by 1.2·ttl.
}

TEST_F(PolicyInCache, SoftTtlServesStaleAtOnceAndQueuesOneRefresh) {
  Cache<std::string, std::string, SoftTtl> cache(
      CountingLoader(), options_, SoftTtl{.stale_for = absl::Seconds(30)});
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(15));  // Stale, inside the window.
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.pending(), 1u);
  EXPECT_EQ(cache.stats().refreshes, 1u);
  EXPECT_EQ(cache.stats().stale_hits, 1000u);
  EXPECT_EQ(loads_, 1);  // Nobody waited for a load.
  executor_.RunAll();
  EXPECT_EQ(*cache.Get("k"), "v2");
  EXPECT_EQ(cache.stats().loads, 2u);
  EXPECT_EQ(cache.loads_in_flight(), 0u);
}

TEST_F(PolicyInCache, SoftTtlLoadsBeyondTheWindow) {
  Cache<std::string, std::string, SoftTtl> cache(
      CountingLoader(), options_, SoftTtl{.stale_for = absl::Seconds(30)});
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(40));
  EXPECT_EQ(*cache.Get("k"), "v2");  // Loaded in the foreground.
  EXPECT_EQ(executor_.pending(), 0u);
  EXPECT_EQ(cache.stats().misses, 2u);
}

TEST_F(PolicyInCache, SoftTtlStaleIfErrorServesStaleOnAFailedLoad) {
  Cache<std::string, std::string, SoftTtl> cache(
      CountingLoader(), options_,
      SoftTtl{.stale_for = absl::Seconds(5),
              .stale_if_error = absl::Seconds(60)});
  ASSERT_EQ(*cache.Get("k"), "v1");
  fail_ = true;
  clock_.Advance(absl::Seconds(20));  // Past stale_for: a foreground load.
  EXPECT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(cache.stats().stale_fallbacks, 1u);
  EXPECT_EQ(cache.stats().load_failures, 1u);
  clock_.Advance(absl::Seconds(60));  // Past ttl + stale_if_error.
  EXPECT_EQ(cache.Get("k").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PolicyInCache, FailedRefreshKeepsTheValueAndTheEntryRefreshable) {
  Cache<std::string, std::string, SoftTtl> cache(CountingLoader(), options_);
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(11));
  fail_ = true;
  ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.RunAll(), 1u);   // The refresh fails.
  EXPECT_EQ(*cache.Get("k"), "v1");    // Old value kept ...
  EXPECT_EQ(executor_.pending(), 1u);  // ... and the next hit refreshes again.
  fail_ = false;
  executor_.RunAll();
  EXPECT_EQ(*cache.Get("k"), "v2");
}

TEST_F(PolicyInCache, FailedRefreshWithErrorTtlKeepsServingAndBacksOff) {
  options_.error_ttl = absl::Seconds(5);
  Cache<std::string, std::string, SoftTtl> cache(CountingLoader(), options_);
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(11));
  fail_ = true;
  ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.RunAll(), 1u);  // The refresh fails.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.pending(), 0u);  // No retry within error_ttl ...
  clock_.Advance(absl::Seconds(5));
  fail_ = false;
  ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.RunAll(), 1u);  // ... then one.
  EXPECT_EQ(*cache.Get("k"), "v2");
}

// A refresh that never returns: the stale value is served no longer than
// ttl + stale_for, and the key is usable again once the hung load is older
// than max_load_age.
TEST_F(PolicyInCache, HungRefreshDoesNotWedgeTheKey) {
  options_.max_load_age = absl::Seconds(20);
  options_.wait_timeout = absl::ZeroDuration();
  Cache<std::string, std::string, SoftTtl> cache(
      CountingLoader(), options_, SoftTtl{.stale_for = absl::Seconds(30)});
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(11));
  ASSERT_EQ(*cache.Get("k"), "v1");  // Queues a refresh that never runs.
  ASSERT_EQ(executor_.pending(), 1u);
  clock_.Advance(absl::Seconds(10));  // 21 s: stale, refresh 10 s old.
  EXPECT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(20));  // 41 s: past ttl + stale_for.
  // The hung refresh is 30 s old (> max_load_age): this caller loads.
  EXPECT_EQ(*cache.Get("k"), "v2");
}

TEST_F(PolicyInCache, XFetchRefreshesEarlyOnceWithoutMakingCallersWait) {
  // Δ = 1 s, β = 1, ttl 10 s: the draw window starts at 10 − 21 s, i.e. at
  // once; 9.99 s in, τ = 10 ms and a refresh is near certain.
  Cache<std::string, std::string, XFetch> cache(
      CountingLoader(absl::Seconds(1)), options_);
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Milliseconds(9990));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(executor_.pending(), 1u);  // A thousand lookups, one refresh.
  EXPECT_EQ(cache.stats().refreshes, 1u);
  EXPECT_EQ(cache.stats().hits, 1000u);
  executor_.RunAll();
  EXPECT_EQ(*cache.Get("k"), "v2");
}

// Counts the random draws XFetch makes inside a cache.
struct CountingXFetch {
  static constexpr bool kCoalesceLoads = true;
  Lifetime OnStore(absl::Duration ttl, absl::Duration d, Random& rng) const {
    return inner.OnStore(ttl, d, rng);
  }
  Decision Decide(const EntryState& s, absl::Time now, Random& rng) const {
    ++*decisions;
    const uint64_t before = rng.draws();
    const Decision d = inner.Decide(s, now, rng);
    *draws += rng.draws() - before;
    return d;
  }
  XFetch inner;
  std::shared_ptr<std::atomic<int>> decisions =
      std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> draws =
      std::make_shared<std::atomic<int>>(0);
};

TEST_F(PolicyInCache, XFetchFarFromExpiryNeitherDecidesNorDraws) {
  CountingXFetch policy;
  Cache<std::string, std::string, CountingXFetch> cache(
      CountingLoader(absl::Milliseconds(100)), options_, policy);
  ASSERT_TRUE(cache.Get("k").ok());
  // τ = 5 s ≫ Δ·β·c = 2.1 s: the hit path does not even ask the policy.
  clock_.Advance(absl::Seconds(5));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(cache.Get("k").ok());
  EXPECT_EQ(*policy.decisions, 0);
  EXPECT_EQ(*policy.draws, 0);
  // τ = 1 s < 2.1 s: now every hit draws.
  clock_.Advance(absl::Seconds(4));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(cache.Get("k").ok());
  EXPECT_GT(*policy.draws, 0);
}

// ---------------------------------------------------------------------------
// Failure and load control.

TEST_F(PolicyInCache, ErrorTtlRemembersAFailureAndSparesTheLoader) {
  options_.error_ttl = absl::Seconds(5);
  fail_ = true;
  std::atomic<int> calls{0};
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++calls;
        return absl::UnavailableError("backend down");
      },
      options_);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(cache.Get("k").status(), absl::UnavailableError("backend down"));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.stats().negative_hits, 99u);
  clock_.Advance(absl::Seconds(5));
  EXPECT_FALSE(cache.Get("k").ok());
  EXPECT_EQ(calls, 2);
}

TEST_F(PolicyInCache, WaiterGetsTheStaleValueAtWaitTimeout) {
  options_.wait_timeout = absl::ZeroDuration();
  Gate gate;
  Counter entered;
  std::atomic<int> loads{0};
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (++loads > 1) {
          entered.Increment();
          gate.Wait();
        }
        return absl::StrCat("v", loads.load());
      },
      options_);
  ASSERT_EQ(*cache.Get("k"), "v1");
  clock_.Advance(absl::Seconds(11));  // Expired, still kept as a fallback.
  std::thread leader([&] { EXPECT_EQ(*cache.Get("k"), "v2"); });
  ASSERT_TRUE(entered.WaitFor(1));
  EXPECT_EQ(*cache.Get("k"), "v1");
  EXPECT_EQ(cache.stats().stale_fallbacks, 1u);
  EXPECT_EQ(cache.stats().wait_timeouts, 1u);
  gate.Open();
  leader.join();
}

TEST_F(PolicyInCache, MaxConcurrentLoadsBoundsForegroundLoads) {
  options_.max_concurrent_loads = 2;
  options_.wait_timeout = absl::Minutes(1);
  std::atomic<int> running{0}, peak{0};
  Cache<int, int, SingleFlight> cache(
      [&](const int& key) -> absl::StatusOr<int> {
        const int now = ++running;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --running;
        return key;
      },
      options_);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) EXPECT_TRUE(cache.Get(t * 100 + i).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(peak, 2);
  EXPECT_EQ(cache.stats().loads, 400u);
}

TEST_F(PolicyInCache, RefreshWithoutAFreeSlotIsSkippedAndRetriedLater) {
  options_.max_concurrent_loads = 1;
  options_.wait_timeout = absl::Minutes(1);
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SoftTtl> cache(BusyLoader(gate, entered),
                                                 options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(11));
  std::thread busy([&] { EXPECT_TRUE(cache.Get("busy").ok()); });
  ASSERT_TRUE(entered.WaitFor(1));  // The only slot is taken.
  EXPECT_EQ(*cache.Get("k"), "k");  // Stale served ...
  EXPECT_EQ(cache.stats().refreshes_skipped, 1u);
  EXPECT_EQ(executor_.pending(), 0u);  // ... and no refresh queued.
  gate.Open();
  busy.join();
  EXPECT_EQ(*cache.Get("k"), "k");
  EXPECT_EQ(executor_.pending(), 1u);  // Tried again on a later hit.
}

TEST_F(PolicyInCache, ForegroundLoadWithoutASlotTimesOut) {
  options_.max_concurrent_loads = 1;
  options_.wait_timeout = absl::ZeroDuration();
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SingleFlight> cache(BusyLoader(gate, entered),
                                                      options_);
  std::thread busy([&] { EXPECT_TRUE(cache.Get("busy").ok()); });
  ASSERT_TRUE(entered.WaitFor(1));
  EXPECT_EQ(cache.Get("k").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache.loads_in_flight(), 1u);  // Only "busy".
  gate.Open();
  busy.join();
  EXPECT_EQ(*cache.Get("k"), "k");
}

TEST_F(PolicyInCache, ALoadThatNeedsASlotTakesTheOneAQueuedRefreshReserved) {
  options_.max_concurrent_loads = 1;
  options_.wait_timeout = absl::ZeroDuration();
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SoftTtl> cache(BusyLoader(gate, entered),
                                                 options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(*cache.Get("k"), "k");  // Stale; its refresh reserves the slot.
  EXPECT_EQ(executor_.pending(), 1u);
  // Not turned away while the executor has not even started that refresh.
  EXPECT_EQ(*cache.Get("other"), "other");
  // The slot is free again when the refresh starts: it runs.
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(cache.stats().loads, 3u);
  // Again, but the load that took the reservation still runs when the
  // refresh starts: the refresh is skipped, and the key stays refreshable.
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(*cache.Get("k"), "k");
  std::thread busy([&] { EXPECT_EQ(*cache.Get("busy"), "busy"); });
  ASSERT_TRUE(entered.WaitFor(1));
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(cache.stats().refreshes_skipped, 1u);
  EXPECT_EQ(cache.loads_in_flight(), 1u);  // Only "busy".
  gate.Open();
  busy.join();
  EXPECT_EQ(*cache.Get("k"), "k");
  EXPECT_EQ(executor_.pending(), 1u);  // Asked for again.
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(cache.stats().loads, 5u);
}

TEST_F(PolicyInCache, AGetAsyncLoadQueuedBeforeARefreshIsNotStalledByIt) {
  options_.max_concurrent_loads = 1;
  options_.wait_timeout = absl::ZeroDuration();
  Cache<std::string, std::string, SoftTtl> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(11));
  cache.GetAsync("a", [](const absl::StatusOr<std::string>&) {});
  EXPECT_EQ(*cache.Get("k"), "k");  // Its refresh, queued after "a".
  // "a" runs first, and takes the refresh's reservation rather than fail
  // for want of a slot; the refresh then finds the slot free again.
  EXPECT_EQ(executor_.RunAll(), 2u);
  EXPECT_EQ(cache.GetIfPresent("a"), "a");
  EXPECT_EQ(cache.stats().loads, 3u);
  EXPECT_EQ(cache.stats().refreshes_skipped, 0u);
}

TEST_F(PolicyInCache, ARefreshQueuedPastTheMaximumLoadAgeStillHoldsItsSlot) {
  options_.max_concurrent_loads = 1;
  options_.max_load_age = absl::Seconds(5);
  Cache<std::string, std::string, SoftTtl> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  ASSERT_TRUE(cache.Get("k2").ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(*cache.Get("k"), "k");  // Its refresh reserves the only slot.
  // Queued longer than max_load_age: not a hung load, so its slot is not
  // given to the next refresh (two would then run with a limit of one).
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(*cache.Get("k2"), "k2");
  EXPECT_EQ(cache.stats().refreshes_skipped, 1u);
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(cache.stats().loads, 3u);
}

}  // namespace
}  // namespace paddock
