// Tests of paddock/cache.h: the core mechanics one by one, with SingleFlight
// (the coalescing core). The behaviour every policy shares is the policy
// contract (paddock/testing/policy_contract.h, tests/policy_contract_test.cc).

#include "paddock/cache.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"

// Counts allocations made by the calling thread, to prove a hit allocates
// nothing. Not under ThreadSanitizer, whose runtime defines operator new and
// delete itself (a second definition does not link).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PADDOCK_TEST_NO_ALLOCATION_COUNT 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PADDOCK_TEST_NO_ALLOCATION_COUNT 1
#endif

namespace {
thread_local int64_t allocations = 0;
#ifdef PADDOCK_TEST_NO_ALLOCATION_COUNT
constexpr bool kCountsAllocations = false;
#else
constexpr bool kCountsAllocations = true;
#endif
}  // namespace

#ifndef PADDOCK_TEST_NO_ALLOCATION_COUNT
// Out of line, so the compiler does not pair malloc/free with new/delete.
__attribute__((noinline)) void* operator new(size_t size) {
  ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept {
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#endif

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;

// ---------------------------------------------------------------------------
// Core mechanics, with SingleFlight (the coalescing core).

class CacheTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  ManualExecutor executor_;
  Options options_{.ttl = absl::Seconds(10),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 7};
};

// Seed 000's failure: a library computing inside a segment lock. Here a slow
// load of one key must not delay hits, puts or loads of another key in the
// same shard.
TEST_F(CacheTest, SlowLoadDoesNotBlockOtherKeysOfTheSameShard) {
  options_.shards = 1;
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "slow") {
          entered.Increment();
          gate.Wait();
        }
        return key;
      },
      options_);
  cache.Put("hit", "h");
  std::thread slow([&] { EXPECT_EQ(*cache.Get("slow"), "slow"); });
  ASSERT_TRUE(entered.WaitFor(1));
  // All of these complete while the slow load is blocked.
  EXPECT_EQ(*cache.Get("hit"), "h");
  cache.Put("put", "p");
  EXPECT_EQ(*cache.Get("put"), "p");
  EXPECT_EQ(*cache.Get("other"), "other");
  cache.Invalidate("other");
  EXPECT_EQ(cache.loads_in_flight(), 1u);
  gate.Open();
  slow.join();
  EXPECT_EQ(cache.loads_in_flight(), 0u);
}

// A caller that misses just as a load completes sees the stored value: with
// threads hammering one key while the clock steps through expiries, there is
// exactly one load per expiry.
TEST_F(CacheTest, NoDoubleLoadAtTheSeam) {
  constexpr int kExpiries = 200;
  std::atomic<int> loads{0};
  Cache<int, int, SingleFlight> cache(
      [&](const int&) -> absl::StatusOr<int> { return ++loads; }, options_);
  ASSERT_TRUE(cache.Get(1).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        absl::StatusOr<int> v = cache.Get(1);
        if (!v.ok() || *v < 1) ++bad;
      }
    });
  }
  for (int i = 1; i <= kExpiries; ++i) {
    clock_.Advance(absl::Seconds(10));
    // The next expiry comes only after this one's load stored its value.
    while (loads.load() < i + 1) std::this_thread::yield();
    while (cache.loads_in_flight() != 0) std::this_thread::yield();
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(loads, kExpiries + 1);
  EXPECT_EQ(bad, 0);
}

// A load older than max_load_age stops blocking its key. When it finally
// returns it must not remove the newer load's registration.
TEST_F(CacheTest, LeaderRemovesOnlyItsOwnInFlightEntry) {
  options_.max_load_age = absl::Seconds(30);
  options_.wait_timeout = absl::Minutes(1);
  Gate first_gate, second_gate;
  Counter entered;
  std::atomic<int> loads{0};
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        const int n = ++loads;
        entered.Increment();
        (n == 1 ? first_gate : second_gate).Wait();
        return absl::StrCat("load ", n);
      },
      options_);
  absl::StatusOr<std::string> first, second, joined;
  std::thread a([&] { first = cache.Get("k"); });
  ASSERT_TRUE(entered.WaitFor(1));
  clock_.Advance(absl::Seconds(31));  // The first load is now too old.
  std::thread b([&] { second = cache.Get("k"); });
  ASSERT_TRUE(entered.WaitFor(2));
  first_gate.Open();
  a.join();
  EXPECT_EQ(*first, "load 1");
  // The second load is still registered: a new caller joins it.
  std::thread c([&] { joined = cache.Get("k"); });
  while (cache.stats().coalesced_waits < 1) std::this_thread::yield();
  EXPECT_EQ(loads, 2);
  second_gate.Open();
  b.join();
  c.join();
  EXPECT_EQ(*second, "load 2");
  EXPECT_EQ(*joined, "load 2");
  EXPECT_EQ(cache.GetIfPresent("k"), "load 2");
}

TEST_F(CacheTest, EvictionTakesEntriesNeverServedAgainFirst) {
  options_.max_entries = 4;
  options_.shards = 1;
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("expired").ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(cache.Get("expired").ok());  // Visited: SIEVE would keep it.
  // ... but it is past keep_until (2 * ttl for SingleFlight): never served
  // again, not even to a caller whose wait times out.
  clock_.Advance(absl::Seconds(16));
  for (const char* key : {"b", "c", "d"}) ASSERT_TRUE(cache.Get(key).ok());
  ASSERT_TRUE(cache.Get("e").ok());
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.GetIfPresent("b"), "b");
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().loads, 5u);
  ASSERT_TRUE(cache.Get("b").ok());
  EXPECT_EQ(cache.stats().loads, 5u);  // "b" survived; "expired" went.
}

TEST_F(CacheTest, EvictionFollowsSieveAmongFreshEntries) {
  options_.max_entries = 3;
  options_.shards = 1;
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(cache.Get(key).ok());
  ASSERT_TRUE(cache.Get("a").ok());  // Visited.
  ASSERT_TRUE(cache.Get("d").ok());  // Evicts the oldest unvisited: "b".
  EXPECT_EQ(cache.GetIfPresent("a"), "a");
  EXPECT_EQ(cache.GetIfPresent("b"), std::nullopt);
  EXPECT_EQ(cache.GetIfPresent("c"), "c");
  EXPECT_EQ(cache.GetIfPresent("d"), "d");
}

TEST_F(CacheTest, HitAllocatesNothing) {
  if (!kCountsAllocations) GTEST_SKIP() << "ThreadSanitizer owns operator new";
  Cache<int, int, SingleFlight> cache(
      [](const int& key) -> absl::StatusOr<int> { return key; }, options_);
  ASSERT_TRUE(cache.Get(1).ok());
  ASSERT_TRUE(cache.Get(1).ok());  // Per-thread stats line allocated.
  const int64_t before = allocations;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(*cache.Get(1), 1);
  EXPECT_EQ(allocations, before);
}

TEST_F(CacheTest, HitWithTheDefaultClockAllocatesNothing) {
  if (!kCountsAllocations) GTEST_SKIP() << "ThreadSanitizer owns operator new";
  Cache<int, int, SingleFlight> cache(
      [](const int& key) -> absl::StatusOr<int> { return key; });
  ASSERT_TRUE(cache.Get(1).ok());
  ASSERT_TRUE(cache.Get(1).ok());
  const int64_t before = allocations;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(*cache.Get(1), 1);
  EXPECT_EQ(allocations, before);
}

TEST_F(CacheTest, AnAsyncHitCallsBackInlineAndAllocatesNothing) {
  if (!kCountsAllocations) GTEST_SKIP() << "ThreadSanitizer owns operator new";
  Cache<int, int, SingleFlight> cache(
      [](const int& key) -> absl::StatusOr<int> { return key; }, options_);
  ASSERT_TRUE(cache.Get(1).ok());
  ASSERT_TRUE(cache.Get(1).ok());
  int sum = 0;
  const int64_t before = allocations;
  for (int i = 0; i < 1000; ++i) {
    // A callback small enough for AnyInvocable's inline storage.
    cache.GetAsync(1, [&sum](absl::StatusOr<int> v) { sum += *v; });
  }
  EXPECT_EQ(allocations, before);
  EXPECT_EQ(sum, 1000);
}

}  // namespace
}  // namespace paddock
