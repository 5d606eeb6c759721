// The fault matrix (issue 6): what callers, the stored entry and the stats see
// when the loader fails in each way it can, when writes race with loads, when
// the cache or its executor goes away, and at the edges of the options. Typed
// over the four policies; docs/reliability.md has the table these tests prove.
//
// Time moves only when a test says so (ManualClock); background refreshes run
// only when a test says so (a replaceable ManualExecutor). Real time appears
// only in `wait_timeout`, which is measured on the monotonic clock.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;
using ::testing::HasSubstr;

// How long a call may take beyond what it is allowed to wait, on a loaded
// 2-core machine under a sanitizer. Generous: these tests prove that nobody
// waits for a hung load, not how fast an answer comes.
constexpr absl::Duration kMargin = absl::Seconds(5);

// How long a test waits for something that should happen at once before it
// fails instead of hanging.
constexpr std::chrono::seconds kNoHang{30};

// What the loader does on its next calls.
enum class Fault {
  kNone,        // Returns "<key>#<call>".
  kError,       // Returns UnavailableError("backend down: <key>").
  kThrowStd,    // Throws std::runtime_error("disk on fire: <key>").
  kThrowOther,  // Throws an int.
  kHang,        // Blocks until Release(), then does what the resume fault
                // (kNone unless set) says.
  kFlap,        // Odd calls fail as kError, even calls succeed.
};

// A backend the tests break on purpose. Values name the key and the call
// ("k#3"), so a test can tell which load produced what a caller got. Each
// call takes `load_time` on the test's ManualClock.
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

// A ManualExecutor the test can throw away with its queued tasks, as an
// executor that shuts down does.
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

struct TimedResult {
  absl::StatusOr<std::string> value;
  absl::Duration took;
};

template <typename CacheType, typename Key>
TimedResult TimedGet(CacheType& cache, const Key& key) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value = cache.Get(key);
  return {std::move(value),
          absl::FromChrono(std::chrono::steady_clock::now() - start)};
}

// Runs `cache.Get(key)` on a thread of its own.
template <typename CacheType>
std::future<absl::StatusOr<std::string>> AsyncGet(CacheType& cache,
                                                  std::string key) {
  return std::async(std::launch::async,
                    [&cache, key = std::move(key)] { return cache.Get(key); });
}

template <typename P>
class FaultMatrix : public ::testing::Test {
 protected:
  using StringCache = Cache<std::string, std::string, P>;
  static constexpr bool kCoalesces = P::kCoalesceLoads;
  // The policies that serve a value while a background refresh runs.
  static constexpr bool kRefreshes =
      std::is_same_v<P, SoftTtl> || std::is_same_v<P, XFetch>;

  std::unique_ptr<StringCache> MakeCache(Backend& backend) {
    return std::make_unique<StringCache>(backend.template Loader<StringCache>(),
                                         options_);
  }
  std::unique_ptr<StringCache> MakeCache() { return MakeCache(backend_); }

  // XFetch refreshes early only values whose load took time: give every load
  // 100 ms on the ManualClock (β·Δ·21 = 2.1 s of draw window before expiry).
  void GiveLoadsADuration(Backend& backend) {
    if constexpr (std::is_same_v<P, XFetch>) {
      backend.set_load_time(absl::Milliseconds(100));
    }
  }

  // Loads `key` and moves the clock to where the policy serves that value and
  // queues one background refresh: SoftTtl's stale window, or 10 ms before
  // XFetch's expiry (where each hit triggers with chance e^-0.1).
  void LoadThenQueueRefresh(StringCache& cache, Backend& backend,
                            const std::string& key) {
    if constexpr (!kRefreshes) {
      ADD_FAILURE() << "this policy never refreshes in the background";
      return;
    }
    GiveLoadsADuration(backend);
    absl::StatusOr<std::string> first = cache.Get(key);
    ASSERT_TRUE(first.ok()) << first.status();
    backend.set_load_time(absl::ZeroDuration());
    if constexpr (std::is_same_v<P, SoftTtl>) {
      clock_.Advance(absl::Seconds(11));
    } else {
      clock_.Advance(absl::Milliseconds(9990));
    }
    QueueRefresh(cache, key, *first);
  }

  // Hits `key` until the policy queues a refresh; every hit gets `expected`.
  void QueueRefresh(StringCache& cache, const std::string& key,
                    const std::string& expected) {
    const size_t before = executor_.pending();
    for (int i = 0; i < 100 && executor_.pending() == before; ++i) {
      absl::StatusOr<std::string> v = cache.Get(key);
      ASSERT_TRUE(v.ok()) << v.status();
      ASSERT_EQ(*v, expected);
    }
    ASSERT_EQ(executor_.pending(), before + 1);
  }

  ManualClock clock_;
  ReplaceableExecutor executor_;
  Backend backend_{&clock_};
  Options options_{.ttl = absl::Seconds(10),
                   .wait_timeout = absl::Seconds(5),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 42};
};

using Policies = ::testing::Types<NaiveJitter, SingleFlight, XFetch, SoftTtl>;
TYPED_TEST_SUITE(FaultMatrix, Policies);

// ---------------------------------------------------------------------------
// The loader returns an error, throws, or fails only sometimes.

TYPED_TEST(FaultMatrix, LoaderErrorReachesTheCallerAndNothingIsStored) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  EXPECT_EQ(cache->Get("k").status(),
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
  EXPECT_EQ(*cache->Get("k"), "k#2");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
}

TYPED_TEST(FaultMatrix, LoaderErrorIsRememberedForErrorTtlThenLoadedAgain) {
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(cache->Get("k").status(),
              absl::UnavailableError("backend down: k"));
  }
  EXPECT_EQ(this->backend_.calls(), 1);
  EXPECT_EQ(cache->stats().negative_hits, 9u);
  EXPECT_EQ(cache->size(), 1u);  // The remembered error is an entry.
  this->backend_.set_fault(Fault::kNone);
  this->clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(*cache->Get("k"), "k#2");
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST(FaultMatrix, LoaderThrowingAStdExceptionBecomesInternalWithWhat) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kThrowStd);
  const absl::Status s = cache->Get("k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("disk on fire: k"));
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->stats().load_failures, 1u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("k"), "k#2");
}

TYPED_TEST(FaultMatrix, LoaderThrowingSomethingElseBecomesInternal) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kThrowOther);
  const absl::Status s = cache->Get("k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("not a std::exception"));
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->stats().load_failures, 1u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("k"), "k#2");
}

// Every waiter of a failed load gets the same error; nobody hangs.
TYPED_TEST(FaultMatrix, LoaderFailureReachesEveryWaiterOfThatLoad) {
  if (!TestFixture::kCoalesces) GTEST_SKIP() << "no waiters: no coalescing";
  for (const Fault fault : {Fault::kError, Fault::kThrowStd}) {
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    backend.set_fault(Fault::kHang);
    auto leader = AsyncGet(*cache, "k");
    ASSERT_TRUE(backend.WaitUntilHung(1));
    std::vector<std::future<absl::StatusOr<std::string>>> waiters;
    for (int i = 0; i < 4; ++i) waiters.push_back(AsyncGet(*cache, "k"));
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
  }
}

TYPED_TEST(FaultMatrix, FailedRefreshKeepsServingTheValueAndRetries) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
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
    EXPECT_EQ(*cache->Get("k"), "k#3");
  }
}

// error_ttl throttles the retries of a failed refresh; it must not take away
// a value the policy still serves.
TYPED_TEST(FaultMatrix, FailedRefreshWithErrorTtlKeepsServingTheValue) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  this->options_.error_ttl = absl::Seconds(1);
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  this->backend_.set_fault(Fault::kError);
  EXPECT_EQ(this->executor_.RunAll(), 1u);
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<std::string> v = cache->Get("k");
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, "k#1");
  }
  EXPECT_EQ(this->executor_.pending(), 0u);  // No retry within error_ttl.
}

TYPED_TEST(FaultMatrix, FlappingLoaderServesEachGoodValueAndCachesNoError) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kFlap);
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    this->clock_.Advance(absl::Seconds(100));  // Past every policy's window.
    EXPECT_EQ(cache->Get("k").status(),
              absl::UnavailableError("backend down: k"));
    const std::string good = absl::StrCat("k#", 2 * round + 2);
    EXPECT_EQ(*cache->Get("k"), good);
    EXPECT_EQ(*cache->Get("k"), good);  // A hit.
  }
  Stats s = cache->stats();
  EXPECT_EQ(s.loads, 2u * kRounds);
  EXPECT_EQ(s.load_failures, 1u * kRounds);
  EXPECT_EQ(s.hits, 1u * kRounds);
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST(FaultMatrix, RecoversAtOnceAfterALongFailureStreak) {
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(cache->Get("k").ok());
  EXPECT_EQ(cache->stats().load_failures, 1000u);
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("k"), "k#1001");
  EXPECT_EQ(*cache->Get("k"), "k#1001");
  EXPECT_EQ(cache->stats().hits, 1u);
}

TYPED_TEST(FaultMatrix, LongFailureStreakWithErrorTtlLoadsOncePerErrorTtl) {
  this->options_.error_ttl = absl::Seconds(1);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kError);
  // 100 s of callers, ten a second.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_FALSE(cache->Get("k").ok());
    this->clock_.Advance(absl::Milliseconds(100));
  }
  EXPECT_EQ(this->backend_.calls(), 100);
  EXPECT_EQ(cache->stats().negative_hits, 900u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("k"), "k#101");  // error_until has just passed.
  EXPECT_EQ(*cache->Get("k"), "k#101");
  EXPECT_EQ(cache->size(), 1u);
}

// ---------------------------------------------------------------------------
// The loader is slow, or never returns until the test releases it.

TYPED_TEST(FaultMatrix, SlowLoadTimesOutItsWaitersAndStillStores) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto leader = AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = TimedGet(*cache, "k");
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
  // NaiveJitter: the last load to finish stores.
  EXPECT_EQ(cache->GetIfPresent("k"), "k#1");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
}

TYPED_TEST(FaultMatrix, SlowLoadOfAnExpiredValueServesItStaleMeanwhile) {
  this->options_.wait_timeout = absl::Milliseconds(100);
  auto cache = this->MakeCache();
  ASSERT_EQ(*cache->Get("k"), "k#1");
  // Expired for every policy (NaiveJitter's longest ttl is 12 s); kept as a
  // fallback by SingleFlight and XFetch (2·ttl), served stale by SoftTtl.
  this->clock_.Advance(absl::Seconds(13));
  this->backend_.set_fault(Fault::kHang);
  if constexpr (std::is_same_v<TypeParam, SoftTtl>) {
    // Nobody waits: the stale value at once, the slow load in the background.
    const TimedResult hit = TimedGet(*cache, "k");
    EXPECT_EQ(*hit.value, "k#1");
    EXPECT_LT(hit.took, kMargin);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(this->backend_.WaitUntilHung(1));
    EXPECT_EQ(*cache->Get("k"), "k#1");
    EXPECT_EQ(cache->stats().wait_timeouts, 0u);
    this->backend_.Release();
    refresh.join();
    EXPECT_EQ(*cache->Get("k"), "k#2");
    return;
  }
  auto leader = AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult waiter = TimedGet(*cache, "k");
  EXPECT_LT(waiter.took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(*waiter.value, "k#1");  // Stale, at wait_timeout.
    EXPECT_EQ(cache->stats().stale_fallbacks, 1u);
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
TYPED_TEST(FaultMatrix, HungLoadStopsBlockingItsKeyAfterMaxLoadAge) {
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  absl::StatusOr<std::string> second = cache->Get("k");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
  } else {
    EXPECT_EQ(*second, "k#2");  // No coalescing: nothing to be blocked on.
  }
  this->clock_.Advance(absl::Seconds(29));
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(cache->Get("k").status().code(),
              absl::StatusCode::kDeadlineExceeded);  // Still within the bound.
    EXPECT_EQ(cache->loads_in_flight(), 1u);
  }
  this->clock_.Advance(absl::Seconds(2));  // 31 s: past max_load_age.
  const std::string fresh = absl::StrCat("k#", TestFixture::kCoalesces ? 2 : 3);
  EXPECT_EQ(*cache->Get("k"), fresh);
  EXPECT_EQ(*cache->Get("k"), fresh);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "k#1");
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(cache->GetIfPresent("k"), fresh);
  }
}

TYPED_TEST(FaultMatrix, HungRefreshStopsBlockingItsKeyAfterMaxLoadAge) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Seconds(20);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  this->backend_.set_fault(Fault::kHang);
  std::thread refresh([&] { this->executor_.RunOne(); });
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("k"), "k#1");  // Served while the refresh hangs.
  // Past the policy's window and past max_load_age: a foreground load.
  this->clock_.Advance(absl::Seconds(45));
  EXPECT_EQ(*cache->Get("k"), "k#3");
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  this->backend_.Release();
  refresh.join();
  EXPECT_EQ(cache->GetIfPresent("k"), "k#3");  // The hung one did not store.
}

// With a load limit, a hung load holds a slot. It must not hold it past
// max_load_age, or one hung loader makes every key unusable for good.
TYPED_TEST(FaultMatrix, HungLoadHoldingTheOnlyLoadSlotDoesNotWedgeTheCache) {
  this->options_.max_concurrent_loads = 1;
  this->options_.max_load_age = absl::Seconds(30);
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(cache->Get("b").status().code(),
            absl::StatusCode::kDeadlineExceeded);  // Within the bound.
  this->clock_.Advance(absl::Seconds(31));
  const absl::StatusOr<std::string> b = cache->Get("b");
  EXPECT_TRUE(b.ok()) << b.status();
  const absl::StatusOr<std::string> a = cache->Get("a");
  EXPECT_TRUE(a.ok()) << a.status();
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
}

// ---------------------------------------------------------------------------
// Recursive loads.

TYPED_TEST(FaultMatrix, RecursiveGetOnTheLoadersThreadFailsForItsOwnKey) {
  typename TestFixture::StringCache* self = nullptr;
  absl::Status own, mutual;
  absl::StatusOr<std::string> other;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == "a") {
          own = self->Get("a").status();
          other = self->Get("b");  // Works, and b's loader recurses into a.
        } else if (key == "b") {
          mutual = self->Get("a").status();
        }
        return absl::StrCat("value of ", key);
      },
      this->options_);
  self = &cache;
  EXPECT_EQ(*cache.Get("a"), "value of a");
  EXPECT_EQ(own.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mutual.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*other, "value of b");
  EXPECT_EQ(cache.loads_in_flight(), 0u);
  EXPECT_EQ(cache.stats().loads, 2u);
}

TYPED_TEST(FaultMatrix, RecursiveGetFromARefreshGetsTheStoredValue) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  typename TestFixture::StringCache* self = nullptr;
  std::atomic<int> calls{0};
  std::optional<absl::StatusOr<std::string>> inner;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        const int call = ++calls;
        if (call == 1 && std::is_same_v<TypeParam, XFetch>) {
          this->clock_.Advance(absl::Milliseconds(100));  // Δ for XFetch.
        }
        if (call == 2) inner = self->Get(key);  // The refresh.
        return absl::StrCat(key, "#", call);
      },
      this->options_);
  self = &cache;
  ASSERT_EQ(*cache.Get("k"), "k#1");
  if constexpr (std::is_same_v<TypeParam, SoftTtl>) {
    this->clock_.Advance(absl::Seconds(11));
  } else {
    this->clock_.Advance(absl::Milliseconds(9990));
  }
  this->QueueRefresh(cache, "k", "k#1");
  EXPECT_EQ(this->executor_.RunAll(), 1u);
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(**inner, "k#1");  // Still servable: no wait, no deadlock.
  EXPECT_EQ(*cache.Get("k"), "k#2");
}

// Recursion through another thread is not detectable; it is bounded by
// wait_timeout like any wait.
TYPED_TEST(FaultMatrix,
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
                    return TimedGet(*self, key);
                  }).get();
        }
        return absl::StrCat(key, "#", call);
      },
      this->options_);
  self = &cache;
  EXPECT_EQ(*cache.Get("k"), "k#1");
  ASSERT_TRUE(inner.has_value());
  EXPECT_LT(inner->took, this->options_.wait_timeout + kMargin);
  if constexpr (TestFixture::kCoalesces) {
    EXPECT_EQ(inner->value.status().code(),
              absl::StatusCode::kDeadlineExceeded);
  } else {
    EXPECT_EQ(*inner->value, "k#2");
  }
}

// ---------------------------------------------------------------------------
// Invalidate, Put and InvalidateAll racing with a load and with a refresh.

enum class Write { kInvalidate, kPut, kInvalidateAll };

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

std::string Name(Write write) {
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

constexpr Write kWrites[] = {Write::kInvalidate, Write::kPut,
                             Write::kInvalidateAll};

TYPED_TEST(FaultMatrix, WriteDuringAForegroundLoadWinsOverItsResult) {
  this->options_.wait_timeout = absl::Minutes(1);
  for (const Write write : kWrites) {
    SCOPED_TRACE(Name(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    backend.set_fault(Fault::kHang);
    auto leader = AsyncGet(*cache, "k");
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    std::optional<std::future<absl::StatusOr<std::string>>> waiter;
    if constexpr (TestFixture::kCoalesces) {
      waiter = AsyncGet(*cache, "k");
      while (cache->stats().coalesced_waits < 1) std::this_thread::yield();
    }
    Apply(write, *cache, "k");
    // A caller after the write does not join the superseded load.
    const std::string after = write == Write::kPut ? "put" : "k#2";
    EXPECT_EQ(*cache->Get("k"), after);
    backend.Release();
    EXPECT_EQ(*leader.get(), "k#1");  // Its callers still get its result ...
    if (waiter.has_value()) {
      EXPECT_EQ(*waiter->get(), "k#1");
    }
    EXPECT_EQ(cache->GetIfPresent("k"), after);  // ... but it did not store.
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

TYPED_TEST(FaultMatrix, WriteWhileARefreshIsQueuedWinsOverItsResult) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(Name(write));
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

TYPED_TEST(FaultMatrix, WriteWhileARefreshRunsWinsOverItsResult) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  for (const Write write : kWrites) {
    SCOPED_TRACE(Name(write));
    Backend backend(&this->clock_);
    auto cache = this->MakeCache(backend);
    this->LoadThenQueueRefresh(*cache, backend, "k");
    backend.set_fault(Fault::kHang);
    std::thread refresh([&] { this->executor_.RunOne(); });
    ASSERT_TRUE(backend.WaitUntilHung(1));
    backend.set_fault(Fault::kNone);
    Apply(write, *cache, "k");
    const std::string after = write == Write::kPut ? "put" : "k#3";
    EXPECT_EQ(*cache->Get("k"), after);
    backend.Release();
    refresh.join();
    EXPECT_EQ(cache->GetIfPresent("k"), after);
    EXPECT_EQ(cache->loads_in_flight(), 0u);
  }
}

// ---------------------------------------------------------------------------
// Destroying the cache, or the executor, with background work pending.

TYPED_TEST(FaultMatrix, DestroyingTheCacheDropsRefreshesQueuedOnAnExecutor) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  {
    auto cache = this->MakeCache();
    this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  }
  EXPECT_EQ(this->executor_.RunAll(), 1u);  // Runs, skips the dead cache.
  EXPECT_EQ(this->backend_.calls(), 1);
}

TYPED_TEST(FaultMatrix, DestroyingTheCacheDropsRefreshesQueuedOnAThreadPool) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
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
  ASSERT_EQ(*cache->Get("k"), "k#1");
  this->clock_.Advance(std::is_same_v<TypeParam, SoftTtl>
                           ? absl::Seconds(11)
                           : absl::Milliseconds(9990));
  for (int i = 0; i < 100 && cache->stats().refreshes == 0; ++i) {
    ASSERT_EQ(*cache->Get("k"), "k#1");
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

TYPED_TEST(FaultMatrix, DestroyingTheCacheWaitsForARunningRefresh) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  ThreadPool pool(1);
  this->options_.executor = &pool;
  this->GiveLoadsADuration(this->backend_);
  auto cache = this->MakeCache();
  ASSERT_EQ(*cache->Get("k"), "k#1");
  this->backend_.set_load_time(absl::ZeroDuration());
  this->clock_.Advance(std::is_same_v<TypeParam, SoftTtl>
                           ? absl::Seconds(11)
                           : absl::Milliseconds(9990));
  this->backend_.set_fault(Fault::kHang);
  for (int i = 0; i < 100 && cache->stats().refreshes == 0; ++i) {
    ASSERT_EQ(*cache->Get("k"), "k#1");
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
TYPED_TEST(FaultMatrix, DroppedRefreshEndsItsLoadWithCancelled) {
  if (!TestFixture::kRefreshes) GTEST_SKIP() << "no background refresh";
  this->options_.max_load_age = absl::Hours(1);
  this->options_.wait_timeout = absl::Minutes(1);
  auto cache = this->MakeCache();
  this->LoadThenQueueRefresh(*cache, this->backend_, "k");
  // Past what the policy serves: callers now wait for the queued refresh.
  this->clock_.Advance(absl::Seconds(35));
  auto waiter = AsyncGet(*cache, "k");
  while (cache->stats().coalesced_waits < 1) std::this_thread::yield();
  EXPECT_EQ(this->executor_.DropAll(), 1u);
  EXPECT_EQ(waiter.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cache->loads_in_flight(), 0u);
  EXPECT_EQ(*cache->Get("k"), "k#2");
  EXPECT_EQ(cache->stats().loads, 2u);  // The dropped refresh never loaded.
}

// ---------------------------------------------------------------------------
// Options at their edges.

TYPED_TEST(FaultMatrix, MaxEntriesOfOneHoldsOnlyTheLatestEntry) {
  this->options_.max_entries = 1;
  this->options_.error_ttl = absl::Seconds(5);
  auto cache = this->MakeCache();
  EXPECT_EQ(*cache->Get("a"), "a#1");
  EXPECT_EQ(*cache->Get("b"), "b#2");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("a"), std::nullopt);
  EXPECT_EQ(cache->GetIfPresent("b"), "b#2");
  cache->Put("c", "put");
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), "put");
  this->backend_.set_fault(Fault::kError);
  EXPECT_FALSE(cache->Get("d").ok());  // A remembered error is an entry too.
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->GetIfPresent("c"), std::nullopt);
  EXPECT_EQ(cache->stats().evictions, 3u);
  this->backend_.set_fault(Fault::kNone);
  EXPECT_EQ(*cache->Get("c"), "c#4");
  EXPECT_EQ(cache->size(), 1u);
}

TYPED_TEST(FaultMatrix, TtlOfOneNanosecondReloadsAfterEveryTick) {
  this->options_.ttl = absl::Nanoseconds(1);
  auto cache = this->MakeCache();
  EXPECT_EQ(*cache->Get("k"), "k#1");
  for (int tick = 1; tick <= 100; ++tick) {
    this->clock_.Advance(absl::Nanoseconds(1));
    absl::StatusOr<std::string> v = cache->Get("k");
    ASSERT_TRUE(v.ok()) << v.status();
    if constexpr (std::is_same_v<TypeParam, SoftTtl>) {
      EXPECT_EQ(*v, absl::StrCat("k#", tick));  // Stale; refresh queued.
      EXPECT_EQ(this->executor_.RunAll(), 1u);
    } else {
      EXPECT_EQ(*v, absl::StrCat("k#", tick + 1));
    }
  }
  EXPECT_EQ(this->backend_.calls(), 101);
  EXPECT_LE(cache->size(), 1u);
}

TYPED_TEST(FaultMatrix, InfiniteTtlNeverExpires) {
  this->options_.ttl = absl::InfiniteDuration();
  auto cache = this->MakeCache();
  EXPECT_EQ(*cache->Get("k"), "k#1");
  this->clock_.Advance(absl::Hours(24 * 365 * 100));
  EXPECT_EQ(*cache->Get("k"), "k#1");
  EXPECT_EQ(this->executor_.pending(), 0u);
}

TYPED_TEST(FaultMatrix, WaitTimeoutZeroAnswersAtOnceWhileALoadRuns) {
  this->options_.wait_timeout = absl::ZeroDuration();
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = TimedGet(*cache, "k");
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

TYPED_TEST(FaultMatrix, WaitTimeoutZeroWithoutAFreeLoadSlotAnswersAtOnce) {
  this->options_.wait_timeout = absl::ZeroDuration();
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = AsyncGet(*cache, "a");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  const TimedResult r = TimedGet(*cache, "b");
  EXPECT_LT(r.took, kMargin);
  EXPECT_EQ(r.value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache->loads_in_flight(), TestFixture::kCoalesces ? 1u : 0u);
  this->backend_.Release();
  EXPECT_EQ(*hung.get(), "a#1");
  EXPECT_EQ(*cache->Get("b"), "b#2");
}

// A wait_timeout far beyond any deadline (a thousand years) means "wait for
// the load", not "time out at once" through an overflow of now + timeout.
TYPED_TEST(FaultMatrix, HugeWaitTimeoutWaitsForTheLoad) {
  this->options_.wait_timeout = absl::Hours(24 * 365 * 1000);
  this->options_.max_concurrent_loads = 1;
  auto cache = this->MakeCache();
  this->backend_.set_fault(Fault::kHang);
  auto hung = AsyncGet(*cache, "k");
  ASSERT_TRUE(this->backend_.WaitUntilHung(1));
  this->backend_.set_fault(Fault::kNone);
  // Waits for the load (coalescing) or for the load slot (every policy).
  auto same_key = AsyncGet(*cache, "k");
  auto other_key = AsyncGet(*cache, "other");
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
  EXPECT_THAT(*other, HasSubstr("other#"));
}

TYPED_TEST(FaultMatrix, HugeKeysAreStoredFoundAndDetectedIntact) {
  const std::string big(8 << 20, 'x');
  const std::string a = big + "a", b = big + "b";  // Differ in the last byte.
  typename TestFixture::StringCache* self = nullptr;
  absl::Status recursive;
  typename TestFixture::StringCache cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        if (key == a) recursive = self->Get(a).status();
        return absl::StrCat(key.size(), ":", key.substr(key.size() - 1));
      },
      this->options_);
  self = &cache;
  const std::string size = absl::StrCat(big.size() + 1);
  EXPECT_EQ(*cache.Get(a), size + ":a");
  EXPECT_EQ(recursive.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*cache.Get(b), size + ":b");
  EXPECT_EQ(*cache.Get(a), size + ":a");
  EXPECT_EQ(cache.stats().loads, 2u);
  cache.Put(b, "put");
  EXPECT_EQ(cache.GetIfPresent(b), "put");
  cache.Invalidate(a);
  EXPECT_EQ(cache.GetIfPresent(a), std::nullopt);
  EXPECT_EQ(cache.size(), 1u);
}

// A key whose hash is expensive: the cache hashes it once per hit and a
// bounded number of times per miss, however many entries there are.
struct SlowKey {
  std::string name;
  friend bool operator==(const SlowKey&, const SlowKey&) = default;
};

std::atomic<int> slow_hashes{0};

struct SlowKeyHash {
  size_t operator()(const SlowKey& key) const {
    ++slow_hashes;
    size_t h = absl::Hash<std::string>()(key.name);
    for (int i = 0; i < 20000; ++i) h = h * 0x9e3779b97f4a7c15ULL + i;
    return h;
  }
};

// Every key collides: lookups must still compare keys.
struct ConstantHash {
  size_t operator()(const std::string&) const { return 12345; }
};

TYPED_TEST(FaultMatrix, ExpensiveHashIsComputedOnceOnAHit) {
  Cache<SlowKey, std::string, TypeParam, SlowKeyHash> cache(
      [](const SlowKey& key) -> absl::StatusOr<std::string> {
        return key.name;
      },
      this->options_);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(*cache.Get(SlowKey{absl::StrCat(i)}), absl::StrCat(i));
  }
  slow_hashes = 0;
  EXPECT_EQ(*cache.Get(SlowKey{"7"}), "7");
  EXPECT_EQ(slow_hashes, 1);
  slow_hashes = 0;
  EXPECT_EQ(*cache.Get(SlowKey{"miss"}), "miss");
  EXPECT_LE(slow_hashes, 4);  // The entry and the in-flight map.
}

TYPED_TEST(FaultMatrix, CollidingHashesKeepKeysApart) {
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
      ASSERT_EQ(*cache.Get(key), "value of " + key);
      ASSERT_LE(cache.size(), 64u);
    }
  }
  cache.Invalidate("199");
  EXPECT_EQ(cache.GetIfPresent("199"), std::nullopt);
  EXPECT_EQ(cache.GetIfPresent("198"), "value of 198");
}

}  // namespace
}  // namespace paddock
