// Invariants of the engine that no contract test reaches, one scenario each
// through the public API, grouped by the stage they guard: shards (nothing
// runs under their lock), refresh (no wait on a queued task; the entry
// decided on is the one refreshed), completion (an uncoalesced load stores
// unless its own key was written) and entries (alignment, spread over
// shards). Exception safety is in exception_safety_test.cc; the clock, epoch
// and thread-pool cases beside their headers' tests.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/mutex.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;

// == Shards: nothing runs under a shard lock (value and key destructors,
// listeners).

// Counts destructions of values made while the thread held a paddock mutex.
std::atomic<int> destroyed_under_lock{0};
std::atomic<int> destroyed{0};

struct Watched {
  explicit Watched(uint64_t v = 0) : v(v) {}
  Watched(const Watched&) = default;
  Watched& operator=(const Watched&) = default;
  ~Watched() {
    destroyed.fetch_add(1, std::memory_order_relaxed);
    if (internal::LocksHeld() != 0) destroyed_under_lock.fetch_add(1);
  }
  uint64_t v;
};

TEST(CacheRegression, ValuesAreNeverDestroyedUnderTheShardLock) {
  // Puts that grow the table (replacing its slot array), replace values and
  // evict, with reclamation in between: growth must retire the old slot
  // array after the lock, since the retirement can free other entries.
  destroyed = destroyed_under_lock = 0;
  {
    Cache<uint64_t, Watched, SingleFlight> cache(
        [](const uint64_t& k) -> absl::StatusOr<Watched> { return Watched(k); },
        Options{.max_entries = 256, .shards = 1});
    for (uint64_t round = 0; round < 20; ++round) {
      for (uint64_t k = 0; k < 600; ++k) cache.Put(k % 400, Watched(k));
      internal::TryReclaim();
    }
  }
  internal::TryReclaim();
  EXPECT_GT(destroyed.load(), 5000);
  EXPECT_EQ(destroyed_under_lock.load(), 0);
}

// Counts listener calls made while the thread held a paddock mutex.
class LockCheckingListener : public Listener {
 public:
  void OnLoadStart(LoadKind) override { Check(); }
  void OnLoadFinish(LoadKind, absl::Duration, const absl::Status&) override {
    Check();
  }
  void OnStaleServed(absl::Duration) override {
    stale.fetch_add(1);
    Check();
  }
  void OnCoalescedWait() override { Check(); }
  void OnWaitTimeout() override { Check(); }
  void OnEviction() override { Check(); }

  std::atomic<int> calls{0};
  std::atomic<int> under_lock{0};
  std::atomic<int> stale{0};

 private:
  void Check() {
    calls.fetch_add(1);
    if (internal::LocksHeld() != 0) under_lock.fetch_add(1);
  }
};

// SoftTtl, except that the first decision past the quiet window says "load":
// the caller then re-examines the entry under the shard lock and, the second
// time, is told to serve it stale. That is the path where the entry changed
// between the lock-free look and the locked re-check.
struct ChangesItsMind {
  static constexpr bool kCoalesceLoads = true;
  std::shared_ptr<std::atomic<int>> decisions =
      std::make_shared<std::atomic<int>>(0);

  Lifetime OnStore(absl::Duration ttl, absl::Duration d, Random& r) const {
    return SoftTtl{}.OnStore(ttl, d, r);
  }
  Decision Decide(const EntryState& s, absl::Time now, Random& r) const {
    if (decisions->fetch_add(1) == 0) return Decision::kLoad;
    return SoftTtl{}.Decide(s, now, r);
  }
};

TEST(CacheRegression, ListenersAreNeverCalledUnderTheShardLock) {
  ManualClock clock;
  ManualExecutor executor;
  LockCheckingListener listener;
  ChangesItsMind policy;
  Cache<std::string, std::string, ChangesItsMind> cache(
      [](const std::string& k) -> absl::StatusOr<std::string> { return k; },
      Options{.ttl = absl::Seconds(10),
              .max_entries = 1,
              .shards = 1,
              .clock = &clock,
              .executor = &executor,
              .listener = &listener},
      policy);
  ASSERT_TRUE(cache.Get("k").ok());
  clock.Advance(absl::Seconds(11));  // Stale, inside SoftTtl's window.
  ASSERT_EQ(*cache.Get("k"), "k");   // Served stale from the locked path.
  EXPECT_EQ(policy.decisions->load(), 2);
  EXPECT_EQ(listener.stale.load(), 1);
  executor.RunAll();
  ASSERT_TRUE(cache.Get("other").ok());  // Evicts "k".
  EXPECT_GE(listener.calls.load(), 6);
  EXPECT_EQ(listener.under_lock.load(), 0);
}

// Counts destructions of keys made while the thread held a paddock mutex.
std::atomic<int> keys_destroyed_under_lock{0};

struct WatchedKey {
  explicit WatchedKey(std::string v) : s(std::move(v)) {}
  WatchedKey(const WatchedKey&) = default;
  WatchedKey& operator=(const WatchedKey&) = default;
  ~WatchedKey() {
    if (internal::LocksHeld() != 0) keys_destroyed_under_lock.fetch_add(1);
  }
  bool operator==(const WatchedKey& o) const { return s == o.s; }
  template <typename H>
  friend H AbslHashValue(H h, const WatchedKey& k) {
    return H::combine(std::move(h), k.s);
  }
  std::string s;
};

// SoftTtl, except that while `loads` is above 0 a decision says "load".
struct LoadsWhenTold {
  static constexpr bool kCoalesceLoads = true;
  std::shared_ptr<std::atomic<int>> loads =
      std::make_shared<std::atomic<int>>(0);

  Lifetime OnStore(absl::Duration ttl, absl::Duration d, Random& r) const {
    return SoftTtl{}.OnStore(ttl, d, r);
  }
  Decision Decide(const EntryState& s, absl::Time now, Random& r) const {
    if (loads->load() > 0) {
      loads->fetch_sub(1);
      return Decision::kLoad;
    }
    return SoftTtl{}.Decide(s, now, r);
  }
};

// A refresh prepared (with its copy of the key) and then not needed, since
// the key has a load already, is destroyed after the shard's lock.
TEST(CacheRegression, AnUnneededRefreshDestroysItsKeyAfterTheLock) {
  ManualClock clock;
  ManualExecutor executor;
  LoadsWhenTold policy;
  Cache<WatchedKey, std::string, LoadsWhenTold> cache(
      [](const WatchedKey& k) -> absl::StatusOr<std::string> { return k.s; },
      Options{.ttl = absl::Seconds(10),
              .wait_timeout = absl::InfiniteDuration(),  // No timer thread.
              .clock = &clock,
              .executor = &executor},
      policy);
  const WatchedKey key("k");
  ASSERT_TRUE(cache.Get(key).ok());
  clock.Advance(absl::Seconds(11));  // SoftTtl's stale window.
  // GetAsync's decisions say "load": it registers a foreground load, queued
  // on the executor.
  policy.loads->store(2);
  cache.GetAsync(key, [](const absl::StatusOr<std::string>&) {});
  ASSERT_EQ(executor.pending(), 1u);
  // A Get decides serve-and-refresh, prepares the refresh and finds the
  // load in flight.
  keys_destroyed_under_lock = 0;
  EXPECT_TRUE(cache.Get(key).ok());
  EXPECT_EQ(keys_destroyed_under_lock.load(), 0);
  EXPECT_EQ(executor.RunAll(), 1u);
}

// == Refresh: a caller never waits for a task queued behind its own, and a
// refresh refreshes the entry it was decided on.

TEST(CacheRegression, RefreshWhoseLoaderGetsAKeyQueuedBehindItDoesNotWait) {
  // One executor thread. a's refresh runs on it and its loader calls Get(b);
  // b's refresh is queued behind a's on that same thread, and b is past what
  // the policy serves. Get(b) must run b's load itself rather than wait for
  // the queued refresh: waiting is a timeout here (a deadlock with an
  // unbounded wait_timeout).
  ManualClock clock;
  ThreadPool pool(1);
  Gate a_may_continue;
  Counter a_refreshing;
  std::atomic<bool> hold_a{false};
  std::atomic<int> b_loads{0};
  absl::StatusOr<std::string> inner = absl::UnknownError("not called");
  std::unique_ptr<Cache<std::string, std::string, SoftTtl>> cache;
  cache = std::make_unique<Cache<std::string, std::string, SoftTtl>>(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        if (k == "b") return absl::StrCat("b#", ++b_loads);
        if (hold_a.load()) {
          a_refreshing.Increment();
          a_may_continue.Wait();
          inner = cache->Get("b");
        }
        return k;
      },
      Options{.ttl = absl::Seconds(10),
              .wait_timeout = absl::Seconds(30),
              .clock = &clock,
              .executor = &pool,
              .max_load_age = absl::Hours(1)},
      SoftTtl{.stale_for = absl::Seconds(30)});
  ASSERT_TRUE(cache->Get("a").ok());
  ASSERT_TRUE(cache->Get("b").ok());
  clock.Advance(absl::Seconds(11));
  hold_a = true;
  ASSERT_TRUE(cache->Get("a").ok());  // Queues a's refresh; the pool runs it.
  ASSERT_TRUE(a_refreshing.WaitFor(1));
  ASSERT_TRUE(cache->Get("b").ok());  // Queues b's refresh behind a's.
  clock.Advance(absl::Seconds(30));   // b is now past what SoftTtl serves.
  const auto started = std::chrono::steady_clock::now();
  a_may_continue.Open();
  while (cache->loads_in_flight() != 0) std::this_thread::yield();
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            std::chrono::seconds(20));
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(*inner, "b#2");
  EXPECT_EQ(b_loads.load(), 2);  // The queued task found it done.
  cache.reset();
}

// XFetch-like: always refreshes past the quiet window; on its first decision
// it replaces the value with a Put, between the lock-free look that decided
// to refresh and the registration of that refresh.
struct PutsWhileDeciding {
  static constexpr bool kCoalesceLoads = true;
  std::shared_ptr<std::function<void()>> hook =
      std::make_shared<std::function<void()>>();

  Lifetime OnStore(absl::Duration ttl, absl::Duration, Random&) const {
    return {.expires_after = ttl,
            .quiet_for = ttl / 2,
            .keep_for = ttl,
            .serve_on_error_for = ttl};
  }
  Decision Decide(const EntryState&, absl::Time, Random&) const {
    if (*hook) std::exchange(*hook, nullptr)();
    return Decision::kServeAndRefresh;
  }
};

TEST(CacheRegression, ARefreshDecidedOnAReplacedEntryIsNotStarted) {
  ManualClock clock;
  ManualExecutor executor;
  PutsWhileDeciding policy;
  std::atomic<int> loads{0};
  Cache<std::string, std::string, PutsWhileDeciding> cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        return absl::StrCat(k, "#", ++loads);
      },
      Options{.ttl = absl::Seconds(10), .clock = &clock, .executor = &executor},
      policy);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  clock.Advance(absl::Seconds(6));  // Past the quiet window.
  *policy.hook = [&] {
    cache.Put("k", "put");
    // Free the replaced entry if anything allowed it, so that its address
    // could be reused by the next allocation of that size.
    internal::TryReclaim();
    cache.Put("other", "x");
  };
  EXPECT_EQ(*cache.Get("k"), "k#1");  // Decided on the old entry.
  EXPECT_EQ(cache.stats().refreshes, 0u);
  EXPECT_EQ(executor.RunAll(), 0u);
  EXPECT_EQ(*cache.GetIfPresent("k"), "put");  // Not overwritten by a load.
  EXPECT_EQ(loads.load(), 1);
}

// == Completion: uncoalesced loads (NaiveJitter) store unless their own key
// was written meanwhile.

TEST(CacheRegression, UncoalescedLoadsStoreDespiteWritesToOtherKeys) {
  // "Was this key written meanwhile" is asked of the key, not of its
  // shard: a Put of another key must not make a concurrent load drop its
  // result.
  Gate release;
  Counter loading;
  Cache<std::string, std::string, NaiveJitter> cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        if (k == "k") {
          loading.Increment();
          release.Wait();
        }
        return k;
      },
      Options{.ttl = absl::Seconds(60), .shards = 1}, NaiveJitter{.jitter = 0});
  std::vector<std::thread> callers;
  for (int i = 0; i < 10; ++i) {
    callers.emplace_back([&] { EXPECT_EQ(*cache.Get("k"), "k"); });
  }
  ASSERT_TRUE(loading.WaitFor(10));
  cache.Put("unrelated", "v");
  cache.Invalidate("another");
  release.Open();
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(cache.GetIfPresent("k"), "k");
  const uint64_t loads = cache.stats().loads;
  EXPECT_EQ(*cache.Get("k"), "k");
  EXPECT_EQ(cache.stats().loads, loads);  // A hit.
}

TEST(CacheRegression, UncoalescedLoadsOfAWrittenKeyStillDropTheirResult) {
  Gate release;
  Counter loading;
  Cache<std::string, std::string, NaiveJitter> cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        loading.Increment();
        release.Wait();
        return k;
      },
      Options{.ttl = absl::Seconds(60)}, NaiveJitter{.jitter = 0});
  std::thread caller([&] { EXPECT_EQ(*cache.Get("k"), "k"); });
  ASSERT_TRUE(loading.WaitFor(1));
  cache.Put("k", "put");
  release.Open();
  caller.join();
  EXPECT_EQ(cache.GetIfPresent("k"), "put");
}

// The first of a key's uncoalesced loads registers without a flight; a
// second hands that registration to a flight both share. Each test holds
// the first load (#1) and the second (#2) in their loaders.
class UncoalescedCoRunners : public ::testing::Test {
 protected:
  UncoalescedCoRunners()
      : cache_(
            [this](const std::string& k) -> absl::StatusOr<std::string> {
              const int call = ++calls_;
              loading_.Increment();
              (call == 1 ? first_ : second_).Wait();
              return absl::StrCat(k, "#", call);
            },
            Options{.ttl = absl::Seconds(60), .shards = 1},
            NaiveJitter{.jitter = 0}) {}
  ~UncoalescedCoRunners() override {
    first_.Open();
    second_.Open();
    if (first_caller_.joinable()) first_caller_.join();
    if (second_caller_.joinable()) second_caller_.join();
  }

  // Starts both loads of "k"; the first caller's key is its own, destroyed
  // when its Get returns.
  void StartBoth() {
    first_caller_ = std::thread([this] {
      const std::string key = "k";
      first_result_ = cache_.Get(key);
    });
    ASSERT_TRUE(loading_.WaitFor(1));
    second_caller_ = std::thread([this] { second_result_ = cache_.Get("k"); });
    ASSERT_TRUE(loading_.WaitFor(2));
  }

  std::atomic<int> calls_{0};
  Counter loading_;
  Gate first_;
  Gate second_;
  Cache<std::string, std::string, NaiveJitter> cache_;
  std::thread first_caller_;
  std::thread second_caller_;
  absl::StatusOr<std::string> first_result_;
  absl::StatusOr<std::string> second_result_;
};

TEST_F(UncoalescedCoRunners, TheSecondStoresAfterTheFirstReturned) {
  StartBoth();
  first_.Open();
  first_caller_.join();
  EXPECT_EQ(first_result_.value_or(""), "k#1");
  EXPECT_EQ(cache_.GetIfPresent("k"), "k#1");
  // The registration outlived its first runner (and that runner's key).
  second_.Open();
  second_caller_.join();
  EXPECT_EQ(second_result_.value_or(""), "k#2");
  EXPECT_EQ(cache_.GetIfPresent("k"), "k#2");
}

TEST_F(UncoalescedCoRunners, TheFirstStoresAfterTheSecondReturned) {
  StartBoth();
  second_.Open();
  second_caller_.join();
  EXPECT_EQ(cache_.GetIfPresent("k"), "k#2");
  first_.Open();
  first_caller_.join();
  EXPECT_EQ(first_result_.value_or(""), "k#1");
  EXPECT_EQ(cache_.GetIfPresent("k"), "k#1");
  // Both left: the next miss of the key registers afresh and stores.
  cache_.Invalidate("k");
  EXPECT_EQ(*cache_.Get("k"), "k#3");
  EXPECT_EQ(cache_.GetIfPresent("k"), "k#3");
}

TEST_F(UncoalescedCoRunners, AWriteSupersedesBoth) {
  StartBoth();
  cache_.Put("k", "put");
  first_.Open();
  second_.Open();
  first_caller_.join();
  second_caller_.join();
  EXPECT_EQ(first_result_.value_or(""),
            "k#1");  // Each caller gets its own load's value,
  EXPECT_EQ(second_result_.value_or(""), "k#2");
  EXPECT_EQ(cache_.GetIfPresent("k"), "put");  // but neither replaces the Put.
}

// == Entries and shards: over-aligned values are stored at their alignment,
// and any Hash spreads keys over every shard.

struct alignas(64) Wide {
  explicit Wide(uint64_t x = 0) : v(x) {}
  uint64_t v;
};

TEST(CacheRegression, OverAlignedKeysAndValuesAreStoredAligned) {
  Cache<uint64_t, Wide, SingleFlight> cache(
      [](const uint64_t& k) -> absl::StatusOr<Wide> { return Wide(k); },
      Options{.max_entries = 1024});
  for (uint64_t k = 0; k < 256; ++k) {
    ASSERT_EQ(cache.Get(k)->v, k);
    cache.Put(k + 1000, Wide(k));
  }
  // The entries themselves: every one made at 64 bytes' alignment.
  using Node = internal::Entry<uint64_t, Wide, internal::EntryLayout::kFixed>;
  static_assert(Node::kAddressAlignment == 64);
  for (int i = 0; i < 64; ++i) {
    auto n = std::make_unique<Node>(0, 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(n.get()) % 64, 0u);
  }
}

TEST(CacheRegression, IdentityHashedIntegerKeysSpreadOverTheShards) {
  // libstdc++'s std::hash<int> is the identity: unmixed, every key below
  // 2^32 would land in shard 0, which holds 1/16 of max_entries (128).
  Cache<int, int, SingleFlight, std::hash<int>> cache(
      [](const int& k) -> absl::StatusOr<int> { return k; },
      Options{.max_entries = 2048, .shards = 16});
  for (int k = 0; k < 1000; ++k) ASSERT_EQ(*cache.Get(k), k);
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.size(), 1000u);
}

}  // namespace
}  // namespace paddock
