// File: paddock/testing/policy_contract.h
// -----------------------------------------------------------------------------
// The behaviour every refresh policy must give a `paddock::Cache`, written once
// as GoogleTest type-parameterised suites, so that a policy of your own is
// checked by the same tests as the four built in (as abseil's
// `unordered_map_lookup_test.h` is instantiated for every map):
//
//   // my_policy_test.cc, linked with GTest::gtest_main and GTest::gmock.
//   #include "paddock/testing/policy_contract.h"
//   #include "my_policy.h"
//
//   namespace paddock::testing {
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyPolicy, PolicyContract,
//                                  ::testing::Types<my::MyPolicy>);
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyPolicy, PolicyStress,
//                                  ::testing::Types<my::MyPolicy>);
//   }  // namespace paddock::testing
//
// Instantiate inside `paddock::testing`, where the suites are declared, and
// spell GoogleTest's namespace `::testing` there.
//
//  - `PolicyContract`: hits, loads, writes, loader faults, slow and hung
//    loads, recursive loads, destruction with work pending, options at their
//    edges. Time moves only when a test says so (`ManualClock`), background
//    refreshes run only when a test says so (`ManualExecutor`); real threads
//    only where a caller must block. Must be instantiated.
//  - `PolicyStress`: 2 to 16 real threads for `PADDOCK_STRESS_MS` milliseconds
//    per thread count (default 500), checking invariants on every call.
//    Optional.
//
// Needs GoogleTest and GoogleMock (link them yourself: paddock does not), and a
// policy `P` that satisfies `paddock::RefreshPolicy` and is
// default-constructible: the suites test `P{}`. To check a configured policy,
// give the configuration a type:
//
//   struct ShortStale : paddock::SoftTtl {
//     ShortStale() : SoftTtl{.stale_for = absl::Seconds(5)} {}
//   };
//
// The suites do not know the policy's type. Where behaviour depends on it they
// branch on `P::kCoalesceLoads` and on what `P{}` declares (`PolicyProfile`):
// how long a value stays fresh and is kept, and whether and when a hit serves
// it while refreshing it in the background. The cache under test runs with
// `Options::ttl` = 10 s unless a test says otherwise.
//
// Every lookup goes through the fixtures' `Get` (see `PolicyContractTest`),
// the one place to change when the contract is run over another lookup API.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"
#include "paddock/testing/sync.h"

namespace paddock::testing {

// -----------------------------------------------------------------------------
// Test doubles the suites share. Usable in your own tests; not a stable API.

// How long a call may take beyond what it is allowed to wait, on a loaded
// 2-core machine under a sanitizer. Generous: the suites prove that nobody
// waits for a hung load, not how fast an answer comes.
inline constexpr absl::Duration kMargin = absl::Seconds(5);

// How long a test waits for something that should happen at once before it
// fails instead of hanging.
inline constexpr std::chrono::seconds kNoHang{30};

// What a `Backend` does on its next calls.
enum class Fault {
  kNone,        // Returns "<key>#<call>".
  kError,       // Returns UnavailableError("backend down: <key>").
  kThrowStd,    // Throws std::runtime_error("disk on fire: <key>").
  kThrowOther,  // Throws an int.
  kHang,        // Blocks until Release(), then acts as the resume fault.
  kFlap,        // Odd calls fail as kError, even calls succeed.
};

// Backend
//
// A loader the tests break on purpose. Values name the key and the call
// ("k#3"), so a test can tell which load produced what a caller got. Each
// call takes `load_time` on the test's ManualClock. Thread-safe.
class Backend {
 public:
  explicit Backend(ManualClock* clock) : clock_(clock) {}
  // Lets a hung call return, so a failing test ends instead of hanging.
  ~Backend() { release_.Open(); }

  absl::StatusOr<std::string> Load(const std::string& key) {
    const int call = calls_.fetch_add(1) + 1;
    const int64_t load_nanos = load_nanos_.load();
    if (load_nanos > 0) clock_->Advance(absl::Nanoseconds(load_nanos));
    Fault fault = fault_.load();
    if (fault == Fault::kHang) {
      hung_.Increment();
      release_.Wait();
      fault = resume_fault_.load();
    }
    switch (fault) {
      case Fault::kNone:
      case Fault::kHang:
        break;
      case Fault::kError:
        return absl::UnavailableError(absl::StrCat("backend down: ", key));
      case Fault::kThrowStd:
        throw std::runtime_error(absl::StrCat("disk on fire: ", key));
      case Fault::kThrowOther:
        throw 42;
      case Fault::kFlap:
        if (call % 2 == 1) {
          return absl::UnavailableError(absl::StrCat("backend down: ", key));
        }
        break;
    }
    return absl::StrCat(key, "#", call);
  }

  // `Load` as the loader of a `CacheType`.
  template <typename CacheType>
  typename CacheType::Loader Loader() {
    return [this](const std::string& key) { return Load(key); };
  }

  void set_fault(Fault fault) { fault_ = fault; }
  // What a hung call does once released.
  void set_resume_fault(Fault fault) { resume_fault_ = fault; }
  void set_load_time(absl::Duration d) {
    load_nanos_ = absl::ToInt64Nanoseconds(d);
  }
  // Returns once `n` calls in all have hung.
  bool WaitUntilHung(int n) { return hung_.WaitFor(n); }
  // Lets every hung call, and every later kHang call, return.
  void Release() { release_.Open(); }
  int calls() const { return calls_.load(); }

 private:
  ManualClock* const clock_;
  std::atomic<Fault> fault_{Fault::kNone};
  std::atomic<Fault> resume_fault_{Fault::kNone};
  std::atomic<int64_t> load_nanos_{0};
  std::atomic<int> calls_{0};
  Counter hung_;
  Gate release_;
};

// ReplaceableExecutor
//
// A ManualExecutor the test can throw away with its queued tasks, as an
// executor that shuts down does. Thread-safe.
class ReplaceableExecutor final : public Executor {
 public:
  void Schedule(Task task) override { Current()->Schedule(std::move(task)); }
  bool RunOne() { return Current()->RunOne(); }
  size_t RunAll() { return Current()->RunAll(); }
  size_t pending() { return Current()->pending(); }

  // Destroys the current ManualExecutor, and with it every task queued on
  // it, and starts a new one. Returns how many tasks were dropped.
  size_t DropAll() {
    std::shared_ptr<ManualExecutor> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::exchange(current_, std::make_shared<ManualExecutor>());
    }
    const size_t dropped = old->pending();
    old.reset();
    return dropped;
  }

 private:
  std::shared_ptr<ManualExecutor> Current() {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

  std::mutex mu_;
  std::shared_ptr<ManualExecutor> current_ = std::make_shared<ManualExecutor>();
};

// A lookup's result and how long it took on the real clock.
struct TimedResult {
  absl::StatusOr<std::string> value;
  absl::Duration took;
};

// A key whose hash is expensive and counted in `slow_hashes`.
struct SlowKey {
  std::string name;
  friend bool operator==(const SlowKey&, const SlowKey&) = default;
};

inline std::atomic<int> slow_hashes{0};

struct SlowKeyHash {
  size_t operator()(const SlowKey& key) const {
    ++slow_hashes;
    size_t h = absl::Hash<std::string>()(key.name);
    for (int i = 0; i < 20000; ++i) h = h * 0x9e3779b97f4a7c15ULL + i;
    return h;
  }
};

// A hash under which every key collides.
struct ConstantHash {
  size_t operator()(const std::string&) const { return 12345; }
};

// A write that races with a load or a refresh.
enum class Write { kInvalidate, kPut, kInvalidateAll };

inline constexpr Write kWrites[] = {Write::kInvalidate, Write::kPut,
                                    Write::kInvalidateAll};

inline std::string WriteName(Write write) {
  switch (write) {
    case Write::kInvalidate:
      return "Invalidate";
    case Write::kPut:
      return "Put";
    case Write::kInvalidateAll:
      return "InvalidateAll";
  }
  return "?";
}

// Applies `write` to `key` (a Put stores "put").
template <typename CacheType>
void Apply(Write write, CacheType& cache, const std::string& key) {
  switch (write) {
    case Write::kInvalidate:
      cache.Invalidate(key);
      break;
    case Write::kPut:
      cache.Put(key, "put");
      break;
    case Write::kInvalidateAll:
      cache.InvalidateAll();
      break;
  }
}

// -----------------------------------------------------------------------------
// What a policy declares.

// PolicyProfile
//
// What `P{}` declares about values stored with one ttl, learnt by asking it
// (`OnStore` drawn 1000 times, for policies that randomise it; `Decide` 100
// times per age) rather than by knowing its type. Ages count from the end of
// the value's load.
struct PolicyProfile {
  // The range of `Lifetime::expires_after`.
  absl::Duration shortest_fresh;
  absl::Duration longest_fresh;
  // The range of `Lifetime::keep_for`.
  absl::Duration shortest_kept;
  absl::Duration longest_kept;
  // Whether some hits serve the value and queue a background refresh; if so,
  // an age at which at least half of them do, and the load duration the
  // policy must see for it (0, or 100 ms for policies such as XFetch that
  // refresh early only values that were slow to load).
  bool refreshes = false;
  absl::Duration refresh_age = absl::ZeroDuration();
  absl::Duration refresh_load_duration = absl::ZeroDuration();
};

// A duration as the cache stores it: in whole nanoseconds.
inline absl::Duration AsStored(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return d;
  }
  return absl::Nanoseconds(absl::ToInt64Nanoseconds(d));
}

// RefreshChance()
//
// Returns the share of 100 hits, `age` after a value was stored with `ttl`
// from a load that took `load_duration`, that `policy` serves while it queues
// a background refresh. Follows the cache: past `keep_for` nothing is served,
// and before `quiet_for` the policy is not asked.
template <typename P>
double RefreshChance(const P& policy, absl::Duration ttl,
                     absl::Duration load_duration, absl::Duration age) {
  constexpr int kHits = 100;
  Random rng(1);
  int refreshes = 0;
  for (int i = 0; i < kHits; ++i) {
    const Lifetime life = policy.OnStore(ttl, load_duration, rng);
    if (age >= AsStored(life.keep_for) || age < AsStored(life.quiet_for)) {
      continue;
    }
    const absl::Time loaded_at = absl::UnixEpoch();
    const EntryState state{loaded_at, loaded_at + AsStored(life.expires_after),
                           AsStored(load_duration),
                           /*refresh_in_flight=*/false};
    if (policy.Decide(state, loaded_at + age, rng) ==
        Decision::kServeAndRefresh) {
      ++refreshes;
    }
  }
  return static_cast<double>(refreshes) / kHits;
}

// ProfileOf()
//
// Returns what `P{}` declares for values stored with `ttl`.
template <typename P>
PolicyProfile ProfileOf(absl::Duration ttl) {
  const P policy{};
  PolicyProfile profile{.shortest_fresh = absl::InfiniteDuration(),
                        .longest_fresh = absl::ZeroDuration(),
                        .shortest_kept = absl::InfiniteDuration(),
                        .longest_kept = absl::ZeroDuration()};
  Random rng(1);
  for (int i = 0; i < 1000; ++i) {
    const Lifetime life = policy.OnStore(ttl, absl::ZeroDuration(), rng);
    profile.shortest_fresh =
        std::min(profile.shortest_fresh, AsStored(life.expires_after));
    profile.longest_fresh =
        std::max(profile.longest_fresh, AsStored(life.expires_after));
    profile.shortest_kept =
        std::min(profile.shortest_kept, AsStored(life.keep_for));
    profile.longest_kept =
        std::max(profile.longest_kept, AsStored(life.keep_for));
  }
  // Where to look for a refresh: just before expiry, where early refreshes
  // are likeliest; just after it, where stale-while-revalidate serves; else
  // across what the policy keeps. First with loads that take no time.
  std::vector<absl::Duration> ages = {
      profile.shortest_fresh - absl::Milliseconds(10),
      profile.longest_fresh + absl::Seconds(1)};
  for (int i = 1; i < 100; ++i) ages.push_back(profile.longest_kept * i / 100);
  for (const absl::Duration load_duration :
       {absl::ZeroDuration(), absl::Milliseconds(100)}) {
    for (const absl::Duration age : ages) {
      if (RefreshChance(policy, ttl, load_duration, age) >= 0.5) {
        profile.refreshes = true;
        profile.refresh_age = age;
        profile.refresh_load_duration = load_duration;
        return profile;
      }
    }
  }
  return profile;
}

// -----------------------------------------------------------------------------
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

// -----------------------------------------------------------------------------
// Hits, loads and writes.

TYPED_TEST_P(PolicyContract, FreshValueIsServedWithoutCallingTheLoader) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads;
        return "value of " + key;
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "value of a");
  EXPECT_EQ(*this->Get(cache, "a"), "value of a");
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TYPED_TEST_P(PolicyContract, ExpiredValueIsLoadedAgain) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "1");
  // Past every policy's window (100 s; longer if the policy keeps values
  // longer).
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(100)));
  EXPECT_EQ(*this->Get(cache, "a"), "2");
}

// The ttl counts from the end of the load, not its start.
TYPED_TEST_P(PolicyContract, LifetimeStartsWhenTheLoadCompletes) {
  // A 5 s load, then 7 s: fresh counted from the end of the load (the
  // shortest freshness of the built-in policies is NaiveJitter's 8 s),
  // expired counted from its start (the longest is 12 s). Other policies:
  // half their shortest freshness, after a load long enough.
  const PolicyProfile& profile = this->Profile();
  const absl::Duration age = absl::Seconds(7) < profile.shortest_fresh
                                 ? absl::Seconds(7)
                                 : profile.shortest_fresh / 2;
  const absl::Duration load_time =
      std::max(absl::Seconds(5), profile.longest_fresh - age);
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        this->clock_.Advance(load_time);  // A slow load.
        return "v";
      },
      this->options_);
  ASSERT_TRUE(this->Get(cache, "a").ok());
  this->clock_.Advance(age);
  ASSERT_TRUE(this->Get(cache, "a").ok());
  EXPECT_EQ(loads, 1);
}

TYPED_TEST_P(PolicyContract, PutValueIsServedWithoutLoading) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        return "loaded";
      },
      this->options_);
  cache.Put("a", "put");
  EXPECT_EQ(*this->Get(cache, "a"), "put");
  EXPECT_EQ(cache.GetIfPresent("a"), "put");
  EXPECT_EQ(loads, 0);
}

TYPED_TEST_P(PolicyContract, InvalidateMakesTheNextGetLoad) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*this->Get(cache, "a"), "1");
  cache.Invalidate("a");
  EXPECT_EQ(cache.GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(*this->Get(cache, "a"), "2");
  cache.InvalidateAll();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*this->Get(cache, "a"), "3");
}

TYPED_TEST_P(PolicyContract, SizeNeverExceedsMaxEntries) {
  this->options_.max_entries = 10;
  typename TestFixture::StringCache cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      this->options_);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(*this->Get(cache, absl::StrCat(i)), absl::StrCat(i));
    ASSERT_LE(cache.size(), 10u);
  }
  EXPECT_EQ(cache.stats().evictions, 990u);
}

TYPED_TEST_P(PolicyContract, OneThousandConcurrentCallersOfAColdKey) {
  constexpr int kCallers = 1000;
  std::atomic<int> loads{0};
  Gate gate;
  this->options_.wait_timeout = absl::Minutes(1);
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads;
        if (TypeParam::kCoalesceLoads) gate.Wait();
        return "value of " + key;
      },
      this->options_);
  std::vector<std::thread> threads;
  std::atomic<int> correct{0};
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&] {
      absl::StatusOr<std::string> v = this->Get(cache, "exhibition");
      if (v.ok() && *v == "value of exhibition") ++correct;
    });
  }
  if (TypeParam::kCoalesceLoads) {
    // Every caller but the leader is waiting on the leader's load.
    while (cache.stats().coalesced_waits < kCallers - 1) {
      std::this_thread::yield();
    }
    gate.Open();
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(correct, kCallers);
  if (TypeParam::kCoalesceLoads) {
    EXPECT_EQ(loads, 1);
    EXPECT_EQ(cache.loads_in_flight(), 0u);
  } else {
    EXPECT_GE(loads, 1);
  }
}

// -----------------------------------------------------------------------------
// The loader returns an error, throws, or fails only sometimes.

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

// -----------------------------------------------------------------------------
// The loader is slow, or never returns until the test releases it.

TYPED_TEST_P(PolicyContract, SlowLoadTimesOutItsWaitersAndStillStores) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto leader = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = this->TimedGet(*cache, "k");
  EXPECT_LT(waiter.took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(waiter.value.status().code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_GE(waiter.took, this->options_.wait_timeout);
    const Stats s = cache->stats();
    EXPECT_EQ(s.coalesced_waits, 1u);
    EXPECT_EQ(s.wait_timeouts, 1u);
    EXPECT_EQ(s.loads, 1u);
  } else {
    EXPECT_EQ(*waiter.value, "k#2");  // Its own load.
  }
  this->backend_.Release();
  EXPECT_EQ(*leader.get(), "k#1");
  // Without coalescing: the last load to finish stores.
  EXPECT_EQ(cache->GetIfPresent("k"), "k#1");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
}

TYPED_TEST_P(PolicyContract, SlowLoadOfAnExpiredValueServesItStaleMeanwhile) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  ASSERT_EQ(*this->Get(*cache, "k"), "k#1");
  // Expired: 13 s (NaiveJitter's longest ttl is 12 s), or a second past the
  // policy's longest freshness. Kept as a fallback by SingleFlight and XFetch
  // (2·ttl); served stale while refreshed by SoftTtl.
  const absl::Duration age =
      std::max(absl::Seconds(13),
               TestFixture::Profile().longest_fresh + absl::Seconds(1));
  this->clock_.Advance(age);
  this->backend_.set_fault(Fault::kHang);
  if (TestFixture::RefreshChance(TestFixture::kTtl, absl::ZeroDuration(),
                                 age) == 1.0) {
    // Nobody waits: the stale value at once, the slow load in the background.
    const TimedResult hit = this->TimedGet(*cache, "k");
    EXPECT_EQ(*hit.value, "k#1");
    EXPECT_LT(hit.took, kMargin);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(this->backend_.WaitUntilHung(1));
    EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
    EXPECT_EQ(cache->stats().wait_timeouts, 0u);
    this->backend_.Release();
    refresh.join();
    EXPECT_EQ(*this->Get(*cache, "k"), "k#2");
    return;
  }
  auto leader = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = this->TimedGet(*cache, "k");
  EXPECT_LT(waiter.took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    if (age < TestFixture::Profile().shortest_kept) {
      EXPECT_EQ(*waiter.value, "k#1");  // Stale, at wait_timeout.
      EXPECT_EQ(cache->stats().stale_fallbacks, 1u);
    } else {
      // A policy that keeps nothing past freshness has no stale value to give.
      EXPECT_EQ(waiter.value.status().code(),
                absl::StatusCode::kDeadlineExceeded);
      EXPECT_EQ(cache->stats().stale_fallbacks, 0u);
    }
    EXPECT_EQ(cache->stats().wait_timeouts, 1u);
  } else {
    EXPECT_EQ(*waiter.value, "k#3");  // Its own load.
  }
  this->backend_.Release();
  EXPECT_EQ(*leader.get(), "k#2");
}

// The bound on a hung load (Options::max_load_age, like nginx's
// proxy_cache_lock_age): once the load is older, the next caller that needs
// the key starts a fresh load; the hung one, when it returns, answers only
// its own callers and stores nothing.
TYPED_TEST_P(PolicyContract, HungLoadStopsBlockingItsKeyAfterMaxLoadAge) {
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  absl::StatusOr<std::string> second = this->Get(*cache, "k");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
  } else {
    EXPECT_EQ(*second, "k#2");  // No coalescing: nothing to be blocked on.
  }
  this->clock_.Advance(absl::Seconds(29));
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(this->Get(*cache, "k").status().code(),
              absl::StatusCode::kDeadlineExceeded);  // Still within the bound.
    EXPECT_EQ(cache->loads_in_flight(), 1u);
  }
  this->clock_.Advance(absl::Seconds(2));  // 31 s: past max_load_age.
  const std::string fresh = absl::StrCat("k#", TestFixture::kCoalesces ? 2 : 3);
  EXPECT_EQ(*this->Get(*cache, "k"), fresh);
  EXPECT_EQ(*this->Get(*cache, "k"), fresh);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(cache->GetIfPresent("k"), fresh);
  }
}

TYPED_TEST_P(PolicyContract, HungRefreshStopsBlockingItsKeyAfterMaxLoadAge) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Seconds(20);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  this->backend_.set_fault(Fault::kHang);
  std::thread refresh([&] { this->executor_.RunOne(); });
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");  // Served while the refresh hangs.
  // Past the policy's window and past max_load_age: a foreground load.
  this->clock_.Advance(this->PastWhatThePolicyKeeps(absl::Seconds(45)));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#3");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  refresh.join();
  EXPECT_EQ(cache->GetIfPresent("k"), "k#3");  // The hung one did not store.
}

// With a load limit, a hung load holds a slot. It must not hold it past
// max_load_age, or one hung loader makes every key unusable for good.
TYPED_TEST_P(PolicyContract,
             HungLoadHoldingTheOnlyLoadSlotDoesNotWedgeTheCache) {
  this->options_.max_concurrent_loads = 1;
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(this->Get(*cache, "b").status().code(),
            absl::StatusCode::kDeadlineExceeded);  // Within the bound.
  this->clock_.Advance(absl::Seconds(31));
  const absl::StatusOr<std::string> b = this->Get(*cache, "b");
  EXPECT_TRUE(b.ok()) << b.status();
  const absl::StatusOr<std::string> a = this->Get(*cache, "a");
  EXPECT_TRUE(a.ok()) << a.status();
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
}

// -----------------------------------------------------------------------------
// Recursive loads.

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

// -----------------------------------------------------------------------------
// Invalidate, Put and InvalidateAll racing with a load and with a refresh.

TYPED_TEST_P(PolicyContract, WriteDuringAForegroundLoadWinsOverItsResult) {
  this->options_.wait_timeout = absl::Minutes(1);
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    backend.set_fault(Fault::kHang);
    auto leader = this->AsyncGet(*cache, "k");
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    std::optional<std::future<absl::StatusOr<std::string>>> waiter;
    if constexpr (TestFixture::kCoalesces) {
      waiter = this->AsyncGet(*cache, "k");
      while (cache->stats().coalesced_waits < 1) std::this_thread::yield();
    }
    Apply(write, *cache, "k");
    // A caller after the write does not join the superseded load.
    const std::string after = write == Write::kPut ? "put" : "k#2";
    EXPECT_EQ(*this->Get(*cache, "k"), after);
    backend.Release();
    EXPECT_EQ(*leader.get(), "k#1");  // Its callers still get its result ...
    if (waiter.has_value()) {
      EXPECT_EQ(*waiter->get(), "k#1");
    }
    EXPECT_EQ(cache->GetIfPresent("k"), after);  // ... but it did not store.
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

TYPED_TEST_P(PolicyContract, WriteWhileARefreshIsQueuedWinsOverItsResult) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    Apply(write, *cache, "k");
    EXPECT_EQ(this->executor_.RunAll(), 1u);
    EXPECT_EQ(backend.calls(), 2);       // The refresh still ran ...
    EXPECT_EQ(cache->GetIfPresent("k"),  // ... but did not store.
              write == Write::kPut ? std::optional<std::string>("put")
                                   : std::nullopt);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

TYPED_TEST_P(PolicyContract, WriteWhileARefreshRunsWinsOverItsResult) {
  if (!TestFixture::Refreshes()) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(WriteName(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    backend.set_fault(Fault::kHang);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    Apply(write, *cache, "k");
    const std::string after = write == Write::kPut ? "put" : "k#3";
    EXPECT_EQ(*this->Get(*cache, "k"), after);
    backend.Release();
    refresh.join();
    EXPECT_EQ(cache->GetIfPresent("k"), after);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

// -----------------------------------------------------------------------------
// Destroying the cache, or the executor, with background work pending.

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

// -----------------------------------------------------------------------------
// Options at their edges.

TYPED_TEST_P(PolicyContract, MaxEntriesOfOneHoldsOnlyTheLatestEntry) {
  this->options_.max_entries = 1;
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "a"), "a#1");
  EXPECT_EQ(*this->Get(*cache, "b"), "b#2");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(cache->GetIfPresent("b"), "b#2");
  cache->Put("c", "put");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), "put");
  this->backend_.set_fault(Fault::kError);
  EXPECT_FALSE(this->Get(*cache, "d").ok());  // A remembered error is an entry.
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), std::nullopt);
  EXPECT_EQ(cache->stats().evictions, 3u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*this->Get(*cache, "c"), "c#4");
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract, TtlOfOneNanosecondReloadsAfterEveryTick) {
  this->options_.ttl = absl::Nanoseconds(1);
  // Whether the policy serves a 1 ns old value while refreshing it (SoftTtl),
  // or loads it anew (the others).
  const double stale_then_refreshed = TestFixture::RefreshChance(
      absl::Nanoseconds(1), absl::ZeroDuration(), absl::Nanoseconds(1));
  if (stale_then_refreshed != 0.0 && stale_then_refreshed != 1.0) {
    GTEST_SKIP() << "the policy refreshes a 1 ns old value only sometimes";
  }
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  for (int tick = 1; tick <= 100; ++tick) {
    this->clock_.Advance(absl::Nanoseconds(1));
    absl::StatusOr<std::string> v = this->Get(*cache, "k");
    ASSERT_TRUE(v.ok()) << v.status();
    if (stale_then_refreshed == 1.0) {
      EXPECT_EQ(*v, absl::StrCat("k#", tick));  // Stale; refresh queued.
      EXPECT_EQ(this->executor_.RunAll(), 1u);
    } else {
      EXPECT_EQ(*v, absl::StrCat("k#", tick + 1));
    }
  }
  EXPECT_EQ(this->backend_.calls(), 101);
  EXPECT_LE(cache->size(), 1u);
}

TYPED_TEST_P(PolicyContract, InfiniteTtlNeverExpires) {
  this->options_.ttl = absl::InfiniteDuration();
  auto cache = this->MakeCache();
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  this->clock_.Advance(absl::Hours(24 * 365 * 100));
  EXPECT_EQ(*this->Get(*cache, "k"), "k#1");
  EXPECT_EQ(this->executor_.pending(), 0u);
}

TYPED_TEST_P(PolicyContract, WaitTimeoutZeroAnswersAtOnceWhileALoadRuns) {
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = this->TimedGet(*cache, "k");
  EXPECT_LT(r.took, kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(r.value.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(cache->stats().wait_timeouts, 1u);
  } else {
    EXPECT_EQ(*r.value, "k#2");
  }
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
}

TYPED_TEST_P(PolicyContract, WaitTimeoutZeroWithoutAFreeLoadSlotAnswersAtOnce) {
  this->options_.wait_timeout = absl::ZeroDuration();
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = this->TimedGet(*cache, "b");
  EXPECT_LT(r.took, kMargin);
  EXPECT_EQ(r.value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache->loads_in_flight(), TestFixture::kCoalesces ? 1u : 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
  EXPECT_EQ(*this->Get(*cache, "b"), "b#2");
}

// A wait_timeout far beyond any deadline (a thousand years) means "wait for
// the load", not "time out at once" through an overflow of now + timeout.
TYPED_TEST_P(PolicyContract, HugeWaitTimeoutWaitsForTheLoad) {
  this->options_.wait_timeout = absl::Hours(24 * 365 * 1000);
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = this->AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  // Waits for the load (coalescing) or for the load slot (every policy).
  auto same_key = this->AsyncGet(*cache, "k");
  auto other_key = this->AsyncGet(*cache, "other");
  EXPECT_EQ(same_key.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  EXPECT_EQ(other_key.wait_for(std::chrono::milliseconds(1)),
            std::future_status::timeout);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
  const absl::StatusOr<std::string> same = same_key.get();
  const absl::StatusOr<std::string> other = other_key.get();
  ASSERT_TRUE(same.ok()) << same.status();
  ASSERT_TRUE(other.ok()) << other.status();
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(*same, "k#1");
  }
  EXPECT_THAT(*other, ::testing::HasSubstr("other#"));
}

// -----------------------------------------------------------------------------
// Keys and hashes.

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

REGISTER_TYPED_TEST_SUITE_P(
    PolicyContract, FreshValueIsServedWithoutCallingTheLoader,
    ExpiredValueIsLoadedAgain, LifetimeStartsWhenTheLoadCompletes,
    PutValueIsServedWithoutLoading, InvalidateMakesTheNextGetLoad,
    SizeNeverExceedsMaxEntries, OneThousandConcurrentCallersOfAColdKey,
    LoaderErrorReachesTheCallerAndNothingIsStored,
    LoaderErrorIsRememberedForErrorTtlThenLoadedAgain,
    LoaderThrowingAStdExceptionBecomesInternalWithWhat,
    LoaderThrowingSomethingElseBecomesInternal,
    LoaderFailureReachesEveryWaiterOfThatLoad,
    FailedRefreshKeepsServingTheValueAndRetries,
    FailedRefreshWithErrorTtlKeepsServingTheValue,
    FlappingLoaderServesEachGoodValueAndCachesNoError,
    RecoversAtOnceAfterALongFailureStreak,
    LongFailureStreakWithErrorTtlLoadsOncePerErrorTtl,
    SlowLoadTimesOutItsWaitersAndStillStores,
    SlowLoadOfAnExpiredValueServesItStaleMeanwhile,
    HungLoadStopsBlockingItsKeyAfterMaxLoadAge,
    HungRefreshStopsBlockingItsKeyAfterMaxLoadAge,
    HungLoadHoldingTheOnlyLoadSlotDoesNotWedgeTheCache,
    RecursiveGetOnTheLoadersThreadFailsForItsOwnKey,
    RecursiveGetFromARefreshGetsTheStoredValue,
    RecursiveGetThroughAnotherThreadIsBoundedByWaitTimeout,
    WriteDuringAForegroundLoadWinsOverItsResult,
    WriteWhileARefreshIsQueuedWinsOverItsResult,
    WriteWhileARefreshRunsWinsOverItsResult,
    DestroyingTheCacheDropsRefreshesQueuedOnAnExecutor,
    DestroyingTheCacheDropsRefreshesQueuedOnAThreadPool,
    DestroyingTheCacheWaitsForARunningRefresh,
    DroppedRefreshEndsItsLoadWithCancelled,
    CallerNeedingAValueRunsTheRefreshQueuedForIt,
    MaxEntriesOfOneHoldsOnlyTheLatestEntry,
    TtlOfOneNanosecondReloadsAfterEveryTick, InfiniteTtlNeverExpires,
    WaitTimeoutZeroAnswersAtOnceWhileALoadRuns,
    WaitTimeoutZeroWithoutAFreeLoadSlotAnswersAtOnce,
    HugeWaitTimeoutWaitsForTheLoad, HugeKeysAreStoredFoundAndDetectedIntact,
    ExpensiveHashIsComputedOnceOnAHit, CollidingHashesKeepKeysApart);

// -----------------------------------------------------------------------------
// Stress: real threads, 2 to 16 of them, for a bounded time, with invariants
// checked on every call rather than a result checked at the end:
//  - at most one load per key per expiry, and never two loads of one key at
//    once, for the coalescing policies;
//  - every value returned was produced by the loader (or a Put) for that key;
//  - size() <= max_entries;
//  - every Get returns within wait_timeout plus the longest load plus a
//    margin;
//  - the stats agree with what the loader and the callers saw.

inline constexpr int kStressThreadCounts[] = {2, 4, 8, 16};

// How long the end of a stress run may take to quiesce before the test fails.
inline constexpr std::chrono::seconds kQuiesce{30};

// How long each stress run lasts: PADDOCK_STRESS_MS, default 500 ms.
inline std::chrono::milliseconds StressRunTime() {
  if (const char* ms = std::getenv("PADDOCK_STRESS_MS")) {
    int value = 0;
    if (absl::SimpleAtoi(ms, &value) && value > 0) {
      return std::chrono::milliseconds(value);
    }
  }
  return std::chrono::milliseconds(500);
}

// A small fast PRNG per thread (xorshift64*).
class StressRng {
 public:
  explicit StressRng(uint64_t seed)
      : state_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dULL;
  }
  int Below(int n) {
    return static_cast<int>(Next() % static_cast<uint64_t>(n));
  }

 private:
  uint64_t state_;
};

// Keeps the largest value seen.
inline void RaiseTo(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value)) {
  }
}

// What a stressed loader does on one call, decided by the call number.
enum class StressLoad {
  kValue,
  kSlowValue,     // 2 ms: waiters wait for it.
  kLateValue,     // 30 ms: longer than wait_timeout.
  kAncientValue,  // 80 ms: older than max_load_age before it returns.
  kError,
  kThrowStd,
  kThrowOther,
};

inline constexpr auto kSlowLoad = std::chrono::milliseconds(2);
inline constexpr auto kLateLoad = std::chrono::milliseconds(30);
inline constexpr auto kAncientLoad = std::chrono::milliseconds(80);

inline StressLoad StressLoadOf(uint64_t call) {
  const uint64_t roll = (call * 0x9e3779b97f4a7c15ULL) >> 54;  // 0..1023
  if (roll < 80) return StressLoad::kError;
  if (roll < 120) return StressLoad::kThrowStd;
  if (roll < 140) return StressLoad::kThrowOther;
  if (roll < 240) return StressLoad::kSlowValue;
  if (roll < 260) return StressLoad::kLateValue;
  if (roll < 265) return StressLoad::kAncientValue;
  return StressLoad::kValue;
}

// PolicyStress
//
// The fixture of the stress suite: each test builds its own caches.
template <typename P>
class PolicyStress : public PolicyContractTest {
  static_assert(RefreshPolicy<P>, "PolicyStress needs a RefreshPolicy");
};

TYPED_TEST_SUITE_P(PolicyStress);

// Optional: instantiating only PolicyContract is not an error.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PolicyStress);

// Readers hammer a few hot keys while the ManualClock steps through expiries.
// With coalescing there is never more than one load of a key at a time, and
// no more than one per expiry; for every policy every value is the loader's
// for that key, and a thread never sees a key's value go back in time.
TYPED_TEST_P(PolicyStress, HotKeysLoadOncePerExpiryAndValuesNeverGoBack) {
  constexpr int kKeys = 16;
  constexpr absl::Duration kTtl = absl::Seconds(10);
  const auto run_time = StressRunTime();
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    ManualClock clock;
    ThreadPool refreshes(2);
    std::array<std::atomic<int>, kKeys> running{}, loads{};
    std::atomic<int> overlapping{0}, wrong{0}, went_back{0}, failed{0};
    Cache<int, std::string, TypeParam> cache(
        [&](const int& key) -> absl::StatusOr<std::string> {
          if (running[key].fetch_add(1) != 0) ++overlapping;
          const int generation = ++loads[key];
          std::this_thread::yield();  // Widen the window for a second load.
          running[key].fetch_sub(1);
          return absl::StrCat(key, ":", generation);
        },
        Options{.ttl = kTtl,
                .wait_timeout = absl::Minutes(1),
                .clock = &clock,
                .executor = &refreshes,
                .seed = 1,
                .max_load_age = absl::InfiniteDuration()});
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    for (int t = 0; t < threads; ++t) {
      readers.emplace_back([&, t] {
        StressRng rng(t + 1);
        std::array<int, kKeys> last_seen{};
        while (!stop.load(std::memory_order_relaxed)) {
          const int key = rng.Below(kKeys);
          const absl::StatusOr<std::string> v = this->Get(cache, key);
          if (!v.ok()) {
            ++failed;
            continue;
          }
          const std::string prefix = absl::StrCat(key, ":");
          int generation = 0;
          if (!absl::StartsWith(*v, prefix) ||
              !absl::SimpleAtoi(absl::string_view(*v).substr(prefix.size()),
                                &generation) ||
              generation < 1 || generation > loads[key].load()) {
            ++wrong;
            continue;
          }
          if (generation < last_seen[key]) ++went_back;
          last_seen[key] = generation;
        }
      });
    }
    // Step the clock through expiries while the readers run.
    int steps = 0;
    const auto deadline = std::chrono::steady_clock::now() + run_time;
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      clock.Advance(kTtl);
      ++steps;
    }
    stop = true;
    for (std::thread& t : readers) t.join();
    // A background refresh may still be queued or running: let it finish
    // (no writes here, so every refresh stays registered until it does).
    const auto quiet_by = std::chrono::steady_clock::now() + kQuiesce;
    while (cache.loads_in_flight() != 0 &&
           std::chrono::steady_clock::now() < quiet_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(cache.loads_in_flight(), 0u);

    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(failed, 0);
    int total_loads = 0;
    for (const auto& n : loads) total_loads += n.load();
    EXPECT_EQ(cache.stats().loads, static_cast<uint64_t>(total_loads));
    if constexpr (TypeParam::kCoalesceLoads) {
      EXPECT_EQ(overlapping, 0);
      EXPECT_EQ(went_back, 0);
      for (int key = 0; key < kKeys; ++key) {
        EXPECT_LE(loads[key].load(), steps + 1) << "key " << key;
      }
    }
  }
}

// Real time and every operation at once: short ttl, small capacity, failing
// and slow loads, Put, Invalidate, InvalidateAll, a load limit and a short
// max_load_age.
TYPED_TEST_P(PolicyStress, MixedOperationsWithFailingLoadsKeepEveryInvariant) {
  constexpr int kKeys = 64;
  constexpr size_t kMaxEntries = 32;
  const absl::Duration wait_timeout = absl::Milliseconds(20);
  const auto run_time = StressRunTime();
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    std::atomic<uint64_t> calls{0}, failures{0};
    std::atomic<uint64_t> gets{0};
    std::atomic<int> wrong{0}, unexpected_error{0}, oversize{0}, too_slow{0};
    std::atomic<int64_t> slowest_nanos{0};
    std::optional<Cache<int, std::string, TypeParam>> cache;
    cache.emplace(
        [&](const int& key) -> absl::StatusOr<std::string> {
          const uint64_t call = ++calls;
          switch (StressLoadOf(call)) {
            case StressLoad::kError:
              ++failures;
              return absl::UnavailableError(
                  absl::StrCat("backend down: ", key));
            case StressLoad::kThrowStd:
              ++failures;
              throw std::runtime_error(absl::StrCat("disk on fire: ", key));
            case StressLoad::kThrowOther:
              ++failures;
              throw call;
            case StressLoad::kSlowValue:
              std::this_thread::sleep_for(kSlowLoad);
              break;
            case StressLoad::kLateValue:
              std::this_thread::sleep_for(kLateLoad);
              break;
            case StressLoad::kAncientValue:
              std::this_thread::sleep_for(kAncientLoad);
              break;
            case StressLoad::kValue:
              break;
          }
          return absl::StrCat(key, "#", call);
        },
        Options{.ttl = absl::Milliseconds(5),
                .max_entries = kMaxEntries,
                .wait_timeout = wait_timeout,
                .seed = 7,
                .error_ttl = absl::Microseconds(500),
                .max_concurrent_loads = 4,
                .max_load_age = absl::Milliseconds(50)});
    // A value is the loader's for the key ("7#123") or a Put's ("7@put").
    auto valid = [&](int key, const std::string& value) {
      return absl::StartsWith(value, absl::StrCat(key, "#")) ||
             value == absl::StrCat(key, "@put");
    };
    const absl::Duration bound =
        wait_timeout + absl::FromChrono(kAncientLoad) + kMargin;
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        StressRng rng(t + 100);
        while (!stop.load(std::memory_order_relaxed)) {
          const int key = rng.Below(kKeys);
          const int op = rng.Below(100);
          if (op < 80) {
            ++gets;
            const auto start = std::chrono::steady_clock::now();
            const absl::StatusOr<std::string> v = this->Get(*cache, key);
            const auto took = std::chrono::steady_clock::now() - start;
            RaiseTo(slowest_nanos,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(took)
                        .count());
            if (absl::FromChrono(took) > bound) ++too_slow;
            if (v.ok()) {
              if (!valid(key, *v)) ++wrong;
            } else if (v.status().code() != absl::StatusCode::kUnavailable &&
                       v.status().code() != absl::StatusCode::kInternal &&
                       v.status().code() !=
                           absl::StatusCode::kDeadlineExceeded) {
              ++unexpected_error;
              ADD_FAILURE() << v.status();
            }
          } else if (op < 88) {
            const std::optional<std::string> v = cache->GetIfPresent(key);
            if (v.has_value() && !valid(key, *v)) ++wrong;
          } else if (op < 94) {
            cache->Put(key, absl::StrCat(key, "@put"));
          } else if (op < 99) {
            cache->Invalidate(key);
          } else {
            cache->InvalidateAll();
          }
          if (cache->size() > kMaxEntries) ++oversize;
        }
      });
    }
    std::this_thread::sleep_for(run_time);
    stop = true;
    for (std::thread& t : workers) t.join();

    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(unexpected_error, 0);
    EXPECT_EQ(oversize, 0);
    EXPECT_EQ(too_slow, 0) << "slowest Get: "
                           << absl::Nanoseconds(slowest_nanos.load());
    // Background refreshes still queued or running finish (or are dropped by
    // the destructor); after that the counters are final.
    const auto quiet_by = std::chrono::steady_clock::now() + kQuiesce;
    while (cache->loads_in_flight() != 0 &&
           std::chrono::steady_clock::now() < quiet_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(cache->loads_in_flight(), 0u);
    const Stats s = cache->stats();
    cache.reset();
    EXPECT_EQ(s.loads, calls.load());
    EXPECT_EQ(s.load_failures, failures.load());
    const uint64_t answered =
        s.hits + s.stale_hits + s.negative_hits + s.misses;
    EXPECT_LE(answered, gets.load());
    EXPECT_GE(answered + s.stale_fallbacks, gets.load());
    EXPECT_LE(s.coalesced_waits, s.misses);
    EXPECT_LE(s.wait_timeouts, s.coalesced_waits);
    ::testing::Test::RecordProperty(
        absl::StrCat("slowest_get_us_", threads),
        static_cast<int>(slowest_nanos.load() / 1000));
  }
}

REGISTER_TYPED_TEST_SUITE_P(PolicyStress,
                            HotKeysLoadOncePerExpiryAndValuesNeverGoBack,
                            MixedOperationsWithFailingLoadsKeepEveryInvariant);

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_H_
