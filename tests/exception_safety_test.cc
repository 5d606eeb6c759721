// Exception safety from a load's registration to its completion: whatever
// throws in between (an allocation, a copy of a value, a key comparison, a
// listener, an executor), every caller gets an answer, no key is left wedged
// by a load that will never finish, no load slot leaks, and the cache can be
// destroyed.
//
// Allocation failures are injected by replacing the global operator new for
// this test binary: it throws std::bad_alloc for the next allocation of one
// chosen size on the calling thread.

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/executor.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/node_pool.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"
#include "sanitizers.h"

namespace {
// 0: no failure armed.
thread_local size_t fail_next_allocation_of = 0;
// How many allocations this thread made.
thread_local size_t allocations = 0;
}  // namespace

// ThreadSanitizer's runtime defines operator new itself: there, the
// allocation-failure test is skipped.
#if !PADDOCK_TEST_TSAN
// g++ sees operator delete's free() beside inlined new-expressions and
// warns, though this operator new allocates with malloc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(size_t n) {
  ++allocations;
  if (fail_next_allocation_of != 0 && n == fail_next_allocation_of) {
    fail_next_allocation_of = 0;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

namespace paddock {
namespace {

using ::testing::HasSubstr;

using StringCache = Cache<std::string, std::string, SingleFlight>;

Options TestOptions(ManualClock* clock, Executor* executor = nullptr) {
  return Options{.ttl = absl::Seconds(10),
                 .clock = clock,
                 .executor = executor,
                 .max_load_age = absl::InfiniteDuration()};
}

TEST(ExceptionSafety, FailingToAllocateTheEntryFailsThatLoadOnly) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "no operator new of ours under TSan";
  ManualClock clock;
  int loads = 0;
  StringCache cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        // The next allocation of an entry's size on this thread is the
        // entry this load's value goes into (with no block of that size
        // cached by this thread's node pool).
        if (++loads == 1) {
          using Node = internal::Entry<std::string, std::string,
                                       internal::EntryLayout::kFixed>;
          internal::NodePool<sizeof(Node), Node::kAddressAlignment>::Release();
          fail_next_allocation_of = sizeof(Node);
        }
        return k;
      },
      TestOptions(&clock));
  absl::StatusOr<std::string> first = cache.Get("k");
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(first.status().message(), HasSubstr("storing"));
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  // Not wedged: the next caller loads at once (with an unbounded
  // max_load_age, a registered load that never finished would block it).
  EXPECT_EQ(*cache.Get("k"), "k");
  EXPECT_EQ(loads, 2);
}

// InvalidateAll drops a shard's loads, then its entries: out of memory
// between the two (it gathered the entries in a vector) it threw with the
// loads gone and the entries still served.
TEST(ExceptionSafety, InvalidateAllNeedsNoMemory) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "no operator new of ours under TSan";
  ManualClock clock;
  Options options = TestOptions(&clock);
  options.shards = 1;
  StringCache cache(
      [](const std::string& k) -> absl::StatusOr<std::string> { return k; },
      options);
  constexpr size_t kEntries = 37;  // A size nothing else here allocates.
  for (size_t i = 0; i < kEntries; ++i) cache.Put(absl::StrCat(i), "v");
  ASSERT_EQ(cache.size(), kEntries);
  fail_next_allocation_of = kEntries * sizeof(void*);
  EXPECT_NO_THROW(cache.InvalidateAll());
  fail_next_allocation_of = 0;
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.GetIfPresent("0"), std::nullopt);
}

// Retiring runs in destructors, after a writer has changed the table: when
// the global retire lists cannot grow, the objects are leaked and counted,
// and the process goes on (std::terminate before).
TEST(ExceptionSafety, RetiringWhenTheListsCannotGrowLeaksInsteadOfEnding) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "no operator new of ours under TSan";
  static std::atomic<int> freed{0};
  static int objects[32];
  const auto deleter = [](void*) { ++freed; };
  internal::TryReclaim();  // Every list is empty, without capacity.
  const size_t leaked = internal::LeakedRetirements();
  // A thread hands over 16 at once: into an empty list, that allocates room
  // for 16 (a pointer and a deleter each).
  fail_next_allocation_of = size_t{16} * 2 * sizeof(void*);
  for (int i = 0; i < 16; ++i) internal::Retire(&objects[i], deleter);
  EXPECT_EQ(fail_next_allocation_of, 0u) << "the failure was not injected";
  EXPECT_EQ(internal::LeakedRetirements(), leaked + 16);
  EXPECT_EQ(internal::PendingRetirements(), 0u);
  // Later retirements are freed as usual.
  for (int i = 16; i < 32; ++i) internal::Retire(&objects[i], deleter);
  internal::TryReclaim();
  EXPECT_EQ(freed.load(), 16);
  EXPECT_EQ(internal::LeakedRetirements(), leaked + 16);
}

// Taking and giving back load slots never allocates, so never throws: a
// load that claimed a queued refresh's flight always gets to publish it.
TEST(ExceptionSafety, LoadSlotsNeverAllocateOnceMade) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "no operator new of ours under TSan";
  internal::LoadSlots slots(3, absl::Seconds(1));
  const size_t before = allocations;
  int64_t now = 0;
  for (int round = 0; round < 1000; ++round) {
    const internal::LoadSlots::Ticket reserved = slots.TryReserve(now);
    const internal::LoadSlots::Ticket a = slots.TryAcquire(now);
    const internal::LoadSlots::Ticket b =
        slots.AcquireFor(absl::ZeroDuration(), [now] { return now; });
    ASSERT_NE(reserved, 0u);
    ASSERT_NE(a, 0u);
    ASSERT_NE(b, 0u);
    // Full: a load takes the reservation; the refresh starts without it.
    const internal::LoadSlots::Ticket c = slots.TryAcquire(now);
    ASSERT_NE(c, 0u);
    EXPECT_EQ(slots.Restart(reserved, now), 0u);
    now += absl::ToInt64Nanoseconds(absl::Seconds(2));  // All hung now.
    const internal::LoadSlots::Ticket d = slots.TryAcquire(now);
    ASSERT_NE(d, 0u);
    for (auto t : {a, b, c, d}) slots.Release(t);
  }
  EXPECT_EQ(allocations, before);
}

// A value whose copy throws while `fail_copies` is set on the copying thread
// (a loader sets it for the copy into the entry, on its own thread).
thread_local bool fail_copies = false;
struct Fragile {
  Fragile() = default;
  explicit Fragile(std::string s) : s(std::move(s)) {}
  Fragile(const Fragile& other) : s(other.s) {
    if (fail_copies) throw std::runtime_error("copy failed");
  }
  // Moves never throw, so that a loader's return (a move) does not fail in
  // place of the copy a test means to fail.
  Fragile(Fragile&&) noexcept = default;
  Fragile& operator=(const Fragile&) = default;
  Fragile& operator=(Fragile&&) noexcept = default;
  std::string s;
};

TEST(ExceptionSafety, AValueWhoseCopyThrowsFailsThatLoadOnly) {
  ManualClock clock;
  Cache<std::string, Fragile, SingleFlight> cache(
      [](const std::string& k) -> absl::StatusOr<Fragile> {
        Fragile f(k);
        fail_copies = true;  // The copy into the entry throws.
        return f;
      },
      TestOptions(&clock));
  absl::StatusOr<Fragile> got = cache.Get("k");
  fail_copies = false;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(got.status().message(), HasSubstr("copy failed"));
  EXPECT_EQ(cache.loads_in_flight(), 0u);
}

TEST(ExceptionSafety, ARefreshWhoseStoreThrowsEndsAndTheCacheCanBeDestroyed) {
  ManualClock clock;
  ThreadPool pool(1);
  std::atomic<int> loads{0};
  {
    Cache<std::string, Fragile, SoftTtl> cache(
        [&](const std::string& k) -> absl::StatusOr<Fragile> {
          Fragile f(absl::StrCat(k, "#", ++loads));
          fail_copies = loads == 2;  // On the pool's thread.
          return f;
        },
        Options{.ttl = absl::Seconds(10), .clock = &clock, .executor = &pool});
    ASSERT_EQ(cache.Get("k")->s, "k#1");
    clock.Advance(absl::Seconds(11));
    ASSERT_EQ(cache.Get("k")->s, "k#1");  // Stale; the refresh throws.
    while (cache.loads_in_flight() != 0) std::this_thread::yield();
    EXPECT_EQ(cache.Get("k")->s, "k#1");  // Still served; refreshable again.
    while (cache.loads_in_flight() != 0) std::this_thread::yield();
    EXPECT_EQ(cache.Get("k")->s, "k#3");
  }  // ~Cache returns: the failed refresh left no task running.
  EXPECT_EQ(loads.load(), 3);
}

TEST(ExceptionSafety, AStaleHitWhoseCopyThrowsLeavesTheEntryRefreshable) {
  ManualClock clock;
  ManualExecutor executor;
  int loads = 0;
  Cache<std::string, Fragile, SoftTtl> cache(
      [&](const std::string& k) -> absl::StatusOr<Fragile> {
        return Fragile(absl::StrCat(k, "#", ++loads));
      },
      Options{
          .ttl = absl::Seconds(10), .clock = &clock, .executor = &executor});
  ASSERT_EQ(cache.Get("k")->s, "k#1");
  clock.Advance(absl::Seconds(11));
  // This stale hit would start the refresh, but copying its value throws.
  fail_copies = true;
  EXPECT_THROW((void)cache.Get("k"), std::runtime_error);
  fail_copies = false;
  EXPECT_EQ(executor.pending(), 0u);
  // The next stale hit starts it: the key was not left marked as refreshing.
  EXPECT_EQ(cache.Get("k")->s, "k#1");
  EXPECT_EQ(executor.RunAll(), 1u);
  EXPECT_EQ(cache.Get("k")->s, "k#2");
}

// Equal keys; comparisons throw while `fail_compares` is set.
std::atomic<bool> fail_compares{false};
struct FlakyEq {
  bool operator()(const std::string& a, const std::string& b) const {
    if (fail_compares.load()) throw std::runtime_error("compare failed");
    return a == b;
  }
};

TEST(ExceptionSafety, AKeyComparisonThatThrowsWhileStoringWedgesNothing) {
  ManualClock clock;
  int loads = 0;
  Cache<std::string, std::string, SingleFlight, absl::Hash<std::string>,
        FlakyEq>
      cache(
          [&](const std::string& k) -> absl::StatusOr<std::string> {
            if (++loads == 1) fail_compares = true;  // Storing will throw.
            return k;
          },
          TestOptions(&clock));
  absl::StatusOr<std::string> first = cache.Get("k");
  fail_compares = false;
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInternal);
  // The load may still be registered (it could not be found to be removed),
  // but it is done: nobody waits for it, the next caller loads.
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  EXPECT_EQ(*cache.Get("k"), "k");
  EXPECT_EQ(loads, 2);
}

TEST(ExceptionSafety, AnUncoalescedKeyComparisonThatThrowsWedgesNothing) {
  // Its load registered without a flight, on the caller's stack: the
  // registration must not outlive the call it could not be found by.
  ManualClock clock;
  int loads = 0;
  Cache<std::string, std::string, NaiveJitter, absl::Hash<std::string>, FlakyEq>
      cache(
          [&](const std::string& k) -> absl::StatusOr<std::string> {
            if (++loads == 1) fail_compares = true;  // Storing will throw.
            return k;
          },
          TestOptions(&clock), NaiveJitter{.jitter = 0});
  absl::StatusOr<std::string> first = cache.Get("k");
  fail_compares = false;
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(*cache.Get("k"), "k");  // Registered afresh, and stored:
  EXPECT_EQ(*cache.Get("k"), "k");  // a hit.
  EXPECT_EQ(loads, 2);
}

class ThrowingListener : public Listener {
 public:
  void OnLoadStart(LoadKind) override { throw std::runtime_error("start"); }
  void OnLoadFinish(LoadKind, absl::Duration, const absl::Status&) override {
    throw std::runtime_error("finish");
  }
  void OnStaleServed(absl::Duration) override { throw 1; }
  void OnEviction() override { throw std::runtime_error("evict"); }
};

TEST(ExceptionSafety, AThrowingListenerIsIgnoredAndLeaksNoLoadSlot) {
  ManualClock clock;
  ThrowingListener listener;
  Options options = TestOptions(&clock);
  options.max_concurrent_loads = 1;
  options.max_entries = 4;
  options.shards = 1;
  options.listener = &listener;
  StringCache cache(
      [](const std::string& k) -> absl::StatusOr<std::string> { return k; },
      options);
  // Every load takes the only slot; a leaked one would time the next out.
  for (int i = 0; i < 20; ++i) {
    const std::string key = absl::StrCat("k", i);
    EXPECT_EQ(*cache.Get(key), key);
  }
  EXPECT_EQ(cache.stats().loads, 20u);
  EXPECT_EQ(cache.stats().evictions, 16u);
}

// -- Copies that throw after a load was registered.

// A key whose N-th copy on the calling thread throws (0: none does), after
// calling `before_key_copy_throws` if set.
thread_local int key_copies_until_throw = 0;
thread_local std::function<void()> before_key_copy_throws;
struct FlakyKey {
  std::string s;
  explicit FlakyKey(std::string v) : s(std::move(v)) {}
  FlakyKey(FlakyKey&&) noexcept = default;
  FlakyKey(const FlakyKey& o) : s(o.s) {
    if (key_copies_until_throw > 0 && --key_copies_until_throw == 0) {
      if (before_key_copy_throws) before_key_copy_throws();
      throw std::runtime_error("key copy failed");
    }
  }
  FlakyKey& operator=(const FlakyKey&) = default;
  bool operator==(const FlakyKey& o) const { return s == o.s; }
  template <typename H>
  friend H AbslHashValue(H h, const FlakyKey& k) {
    return H::combine(std::move(h), k.s);
  }
};

// Whichever copy of the key throws during a GetAsync miss (the flight's,
// the waiter's, the task's), the caller gets the exception or an answer,
// and no load stays registered: a queued flight never ages, so one left
// behind would hold every later GetAsync of the key.
template <typename Policy>
void GetAsyncSurvivesEveryThrowingKeyCopy() {
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE(absl::StrCat("copy ", n, " throws"));
    ManualClock clock;
    ManualExecutor executor;
    int answered = 0;
    int loads = 0;
    Cache<FlakyKey, std::string, Policy> cache(
        [&](const FlakyKey& k) -> absl::StatusOr<std::string> {
          return absl::StrCat(k.s, "#", ++loads);
        },
        Options{.ttl = absl::Seconds(10),
                .wait_timeout = absl::InfiniteDuration(),  // No timer thread.
                .clock = &clock,
                .executor = &executor});
    const FlakyKey key("k");
    key_copies_until_throw = n;
    bool threw = false;
    try {
      cache.GetAsync(key,
                     [&](const absl::StatusOr<std::string>&) { ++answered; });
    } catch (const std::runtime_error&) {
      threw = true;
    }
    key_copies_until_throw = 0;
    executor.RunAll();
    EXPECT_EQ(answered, threw ? 0 : 1);
    EXPECT_EQ(cache.loads_in_flight(), 0u);
    absl::StatusOr<std::string> got = absl::UnknownError("unanswered");
    cache.GetAsync(key,
                   [&](absl::StatusOr<std::string> r) { got = std::move(r); });
    executor.RunAll();
    EXPECT_TRUE(got.ok()) << got.status();
  }
}

TEST(ExceptionSafety, GetAsyncSurvivesEveryThrowingKeyCopy) {
  GetAsyncSurvivesEveryThrowingKeyCopy<SingleFlight>();
}

TEST(ExceptionSafety, UncoalescedGetAsyncSurvivesEveryThrowingKeyCopy) {
  GetAsyncSurvivesEveryThrowingKeyCopy<NaiveJitter>();
}

// A GetAsync miss that throws after it queued its load ends that load only
// while nobody runs it: once a blocking Get has claimed it, the Get's load
// ends it, and a later caller joins that load instead of starting another.
TEST(ExceptionSafety, AGetAsyncThatThrowsLeavesTheLoadAGetClaimedRunning) {
  ManualExecutor executor;  // Keeps the load queued until a Get claims it.
  testing::Counter entered;
  testing::Gate release;
  std::atomic<int> loads{0};
  Cache<FlakyKey, std::string, SingleFlight> cache(
      [&](const FlakyKey& k) -> absl::StatusOr<std::string> {
        const int n = ++loads;
        entered.Increment();
        release.Wait();
        return absl::StrCat(k.s, "#", n);
      },
      Options{.ttl = absl::Seconds(10),
              .wait_timeout = absl::Seconds(60),
              .executor = &executor});
  const FlakyKey key("k");
  absl::StatusOr<std::string> claimed = absl::UnknownError("unanswered");
  std::thread getter;
  // The second copy, the waiter's, comes after the queued flight is
  // registered: a blocking Get claims that flight and starts its load.
  key_copies_until_throw = 2;
  before_key_copy_throws = [&] {
    getter = std::thread([&] { claimed = cache.Get(key); });
    EXPECT_TRUE(entered.WaitFor(1));
  };
  EXPECT_THROW(cache.GetAsync(key, [](const absl::StatusOr<std::string>&) {}),
               std::runtime_error);
  key_copies_until_throw = 0;
  before_key_copy_throws = nullptr;
  absl::StatusOr<std::string> joined = absl::UnknownError("unanswered");
  std::thread joiner([&] { joined = cache.Get(key); });
  // Until it joins the running load, or (the defect) starts a second one.
  while (cache.stats().coalesced_waits == 0 && entered.value() < 2) {
    std::this_thread::yield();
  }
  release.Open();
  getter.join();
  joiner.join();
  EXPECT_EQ(loads.load(), 1);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(*claimed, "k#1");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(*joined, "k#1");
  EXPECT_EQ(cache.GetIfPresent(key), "k#1");
  EXPECT_EQ(cache.loads_in_flight(), 0u);
}

// The same with an asynchronous loader: started in GetAsync itself, or by a
// blocking Get under a load-slot limit, where a slot left taken would stop
// every later load.
TEST(ExceptionSafety, AnAsyncLoadWhoseKeyCopyThrowsLeavesNothingTaken) {
  using FlakyCache = Cache<FlakyKey, std::string, SingleFlight>;
  for (int max_concurrent_loads : {0, 1}) {
    for (int n = 1; n <= 6; ++n) {
      SCOPED_TRACE(absl::StrCat("limit ", max_concurrent_loads, ", copy ", n,
                                " throws"));
      ManualClock clock;
      FlakyCache cache(FlakyCache::AsyncLoader(
                           [](const FlakyKey& k, Completion<std::string> done) {
                             std::move(done)(k.s);
                           }),
                       Options{.ttl = absl::Seconds(10),
                               .wait_timeout = absl::Seconds(2),
                               .clock = &clock,
                               .max_concurrent_loads = max_concurrent_loads});
      const FlakyKey key("k");
      int answered = 0;
      key_copies_until_throw = n;
      try {
        if (max_concurrent_loads == 0) {
          cache.GetAsync(
              key, [&](const absl::StatusOr<std::string>&) { ++answered; });
        } else {
          (void)cache.Get(key);
        }
      } catch (const std::runtime_error&) {
      }
      key_copies_until_throw = 0;
      EXPECT_EQ(cache.loads_in_flight(), 0u);
      EXPECT_LE(answered, 1);
      // Neither the key nor the slot is held: both load at once.
      EXPECT_TRUE(cache.Get(FlakyKey("other")).ok());
      absl::StatusOr<std::string> again = cache.Get(key);
      EXPECT_TRUE(again.ok()) << again.status();
    }
  }
}

// A value whose N-th copy on the calling thread throws; moves never do.
thread_local int value_copies_until_throw = 0;
struct Brittle {
  std::string s;
  explicit Brittle(std::string v) : s(std::move(v)) {}
  Brittle(Brittle&&) noexcept = default;
  Brittle& operator=(Brittle&&) noexcept = default;
  Brittle(const Brittle& o) : s(o.s) {
    if (value_copies_until_throw > 0 && --value_copies_until_throw == 0) {
      throw std::runtime_error("copy failed");
    }
  }
  Brittle& operator=(const Brittle&) = default;
};

// Whichever copy of the loaded value throws on the leader's thread (into the
// entry, for the waiters), the waiter that joined the load is answered when
// the load ends, not at its wait_timeout.
TEST(ExceptionSafety, AJoinedWaiterIsAnsweredWhicheverCopyOfTheValueThrows) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(absl::StrCat("copy ", n, " throws"));
    ManualClock clock;
    testing::Gate gate;
    testing::Counter entered;
    Cache<std::string, Brittle, SingleFlight> cache(
        [&](const std::string& k) -> absl::StatusOr<Brittle> {
          entered.Increment();
          gate.Wait();
          value_copies_until_throw = n;  // On the leader's thread.
          return Brittle(k);
        },
        Options{.ttl = absl::Seconds(10),
                .wait_timeout = absl::Seconds(60),
                .clock = &clock});
    std::thread leader([&] {
      try {
        (void)cache.Get("k");
      } catch (const std::exception&) {
        // The leader may get the exception; the waiter must get an answer.
      }
      value_copies_until_throw = 0;
    });
    ASSERT_TRUE(entered.WaitFor(1));
    std::thread waiter([&] { (void)cache.Get("k"); });
    while (cache.stats().coalesced_waits < 1) std::this_thread::yield();
    gate.Open();
    leader.join();
    waiter.join();  // Not after wait_timeout (a minute): it is answered.
    EXPECT_EQ(cache.stats().wait_timeouts, 0u);
    EXPECT_EQ(cache.loads_in_flight(), 0u);
  }
}

// A completion destroyed while an exception unwinds through the loader,
// which catches that exception itself and returns: the load ends as a
// dropped one, with CancelledError, not never.
TEST(ExceptionSafety,
     ACompletionDroppedByAnExceptionTheLoaderCatchesEndsTheLoad) {
  ManualClock clock;
  int answered = 0;
  absl::StatusOr<std::string> got = absl::UnknownError("unanswered");
  StringCache cache(StringCache::AsyncLoader(
                        [](const std::string&, Completion<std::string> done) {
                          try {
                            Completion<std::string> mine = std::move(done);
                            throw std::runtime_error("could not send");
                          } catch (const std::runtime_error&) {
                            // Handled here: the completion is gone.
                          }
                        }),
                    Options{.ttl = absl::Seconds(10),
                            .wait_timeout = absl::InfiniteDuration(),
                            .clock = &clock,
                            .max_load_age = absl::InfiniteDuration()});
  cache.GetAsync("k", [&](absl::StatusOr<std::string> r) {
    got = std::move(r);
    ++answered;
  });
  EXPECT_EQ(answered, 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  EXPECT_EQ(cache.Get("k").status().code(), absl::StatusCode::kCancelled);
}

class RefusingExecutor : public Executor {
 public:
  void Schedule(Task) override { throw std::runtime_error("queue full"); }
};

TEST(ExceptionSafety, AnExecutorThatRefusesARefreshEndsItAndServesTheValue) {
  ManualClock clock;
  RefusingExecutor executor;
  int loads = 0;
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        return absl::StrCat(k, "#", ++loads);
      },
      Options{
          .ttl = absl::Seconds(10), .clock = &clock, .executor = &executor});
  ASSERT_EQ(*cache.Get("k"), "k#1");
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(*cache.Get("k"), "k#1");  // The refresh was refused.
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  EXPECT_EQ(*cache.Get("k"), "k#1");  // Tries again; refused again.
  clock.Advance(absl::Seconds(40));   // Past what SoftTtl serves.
  EXPECT_EQ(*cache.Get("k"), "k#2");  // Loaded in the foreground.
}

}  // namespace
}  // namespace paddock
