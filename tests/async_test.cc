// GetAsync, Await and asynchronous loaders: what a caller without a thread
// to spare gets, when, on which thread, and exactly once; and what the
// cache's destructor does with callers still waiting.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "eager_coroutine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/executor.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;
using ::testing::HasSubstr;

using StringCache = Cache<std::string, std::string, SingleFlight>;

// Records what each callback got, and on which thread.
class Results {
 public:
  StringCache::Callback Callback() {
    return [this](absl::StatusOr<std::string> v) {
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(std::move(v));
      threads_.push_back(std::this_thread::get_id());
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return results_.size();
  }
  std::vector<absl::StatusOr<std::string>> results() {
    std::lock_guard<std::mutex> lock(mu_);
    return results_;
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  // Waits (a minute at most) until `n` callbacks ran.
  bool WaitFor(size_t n) {
    for (int i = 0; i < 60000 && size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return size() >= n;
  }

 private:
  std::mutex mu_;
  std::vector<absl::StatusOr<std::string>> results_;
  std::vector<std::thread::id> threads_;
};

class AsyncTest : public ::testing::Test {
 protected:
  Options options_{
      .ttl = absl::Seconds(10), .clock = &clock_, .executor = &executor_};
  ManualClock clock_;
  ManualExecutor executor_;
  std::atomic<int> loads_{0};
  StringCache::Loader Loader() {
    return [this](const std::string& k) -> absl::StatusOr<std::string> {
      return absl::StrCat(k, "#", ++loads_);
    };
  }
  // Counts each call in `loading`, then returns the key once `release`
  // opens.
  static StringCache::Loader GatedLoader(Gate& release, Counter& loading) {
    return [&release,
            &loading](const std::string& k) -> absl::StatusOr<std::string> {
      loading.Increment();
      release.Wait();
      return k;
    };
  }
};

TEST_F(AsyncTest, TenThousandCallersOfAColdKeyShareOneLoad) {
  StringCache cache(Loader(), options_);
  Results results;
  for (int i = 0; i < 10000; ++i) cache.GetAsync("k", results.Callback());
  EXPECT_EQ(results.size(), 0u);  // Nothing ran on the calling thread.
  EXPECT_EQ(loads_, 0);
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(loads_, 1);
  ASSERT_EQ(results.size(), 10000u);
  for (const auto& r : results.results()) EXPECT_EQ(*r, "k#1");
  EXPECT_EQ(cache.stats().misses, 10000u);
  EXPECT_EQ(cache.stats().coalesced_waits, 9999u);
  EXPECT_EQ(cache.loads_in_flight(), 0u);
}

TEST_F(AsyncTest, AValueServedAtOnceCallsBackInline) {
  StringCache cache(Loader(), options_);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  Results results;
  cache.GetAsync("k", results.Callback());
  ASSERT_EQ(results.size(), 1u);  // Before GetAsync returned.
  EXPECT_EQ(*results.results()[0], "k#1");
  EXPECT_EQ(results.threads()[0], std::this_thread::get_id());
  EXPECT_EQ(executor_.pending(), 0u);
}

// Any callable a Callback can hold takes the same paths: called directly on
// a hit, wrapped when it has to wait. A move-only one, an lvalue one, and
// one invocable only as an rvalue (which goes through a Callback).
TEST_F(AsyncTest, AnyCallableIsCalledOnAHitAndOnAMiss) {
  StringCache cache(Loader(), options_);
  std::vector<std::string> got;
  auto token = std::make_unique<int>(7);
  cache.GetAsync(
      "k", [&got, token = std::move(token)](absl::StatusOr<std::string> v) {
        got.push_back(absl::StrCat(*v, "/", *token));
      });
  EXPECT_TRUE(got.empty());  // A miss: it waits for the load.
  EXPECT_EQ(executor_.RunAll(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "k#1/7");

  auto lvalue = [&got](const absl::StatusOr<std::string>& v) {
    got.push_back(*v);
  };
  cache.GetAsync("k", lvalue);  // A hit: inline.
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1], "k#1");

  struct RvalueOnly {
    std::vector<std::string>* got;
    void operator()(absl::StatusOr<std::string> v) && { got->push_back(*v); }
  };
  RvalueOnly rvalue_only{&got};
  cache.GetAsync("k", rvalue_only);  // Not callable as an lvalue: wrapped.
  cache.GetAsync("other", RvalueOnly{&got});
  EXPECT_EQ(executor_.RunAll(), 1u);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[2], "k#1");
  EXPECT_EQ(got[3], "other#2");
}

TEST_F(AsyncTest, AStaleValueIsServedInlineWhileARefreshIsQueued) {
  Cache<std::string, std::string, SoftTtl> cache(
      [this](const std::string& k) -> absl::StatusOr<std::string> {
        return absl::StrCat(k, "#", ++loads_);
      },
      options_);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  clock_.Advance(absl::Seconds(11));
  std::optional<absl::StatusOr<std::string>> got;
  cache.GetAsync("k", [&](const absl::StatusOr<std::string>& v) { got = v; });
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, "k#1");
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(*cache.Get("k"), "k#2");
}

TEST_F(AsyncTest, TheLoadRunsOnTheExecutorAndCallsBackThere) {
  ThreadPool pool(1);
  options_.executor = &pool;
  StringCache cache(Loader(), options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  ASSERT_TRUE(results.WaitFor(1));
  EXPECT_EQ(*results.results()[0], "k#1");
  EXPECT_NE(results.threads()[0], std::this_thread::get_id());
}

TEST_F(AsyncTest, ALoadErrorReachesEveryAsyncWaiter) {
  StringCache cache(
      [](const std::string&) -> absl::StatusOr<std::string> {
        return absl::UnavailableError("down");
      },
      options_);
  Results results;
  for (int i = 0; i < 3; ++i) cache.GetAsync("k", results.Callback());
  executor_.RunAll();
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results.results()) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  }
}

TEST_F(AsyncTest, AsyncWaitersTimeOutWithoutAThreadEachAndTheLoadStillStores) {
  ThreadPool pool(1);
  options_.executor = &pool;
  options_.wait_timeout = absl::Milliseconds(50);
  Gate release;
  Counter loading;
  StringCache cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        loading.Increment();
        release.Wait();
        return k;
      },
      options_);
  Results results;
  for (int i = 0; i < 100; ++i) cache.GetAsync("k", results.Callback());
  ASSERT_TRUE(results.WaitFor(100));  // Timed out, the load still hung.
  for (const auto& r : results.results()) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  // The first caller started the load: as for a blocking leader, its
  // timeout is not a wait for another caller's load.
  EXPECT_EQ(cache.stats().wait_timeouts, 99u);
  release.Open();
  while (cache.loads_in_flight() != 0) std::this_thread::yield();
  EXPECT_EQ(cache.GetIfPresent("k"), "k");  // Stored all the same.
}

// What `Get` does at wait_timeout, an async waiter gets too: a value the
// policy still keeps (SingleFlight keeps an expired one for this), from the
// timer, while the load goes on.
TEST_F(AsyncTest, AnAsyncWaiterTimingOutGetsAStaleValueThePolicyKeeps) {
  ThreadPool pool(1);
  options_.executor = &pool;
  options_.wait_timeout = absl::Milliseconds(50);
  Gate release;
  std::atomic<int> calls{0};
  StringCache cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        if (++calls > 1) release.Wait();
        return absl::StrCat(k, "#", calls.load());
      },
      options_);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  clock_.Advance(absl::Seconds(11));  // Past the 10 s ttl.
  Results results;
  for (int i = 0; i < 3; ++i) cache.GetAsync("k", results.Callback());
  ASSERT_TRUE(results.WaitFor(3));  // Timed out, the load still hung.
  for (const auto& r : results.results()) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, "k#1");
  }
  EXPECT_EQ(cache.stats().stale_fallbacks, 3u);
  release.Open();
  while (cache.loads_in_flight() != 0) std::this_thread::yield();
  EXPECT_EQ(cache.GetIfPresent("k"), "k#2");  // Stored all the same.
}

// max_load_age lets a blocking Get start a fresh load past a hung one, on
// its own thread. A GetAsync miss would start it on the executor: one more
// thread every max_load_age, until one hung key held the whole pool and no
// other key loaded. It waits for the hung load instead, and times out.
TEST_F(AsyncTest, AHungLoadHoldsOneExecutorThreadHoweverLongItHangs) {
  ThreadPool pool(2);
  options_.executor = &pool;
  options_.wait_timeout = absl::Milliseconds(50);
  Gate release;
  Counter hung_loads;
  StringCache cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        if (k != "hung") return absl::StrCat(k, "#", ++loads_);
        hung_loads.Increment();
        release.Wait();
        return k;
      },
      options_);
  Results hung;
  cache.GetAsync("hung", hung.Callback());
  ASSERT_TRUE(hung_loads.WaitFor(1));
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(options_.max_load_age + absl::Seconds(1));
    cache.GetAsync("hung", hung.Callback());
  }
  ASSERT_TRUE(hung.WaitFor(4));
  for (const auto& r : hung.results()) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  EXPECT_EQ(hung_loads.value(), 1);
  Results other;  // The pool's other thread still loads other keys.
  cache.GetAsync("other", other.Callback());
  ASSERT_TRUE(other.WaitFor(1));
  EXPECT_EQ(other.results()[0].value_or("error"), "other#1");
  release.Open();
  while (cache.loads_in_flight() != 0) std::this_thread::yield();
  EXPECT_EQ(cache.GetIfPresent("hung"), "hung");
}

// The same for a refresh that hangs: its entry stays marked as refreshing,
// so a stale hit past max_load_age does not queue a second refresh beside
// it.
TEST_F(AsyncTest, AHungRefreshIsNotStartedAgainOnTheExecutor) {
  ThreadPool pool(2);
  options_.executor = &pool;
  Gate release;
  Counter refreshing;
  bool hang = false;
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string& k) -> absl::StatusOr<std::string> {
        if (hang) {
          refreshing.Increment();
          release.Wait();
        }
        return absl::StrCat(k, "#", ++loads_);
      },
      options_, SoftTtl{.stale_for = absl::Minutes(10)});
  ASSERT_EQ(*cache.Get("k"), "k#1");
  hang = true;
  clock_.Advance(absl::Seconds(11));  // Stale: a refresh starts.
  EXPECT_EQ(*cache.Get("k"), "k#1");
  ASSERT_TRUE(refreshing.WaitFor(1));
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(options_.max_load_age + absl::Seconds(1));
    EXPECT_EQ(*cache.Get("k"), "k#1");  // Stale, at once.
  }
  EXPECT_EQ(refreshing.value(), 1);
  EXPECT_EQ(cache.stats().refreshes, 1u);
  release.Open();
  while (cache.loads_in_flight() != 0) std::this_thread::yield();
}

TEST_F(AsyncTest, AZeroWaitTimeoutAnswersAtOnce) {
  options_.wait_timeout = absl::ZeroDuration();
  StringCache cache(Loader(), options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.results()[0].status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(executor_.RunAll(), 1u);  // The load still runs and stores.
  EXPECT_EQ(cache.GetIfPresent("k"), "k#1");
}

// What a service's request looks like to GetAsync: the key lives in the
// request, which the callback frees. (The header keeps the freed key's bytes
// clear of the allocator's own bookkeeping, so that a read after the free
// sees the overwritten key in any build, not only under ASan.)
struct Request {
  char header[32] = {};
  std::string key;
};

TEST_F(AsyncTest, ACallbackThatFreesTheKeyInlineLeavesTheLoadItsOwnCopy) {
  // A zero wait_timeout answers the caller inside GetAsync, before the load
  // it started is handed on: that load must not read the caller's key.
  options_.wait_timeout = absl::ZeroDuration();
  StringCache cache(Loader(), options_);
  auto request = std::make_unique<Request>(Request{.key = "k"});
  int answered = 0;
  cache.GetAsync(request->key, [&](const absl::StatusOr<std::string>&) {
    ++answered;
    request->key = "reused";
    request.reset();
  });
  ASSERT_EQ(answered, 1);
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(cache.GetIfPresent("k"), "k#1");
  EXPECT_EQ(cache.GetIfPresent("reused"), std::nullopt);
}

TEST_F(AsyncTest, DestroyingTheCacheCancelsEveryPendingWaiterOnce) {
  Results results;
  {
    StringCache cache(Loader(), options_);
    for (int i = 0; i < 5; ++i) cache.GetAsync("k", results.Callback());
    cache.GetAsync("other", results.Callback());
    EXPECT_EQ(results.size(), 0u);
  }
  ASSERT_EQ(results.size(), 6u);
  for (const auto& r : results.results()) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  }
  executor_.RunAll();  // The queued loads find the cache gone.
  EXPECT_EQ(results.size(), 6u);
  EXPECT_EQ(loads_, 0);
}

TEST_F(AsyncTest, ACallbackThatAsksAgainWhileTheCacheIsDestroyedIsAnswered) {
  // A coroutine resumed with Cancelled by ~Cache may ask the cache once more
  // before it notices: it is answered at once, not left waiting forever.
  Results results;
  std::optional<StringCache> cache;
  cache.emplace(Loader(), options_);
  ASSERT_EQ(*cache->Get("hot"), "hot#1");
  cache->GetAsync("k", [&](const absl::StatusOr<std::string>& first) {
    EXPECT_EQ(first.status().code(), absl::StatusCode::kCancelled);
    cache->GetAsync("hot", results.Callback());
    cache->GetAsync("cold", results.Callback());
  });
  cache.reset();
  executor_.RunAll();  // The queued loads find the cache gone.
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(*results.results()[0], "hot#1");
  EXPECT_EQ(results.results()[1].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(loads_, 1);
}

// Runs tasks on a ThreadPool and counts those that started, so that a test
// can wait until a task is on a thread (not still queued) before it acts.
class CountingExecutor final : public Executor {
 public:
  explicit CountingExecutor(int threads) : pool_(threads) {}
  void Schedule(Task task) override {
    pool_.Schedule([this, task = std::move(task)]() mutable {
      started_.Increment();
      std::move(task)();
    });
  }
  bool WaitForStarted(int n) { return started_.WaitFor(n); }

 private:
  Counter started_;
  ThreadPool pool_;  // Joined first: no task touches `started_` after.
};

TEST_F(AsyncTest, DestroyingTheCacheDropsALoadStillWaitingForASlot) {
  // One load slot, held by a running load; a second key's load waits for it
  // on another pool thread when ~Cache begins. That load is queued work: it
  // must stop waiting and never call the loader, even once the slot frees,
  // and its waiter is cancelled, once. (A task the pool runs only after ~Cache
  // began finds the cache closed and leaves its waiter to the destructor,
  // which answers it after the running load: not this test's case, so the
  // test waits until the second task is on its thread.)
  CountingExecutor pool(2);
  options_.executor = &pool;
  options_.max_concurrent_loads = 1;
  options_.wait_timeout = absl::Seconds(60);
  Gate release;
  Counter loading;
  auto cache =
      std::make_unique<StringCache>(GatedLoader(release, loading), options_);
  cache->GetAsync("running", [](const absl::StatusOr<std::string>&) {});
  ASSERT_TRUE(loading.WaitFor(1));
  Results waiting;
  cache->GetAsync("waiting", waiting.Callback());
  ASSERT_TRUE(pool.WaitForStarted(2));
  std::thread destroyer([&] { cache.reset(); });
  // The destructor waits for the running load; the waiting one gives up
  // meanwhile, rather than wait and then load once the slot frees.
  EXPECT_TRUE(waiting.WaitFor(1));
  release.Open();
  destroyer.join();
  EXPECT_EQ(loading.value(), 1);  // "running" only.
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting.results()[0].status().code(), absl::StatusCode::kCancelled);
}

TEST_F(AsyncTest, AWaiterTimingOutDuringDestructionIsCancelledOnItsThread) {
  // ~Cache waits for a running load; meanwhile the timeout of a waiter whose
  // load is still queued behind it falls due. The destructor cancels that
  // waiter, on its own thread, not the timer thread.
  ThreadPool pool(1);
  options_.executor = &pool;
  options_.wait_timeout = absl::Milliseconds(100);
  Gate release;
  Counter loading;
  auto cache =
      std::make_unique<StringCache>(GatedLoader(release, loading), options_);
  cache->GetAsync("running", [](const absl::StatusOr<std::string>&) {});
  ASSERT_TRUE(loading.WaitFor(1));
  Results queued;
  cache->GetAsync("queued", queued.Callback());  // Behind it on the pool.
  std::thread::id destroyer;
  std::thread destroy([&] {
    destroyer = std::this_thread::get_id();
    cache.reset();
  });
  // Past the waiter's deadline while ~Cache waits for the running load.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  release.Open();
  destroy.join();
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(queued.results()[0].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued.threads()[0], destroyer);
}

TEST_F(AsyncTest, ACallbackThatThrowsDoesNotHurtTheOthers) {
  StringCache cache(Loader(), options_);
  Results results;
  cache.GetAsync("k", [](const absl::StatusOr<std::string>&) {
    throw std::runtime_error("callback failed");
  });
  cache.GetAsync("k", results.Callback());
  executor_.RunAll();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(*results.results()[0], "k#1");
}

// Records the kind of each load started.
class LoadKinds : public Listener {
 public:
  void OnLoadStart(LoadKind kind) override {
    std::lock_guard<std::mutex> lock(mu_);
    kinds_.push_back(kind);
  }
  std::vector<LoadKind> kinds() {
    std::lock_guard<std::mutex> lock(mu_);
    return kinds_;
  }

 private:
  std::mutex mu_;
  std::vector<LoadKind> kinds_;
};

TEST_F(AsyncTest, ABlockingGetFindingAnAsyncLoadQueuedRunsItItself) {
  LoadKinds kinds;
  options_.listener = &kinds;
  StringCache cache(Loader(), options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  EXPECT_EQ(*cache.Get("k"), "k#1");  // Claimed the queued load.
  ASSERT_EQ(results.size(), 1u);      // And answered the async waiter.
  EXPECT_EQ(executor_.RunAll(), 1u);  // The task finds it done.
  EXPECT_EQ(loads_, 1);
  // A caller's load, not a refresh, whoever runs it.
  EXPECT_EQ(kinds.kinds(), std::vector<LoadKind>{LoadKind::kForeground});
}

TEST_F(AsyncTest, ACallbackIsDestroyedOnceCalledThoughItsLoadHangsOn) {
  options_.wait_timeout = absl::Milliseconds(1);
  StringCache cache(Loader(), options_);
  Results results;
  auto held = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = held;
  StringCache::Callback record = results.Callback();
  cache.GetAsync("k", [held = std::move(held), record = std::move(record)](
                          absl::StatusOr<std::string> r) mutable {
    std::move(record)(std::move(r));
  });
  ASSERT_TRUE(results.WaitFor(1));  // Timed out; the load is still queued.
  // What the callback captured is gone with it, not kept until the load ends.
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(executor_.RunAll(), 1u);
}

TEST_F(AsyncTest, DestroyingTheCacheFromItsOwnCallbackDiesWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto cache = std::make_unique<StringCache>(Loader(), options_);
        cache->GetAsync("k", [&](const absl::StatusOr<std::string>&) {
          cache.reset();  // On the executor's thread, inside the load's task.
        });
        executor_.RunAll();
      },
      "destroyed from inside one of its own GetAsync callbacks");
}

TEST_F(AsyncTest, UncoalescedCallersEachLoadAndEachGetTheirOwnResult) {
  Cache<std::string, std::string, NaiveJitter> cache(
      [this](const std::string& k) -> absl::StatusOr<std::string> {
        return absl::StrCat(k, "#", ++loads_);
      },
      options_, NaiveJitter{.jitter = 0});
  Results results;
  for (int i = 0; i < 3; ++i) cache.GetAsync("k", results.Callback());
  EXPECT_EQ(executor_.RunAll(), 3u);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(loads_, 3);
}

// -- Asynchronous loaders.

// Holds the completions an asynchronous loader was given.
class PendingLoads {
 public:
  Cache<std::string, std::string, SingleFlight>::AsyncLoader Loader() {
    return [this](const std::string& key, Completion<std::string> done) {
      std::lock_guard<std::mutex> lock(mu_);
      keys_.push_back(key);
      completions_.push_back(std::move(done));
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return completions_.size();
  }
  Completion<std::string> Take(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(completions_[i]);
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> keys_;
  std::vector<Completion<std::string>> completions_;
};

TEST_F(AsyncTest, AnAsyncLoaderStartsOnTheCallingThreadAndCompletesElsewhere) {
  PendingLoads pending;
  StringCache cache(pending.Loader(), options_);
  Results results;
  for (int i = 0; i < 3; ++i) cache.GetAsync("k", results.Callback());
  ASSERT_EQ(pending.size(), 1u);  // One load, started at once.
  EXPECT_EQ(executor_.pending(), 0u);
  std::thread completer(
      [done = pending.Take(0)]() mutable { std::move(done)("remote"); });
  completer.join();
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results.results()) EXPECT_EQ(*r, "remote");
  EXPECT_EQ(cache.GetIfPresent("k"), "remote");
  EXPECT_EQ(cache.stats().loads, 1u);
}

TEST_F(AsyncTest, AnAsyncLoaderGetsItsOwnKeyAfterTheCallbackFreedTheCallers) {
  options_.wait_timeout = absl::ZeroDuration();
  PendingLoads pending;
  StringCache cache(pending.Loader(), options_);
  auto request = std::make_unique<Request>(Request{.key = "k"});
  cache.GetAsync(request->key, [&](const absl::StatusOr<std::string>&) {
    request->key = "reused";
    request.reset();
  });
  ASSERT_EQ(request, nullptr);
  EXPECT_THAT(pending.keys(), ::testing::ElementsAre("k"));
  pending.Take(0)("v");
  EXPECT_EQ(cache.GetIfPresent("k"), "v");
}

TEST_F(AsyncTest, AnAsyncLoaderThatDropsItsCompletionCancelsItsWaiters) {
  PendingLoads pending;
  StringCache cache(pending.Loader(), options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  { Completion<std::string> dropped = pending.Take(0); }
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.results()[0].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cache.loads_in_flight(), 0u);  // The key is not wedged.
}

TEST_F(AsyncTest, AnAsyncLoaderThatNeverCompletesTimesItsWaitersOut) {
  options_.wait_timeout = absl::Milliseconds(30);
  PendingLoads pending;
  StringCache cache(pending.Loader(), options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  ASSERT_TRUE(results.WaitFor(1));
  EXPECT_EQ(results.results()[0].status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // A completion called after the cache is gone is ignored; here it is
  // still alive and stores.
  pending.Take(0)("late");
  EXPECT_EQ(cache.GetIfPresent("k"), "late");
}

TEST_F(AsyncTest, AnAsyncLoaderThatThrowsFailsItsLoadWithWhat) {
  StringCache cache(
      StringCache::AsyncLoader([](const std::string&, Completion<std::string>) {
        throw std::runtime_error("no connection");
      }),
      options_);
  Results results;
  cache.GetAsync("k", results.Callback());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.results()[0].status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(results.results()[0].status().message(),
              HasSubstr("no connection"));
}

// An asynchronous loader is called as a Loader is: a Get of the key it is
// loading, from inside that call, is refused at once. It waited for the
// completion, which only the call could make: wait_timeout, or forever.
TEST_F(AsyncTest, AnAsyncLoaderThatGetsItsOwnKeyIsRefusedAtOnce) {
  options_.wait_timeout = absl::Seconds(5);
  StringCache* self = nullptr;
  absl::Status inner;
  StringCache cache(StringCache::AsyncLoader([&](const std::string& k,
                                                 Completion<std::string> done) {
                      inner = self->Get(k).status();
                      std::move(done)(k + "!");
                    }),
                    options_);
  self = &cache;
  EXPECT_EQ(*cache.Get("k"), "k!");
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition) << inner;
  EXPECT_EQ(cache.stats().wait_timeouts, 0u);
}

// A completion is called by name (`done(v)`) as readily as moved; the
// second call does nothing.
TEST_F(AsyncTest, ACompletionCalledByNameCountsOnceAndOnlyOnce) {
  StringCache cache(StringCache::AsyncLoader(
                        [](const std::string& k, Completion<std::string> done) {
                          done(k + "!");
                          done(absl::InternalError("a second call is ignored"));
                          EXPECT_FALSE(done);
                        }),
                    options_);
  EXPECT_EQ(*cache.Get("k"), "k!");
  EXPECT_EQ(cache.stats().load_failures, 0u);
}

TEST_F(AsyncTest, GetWorksWithAnAsyncLoaderByWaiting) {
  ThreadPool completers(1);
  StringCache cache(
      StringCache::AsyncLoader(
          [&](const std::string& k, Completion<std::string> done) {
            completers.Schedule([k, done = std::move(done)]() mutable {
              std::move(done)(k + "!");
            });
          }),
      options_);
  EXPECT_EQ(*cache.Get("k"), "k!");
  EXPECT_EQ(*cache.Get("k"), "k!");  // A hit.
  EXPECT_EQ(cache.stats().loads, 1u);
  EXPECT_EQ(cache.stats().wait_timeouts, 0u);
}

TEST_F(AsyncTest, ACompletionCalledAfterTheCacheIsGoneIsIgnored) {
  PendingLoads pending;
  Results results;
  {
    StringCache cache(pending.Loader(), options_);
    cache.GetAsync("k", results.Callback());
  }
  ASSERT_EQ(results.size(), 1u);  // Cancelled by the destructor.
  pending.Take(0)("too late");
  EXPECT_EQ(results.size(), 1u);
}

// -- Await, in a minimal coroutine type.

using Task = testing::EagerCoroutine;

Task AwaitInto(StringCache& cache, std::string key,
               std::optional<absl::StatusOr<std::string>>* out) {
  *out = co_await cache.Await(key);
}

// A coroutine that stays suspended at its end, so that the test destroys
// it, and counts its frame's destruction.
struct OwnedCoroutine {
  struct promise_type {
    OwnedCoroutine get_return_object() {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

struct CountsDestruction {
  int* destroyed;
  ~CountsDestruction() { ++*destroyed; }
};

OwnedCoroutine AwaitOwned(StringCache& cache, std::string key,
                          std::optional<absl::StatusOr<std::string>>* out,
                          int* destroyed) {
  CountsDestruction local{destroyed};
  *out = co_await cache.Await(key);
}

// Task libraries destroy suspended coroutines on cancellation and shutdown:
// the load's answer, when it comes, must not touch the freed frame (under
// ASan this was a heap-use-after-free, then a resume of freed memory).
TEST_F(AsyncTest, DestroyingACoroutineSuspendedInAwaitDetachesIt) {
  PendingLoads pending;
  StringCache cache(pending.Loader(), options_);
  std::optional<absl::StatusOr<std::string>> out;
  int destroyed = 0;
  OwnedCoroutine c = AwaitOwned(cache, "k", &out, &destroyed);
  ASSERT_FALSE(c.handle.done());
  ASSERT_EQ(pending.size(), 1u);
  c.handle.destroy();
  EXPECT_EQ(destroyed, 1);
  pending.Take(0)("loaded");  // Answers nobody, and is stored.
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(cache.GetIfPresent("k"), "loaded");
  EXPECT_EQ(cache.stats().loads, 1u);
}

TEST_F(AsyncTest, ACoroutineDestroyedBeforeTheCacheIsNotResumedByItsEnd) {
  PendingLoads pending;
  std::optional<absl::StatusOr<std::string>> out;
  int destroyed = 0;
  {
    StringCache cache(pending.Loader(), options_);
    OwnedCoroutine c = AwaitOwned(cache, "k", &out, &destroyed);
    c.handle.destroy();
  }  // ~Cache cancels the waiter: its answer is dropped too.
  EXPECT_EQ(destroyed, 1);
  EXPECT_FALSE(out.has_value());
}

TEST_F(AsyncTest, AwaitIsReadyAtOnceOnAHitAndResumesWhereTheLoadCompletes) {
  StringCache cache(Loader(), options_);
  std::optional<absl::StatusOr<std::string>> cold, hot;
  AwaitInto(cache, "k", &cold);
  EXPECT_FALSE(cold.has_value());  // Suspended.
  executor_.RunAll();
  ASSERT_TRUE(cold.has_value());  // Resumed by the load's thread (here).
  EXPECT_EQ(**cold, "k#1");
  AwaitInto(cache, "k", &hot);
  ASSERT_TRUE(hot.has_value());  // Never suspended.
  EXPECT_EQ(**hot, "k#1");
}

}  // namespace
}  // namespace paddock
