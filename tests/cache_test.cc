// Tests of paddock/cache.h: behaviour shared by every policy (typed suite),
// then the core mechanics one by one.

#include "paddock/cache.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
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
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Behaviour every policy shares.

template <typename P>
class EveryPolicy : public ::testing::Test {
 protected:
  using StringCache = Cache<std::string, std::string, P>;

  ManualClock clock_;
  ManualExecutor executor_;
  Options options_{.ttl = absl::Seconds(10),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 42};
};

using Policies = ::testing::Types<NaiveJitter, SingleFlight, XFetch, SoftTtl>;
TYPED_TEST_SUITE(EveryPolicy, Policies);

TYPED_TEST(EveryPolicy, FreshValueIsServedWithoutCallingTheLoader) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads;
        return "value of " + key;
      },
      this->options_);
  EXPECT_EQ(*cache.Get("a"), "value of a");
  EXPECT_EQ(*cache.Get("a"), "value of a");
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TYPED_TEST(EveryPolicy, ExpiredValueIsLoadedAgain) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*cache.Get("a"), "1");
  // Past every policy's window (jitter at most +20 %, SoftTtl 30 s stale).
  this->clock_.Advance(absl::Seconds(100));
  EXPECT_EQ(*cache.Get("a"), "2");
}

TYPED_TEST(EveryPolicy, LoaderErrorReachesTheCallerAndIsNotCached) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        return absl::UnavailableError("backend down");
      },
      this->options_);
  EXPECT_EQ(cache.Get("a").status(), absl::UnavailableError("backend down"));
  EXPECT_EQ(cache.Get("a").status(), absl::UnavailableError("backend down"));
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(cache.stats().load_failures, 2u);
  EXPECT_EQ(cache.size(), 0u);
}

TYPED_TEST(EveryPolicy, LoaderErrorReachesEveryWaiterOfThatLoad) {
  if (!TypeParam::kCoalesceLoads) GTEST_SKIP() << "no waiters: no coalescing";
  Gate gate;
  Counter entered;
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        entered.Increment();
        gate.Wait();
        return absl::UnavailableError("backend down");
      },
      this->options_);
  constexpr int kCallers = 8;
  std::vector<absl::Status> results(kCallers);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { results[0] = cache.Get("a").status(); });
  ASSERT_TRUE(entered.WaitFor(1));
  for (int i = 1; i < kCallers; ++i) {
    threads.emplace_back([&, i] { results[i] = cache.Get("a").status(); });
  }
  while (cache.stats().coalesced_waits < kCallers - 1)
    std::this_thread::yield();
  gate.Open();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(loads, 1);
  for (const absl::Status& s : results) {
    EXPECT_EQ(s, absl::UnavailableError("backend down"));
  }
}

TYPED_TEST(EveryPolicy, ThrowingLoaderBecomesInternalErrorWithWhat) {
  typename TestFixture::StringCache cache(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "std") throw std::runtime_error("disk on fire");
        throw 42;
      },
      this->options_);
  absl::Status s = cache.Get("std").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("disk on fire"));
  s = cache.Get("other").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("not a std::exception"));
}

TYPED_TEST(EveryPolicy, PutValueIsServedWithoutLoading) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        return "loaded";
      },
      this->options_);
  cache.Put("a", "put");
  EXPECT_EQ(*cache.Get("a"), "put");
  EXPECT_EQ(cache.GetIfPresent("a"), "put");
  EXPECT_EQ(loads, 0);
}

TYPED_TEST(EveryPolicy, InvalidateMakesTheNextGetLoad) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat(++loads);
      },
      this->options_);
  EXPECT_EQ(*cache.Get("a"), "1");
  cache.Invalidate("a");
  EXPECT_EQ(cache.GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(*cache.Get("a"), "2");
  cache.InvalidateAll();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*cache.Get("a"), "3");
}

// A load in flight when the key is invalidated or overwritten answers its
// callers but does not store its (now stale) result.
TYPED_TEST(EveryPolicy, LoadRacingWithInvalidateOrPutDoesNotStore) {
  for (const bool put : {false, true}) {
    Gate gate;
    Counter entered;
    typename TestFixture::StringCache cache(
        [&](const std::string&) -> absl::StatusOr<std::string> {
          entered.Increment();
          gate.Wait();
          return "old";
        },
        this->options_);
    absl::StatusOr<std::string> loaded;
    std::thread loader([&] { loaded = cache.Get("a"); });
    ASSERT_TRUE(entered.WaitFor(1));
    if (put) {
      cache.Put("a", "new");
    } else {
      cache.Invalidate("a");
    }
    gate.Open();
    loader.join();
    EXPECT_EQ(*loaded, "old");
    EXPECT_EQ(cache.GetIfPresent("a"),
              put ? std::optional<std::string>("new") : std::nullopt);
  }
}

TYPED_TEST(EveryPolicy, SizeNeverExceedsMaxEntries) {
  this->options_.max_entries = 10;
  typename TestFixture::StringCache cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      this->options_);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(*cache.Get(absl::StrCat(i)), absl::StrCat(i));
    ASSERT_LE(cache.size(), 10u);
  }
  EXPECT_EQ(cache.stats().evictions, 990u);
}

// The ttl counts from the end of the load, not its start.
TYPED_TEST(EveryPolicy, LifetimeStartsWhenTheLoadCompletes) {
  std::atomic<int> loads{0};
  typename TestFixture::StringCache cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++loads;
        this->clock_.Advance(absl::Seconds(5));  // A slow load.
        return "v";
      },
      this->options_);
  ASSERT_TRUE(cache.Get("a").ok());
  // 12 s after the load started, 7 s after it completed: fresh for every
  // policy (NaiveJitter's shortest ttl is 8 s).
  this->clock_.Advance(absl::Seconds(7));
  ASSERT_TRUE(cache.Get("a").ok());
  EXPECT_EQ(loads, 1);
}

TYPED_TEST(EveryPolicy, LoaderCallingGetForItsOwnKeyFailsInsteadOfDeadlocking) {
  typename TestFixture::StringCache* self = nullptr;
  absl::Status inner;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "outer") {
          inner = self->Get("outer").status();
          EXPECT_EQ(*self->Get("other"), "other");  // Another key works.
        }
        return key;
      },
      this->options_);
  self = &cache;
  EXPECT_EQ(*cache.Get("outer"), "outer");
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition);
}

TYPED_TEST(EveryPolicy, OneThousandConcurrentCallersOfAColdKey) {
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
      absl::StatusOr<std::string> v = cache.Get("exhibition");
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

TYPED_TEST(EveryPolicy, DestroyingTheCacheDropsQueuedBackgroundWork) {
  std::atomic<int> loads{0};
  {
    typename TestFixture::StringCache cache(
        [&](const std::string&) -> absl::StatusOr<std::string> {
          ++loads;
          return "v";
        },
        this->options_);
    ASSERT_TRUE(cache.Get("a").ok());
    // Into SoftTtl's stale window: it queues a refresh.
    this->clock_.Advance(absl::Seconds(11));
    ASSERT_TRUE(cache.Get("a").ok());
  }
  const int before = loads;
  this->executor_.RunAll();  // Tasks of a destroyed cache: no loader call.
  EXPECT_EQ(loads, before);
}

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

TEST_F(CacheTest, WaiterGivesUpAtWaitTimeoutAndTheLoadStillStores) {
  options_.wait_timeout = absl::ZeroDuration();
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        entered.Increment();
        gate.Wait();
        return "v";
      },
      options_);
  std::thread leader([&] { EXPECT_EQ(*cache.Get("k"), "v"); });
  ASSERT_TRUE(entered.WaitFor(1));
  EXPECT_EQ(cache.Get("k").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache.stats().wait_timeouts, 1u);
  gate.Open();
  leader.join();
  EXPECT_EQ(cache.GetIfPresent("k"), "v");
}

TEST_F(CacheTest, EvictionTakesExpiredEntriesFirst) {
  options_.max_entries = 4;
  options_.shards = 1;
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("expired").ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(cache.Get("expired").ok());  // Visited: SIEVE would keep it.
  clock_.Advance(absl::Seconds(6));        // ... but it has expired.
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

TEST_F(CacheTest, DestroyingTheCacheWaitsForARunningRefresh) {
  ThreadPool pool(1);
  options_.executor = &pool;
  Gate gate;
  Counter entered;
  std::atomic<bool> destroyed{false};
  auto cache = std::make_unique<Cache<std::string, std::string, SoftTtl>>(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (entered.Increment() > 1) gate.Wait();  // The refresh blocks.
        return "v";
      },
      options_);
  ASSERT_TRUE(cache->Get("a").ok());
  clock_.Advance(absl::Seconds(11));
  ASSERT_TRUE(cache->Get("a").ok());  // Stale: queues a refresh.
  ASSERT_TRUE(entered.WaitFor(2));
  std::thread destroyer([&] {
    cache.reset();
    destroyed = true;
  });
  EXPECT_FALSE(destroyed.load());  // Not a timing assertion: see below.
  gate.Open();
  destroyer.join();
  EXPECT_TRUE(destroyed);
}

// Real threads, many keys, a clock stepping through expiries: every value
// returned was produced by the loader for that key, and there is at most one
// load per key per expiry.
TEST_F(CacheTest, StressKeepsInvariants) {
  constexpr int kKeys = 64;
  constexpr int kExpiries = 20;
  std::atomic<int> loads{0};
  options_.wait_timeout = absl::Minutes(1);
  Cache<int, std::string, SingleFlight> cache(
      [&](const int& key) -> absl::StatusOr<std::string> {
        ++loads;
        return absl::StrCat("key ", key);
      },
      options_);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; !stop.load(); i = (i * 7 + 3) % kKeys) {
        absl::StatusOr<std::string> v = cache.Get(i);
        if (!v.ok() || *v != absl::StrCat("key ", i)) ++wrong;
      }
    });
  }
  for (int i = 0; i < kExpiries; ++i) {
    std::this_thread::yield();
    clock_.Advance(absl::Seconds(10));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(loads, kKeys * (kExpiries + 1));
}

}  // namespace
}  // namespace paddock
