// Tests of paddock/listener.h: which event a cache reports, when, how many
// times and on which thread, for foreground loads, refreshes, stale serves,
// coalesced waits, wait timeouts and evictions; and what reports nothing.
// ManualClock and ManualExecutor throughout; real threads only where a caller
// must block, and never a sleep.

#include "paddock/listener.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../examples/refresh_ahead_policy.h"
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
#include "paddock/testing/sync.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// Records every call as a line ("LoadFinish(foreground, 2s, OK)") with the
// thread it came from. Thread-safe.
class RecordingListener : public Listener {
 public:
  struct Event {
    std::string what;
    std::thread::id thread;
  };

  void OnLoadStart(LoadKind kind) override {
    Record(absl::StrCat("LoadStart(", Name(kind), ")"));
  }
  void OnLoadFinish(LoadKind kind, absl::Duration duration,
                    const absl::Status& status) override {
    Record(absl::StrCat("LoadFinish(", Name(kind), ", ",
                        absl::FormatDuration(duration), ", ", status.ToString(),
                        ")"));
  }
  void OnStaleServed(absl::Duration age) override {
    Record(absl::StrCat("StaleServed(", absl::FormatDuration(age), ")"));
  }
  void OnCoalescedWait() override { Record("CoalescedWait"); }
  void OnWaitTimeout() override { Record("WaitTimeout"); }
  void OnEviction() override { Record("Eviction"); }

  // Returns the events since the last call, in the order recorded, and
  // forgets them.
  std::vector<Event> TakeEvents() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(events_, {});
  }
  // TakeEvents() without the threads.
  std::vector<std::string> Take() {
    std::vector<std::string> lines;
    for (Event& e : TakeEvents()) lines.push_back(std::move(e.what));
    return lines;
  }
  // Take(), only the events of `thread`.
  std::vector<std::string> TakeFrom(std::thread::id thread) {
    std::vector<std::string> lines;
    for (Event& e : TakeEvents()) {
      if (e.thread == thread) lines.push_back(std::move(e.what));
    }
    return lines;
  }

 private:
  static const char* Name(LoadKind kind) {
    return kind == LoadKind::kForeground ? "foreground" : "refresh";
  }
  void Record(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({std::move(what), std::this_thread::get_id()});
  }

  std::mutex mu_;
  std::vector<Event> events_;
};

class ListenerTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  ManualExecutor executor_;
  RecordingListener listener_;
  Options options_{.ttl = absl::Seconds(10),
                   .clock = &clock_,
                   .executor = &executor_,
                   .seed = 1,
                   .listener = &listener_};
};

// ---------------------------------------------------------------------------
// Loads.

TEST_F(ListenerTest, AForegroundLoadReportsItsStartAndItsFinishOnce) {
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        clock_.Advance(absl::Seconds(2));  // The load's duration.
        return "v";
      },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  EXPECT_THAT(listener_.Take(), ElementsAre("LoadStart(foreground)",
                                            "LoadFinish(foreground, 2s, OK)"));
}

TEST_F(ListenerTest, AHitReportsNothing) {
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string&) -> absl::StatusOr<std::string> { return "v"; },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  listener_.Take();
  clock_.Advance(absl::Seconds(9));  // Fresh.
  ASSERT_EQ(*cache.Get("k"), "v");
  ASSERT_EQ(cache.GetIfPresent("k"), "v");
  cache.Put("k", "put");
  ASSERT_EQ(*cache.Get("k"), "put");
  EXPECT_THAT(listener_.Take(), IsEmpty());
}

TEST_F(ListenerTest, AFailedLoadReportsTheLoadersStatus) {
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string&) -> absl::StatusOr<std::string> {
        return absl::UnavailableError("backend down");
      },
      options_);
  ASSERT_FALSE(cache.Get("k").ok());
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(foreground)",
                          "LoadFinish(foreground, 0, UNAVAILABLE: backend "
                          "down)"));
}

TEST_F(ListenerTest, AThrowingLoaderIsReportedWithAnInternalError) {
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string&) -> absl::StatusOr<std::string> {
        throw std::runtime_error("disk on fire");
      },
      options_);
  ASSERT_FALSE(cache.Get("k").ok());
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(foreground)",
                          "LoadFinish(foreground, 0, INTERNAL: paddock: the "
                          "loader threw: disk on fire)"));
}

TEST_F(ListenerTest, ARefreshReportsItsLoadWhenItRunsNotWhenItIsQueued) {
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        clock_.Advance(absl::Seconds(1));
        return "v";
      },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  listener_.Take();
  clock_.Advance(absl::Seconds(11));  // Stale: queues a refresh.
  ASSERT_EQ(*cache.Get("k"), "v");
  ASSERT_EQ(executor_.pending(), 1u);
  EXPECT_THAT(listener_.Take(), ElementsAre("StaleServed(11s)"));
  ASSERT_EQ(executor_.RunAll(), 1u);
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(refresh)", "LoadFinish(refresh, 1s, OK)"));
}

TEST_F(ListenerTest, AFailedRefreshReportsItsLoadAndNoStaleServe) {
  bool fail = false;
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (fail) return absl::UnavailableError("backend down");
        return "v";
      },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(11));
  ASSERT_EQ(*cache.Get("k"), "v");
  listener_.Take();
  fail = true;
  ASSERT_EQ(executor_.RunAll(), 1u);
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(refresh)",
                          "LoadFinish(refresh, 0, UNAVAILABLE: backend down)"));
}

// RefreshAhead refreshes at 75 % of the ttl: the value it serves meanwhile is
// fresh, so no stale serve is reported.
TEST_F(ListenerTest, AnEarlyRefreshOfAFreshValueReportsOnlyItsLoad) {
  Cache<std::string, std::string, paddock_examples::RefreshAhead> cache(
      [](const std::string&) -> absl::StatusOr<std::string> { return "v"; },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  listener_.Take();
  clock_.Advance(absl::Seconds(8));
  ASSERT_EQ(*cache.Get("k"), "v");
  ASSERT_EQ(executor_.pending(), 1u);
  EXPECT_THAT(listener_.Take(), IsEmpty());
  ASSERT_EQ(executor_.RunAll(), 1u);
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(refresh)", "LoadFinish(refresh, 0, OK)"));
}

// An executor that drops a queued refresh (here: destroyed with it) never
// started its load.
TEST_F(ListenerTest, ADroppedRefreshReportsNoLoad) {
  auto executor = std::make_unique<ManualExecutor>();
  options_.executor = executor.get();
  Cache<std::string, std::string, SoftTtl> cache(
      [](const std::string&) -> absl::StatusOr<std::string> { return "v"; },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(11));
  ASSERT_EQ(*cache.Get("k"), "v");
  ASSERT_EQ(executor->pending(), 1u);
  listener_.Take();
  executor.reset();
  EXPECT_THAT(listener_.Take(), IsEmpty());
}

TEST_F(ListenerTest, ARecursiveGetRefusedForItsOwnKeyReportsNoLoad) {
  Cache<std::string, std::string, SingleFlight>* self = nullptr;
  absl::Status inner;
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        inner = self->Get(key).status();
        return "v";
      },
      options_);
  self = &cache;
  ASSERT_TRUE(cache.Get("k").ok());
  ASSERT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(listener_.Take(), ElementsAre("LoadStart(foreground)",
                                            "LoadFinish(foreground, 0, OK)"));
}

TEST_F(ListenerTest, ANegativelyCachedErrorReportsNoLoad) {
  options_.error_ttl = absl::Seconds(5);
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string&) -> absl::StatusOr<std::string> {
        return absl::UnavailableError("backend down");
      },
      options_);
  ASSERT_FALSE(cache.Get("k").ok());
  listener_.Take();
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(cache.Get("k").ok());
  EXPECT_THAT(listener_.Take(), IsEmpty());
}

// ---------------------------------------------------------------------------
// Stale serves.

// While SoftTtl refreshes, every caller served the stale value is reported,
// each with the value's age at that moment.
TEST_F(ListenerTest, EveryStaleHitIsReportedWithTheValuesAge) {
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        clock_.Advance(absl::Seconds(1));
        return "v";
      },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());  // Loaded at 1 s.
  listener_.Take();
  clock_.Advance(absl::Seconds(11));
  ASSERT_EQ(*cache.Get("k"), "v");  // Queues the refresh.
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(*cache.Get("k"), "v");  // The refresh is already queued.
  ASSERT_EQ(*cache.Get("k"), "v");
  EXPECT_THAT(
      listener_.Take(),
      ElementsAre("StaleServed(11s)", "StaleServed(12s)", "StaleServed(12s)"));
  EXPECT_EQ(executor_.pending(), 1u);
}

// SoftTtl's stale-if-error: the caller whose load failed gets the old value,
// and that is reported after the failed load.
TEST_F(ListenerTest, AStaleValueInPlaceOfAFailedLoadIsReportedAfterIt) {
  bool fail = false;
  Cache<std::string, std::string, SoftTtl> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (fail) return absl::UnavailableError("backend down");
        return "v";
      },
      options_,
      SoftTtl{.stale_for = absl::Seconds(5),
              .stale_if_error = absl::Seconds(60)});
  ASSERT_TRUE(cache.Get("k").ok());
  listener_.Take();
  fail = true;
  clock_.Advance(absl::Seconds(20));  // Past stale_for: a foreground load.
  ASSERT_EQ(*cache.Get("k"), "v");
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(foreground)",
                          "LoadFinish(foreground, 0, UNAVAILABLE: backend "
                          "down)",
                          "StaleServed(20s)"));
}

// ---------------------------------------------------------------------------
// Coalesced waits and wait timeouts.

// One load, one wait per waiter, no timeout; each event on the thread that
// had it.
TEST_F(ListenerTest, EveryCoalescedWaiterIsReportedOnceOnItsOwnThread) {
  constexpr int kWaiters = 3;
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
  const std::thread::id leader_id = leader.get_id();
  ASSERT_TRUE(entered.WaitFor(1));
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] { EXPECT_EQ(*cache.Get("k"), "v"); });
  }
  while (cache.stats().coalesced_waits < kWaiters) std::this_thread::yield();
  gate.Open();
  leader.join();
  std::vector<std::thread::id> waiter_ids;
  for (std::thread& t : waiters) {
    waiter_ids.push_back(t.get_id());
    t.join();
  }
  std::vector<std::string> from_leader, from_waiters;
  for (RecordingListener::Event& e : listener_.TakeEvents()) {
    if (e.thread == leader_id) {
      from_leader.push_back(e.what);
    } else {
      EXPECT_NE(std::find(waiter_ids.begin(), waiter_ids.end(), e.thread),
                waiter_ids.end())
          << e.what << " on a thread that did not call Get";
      from_waiters.push_back(e.what);
    }
  }
  EXPECT_THAT(from_leader, ElementsAre("LoadStart(foreground)",
                                       "LoadFinish(foreground, 0, OK)"));
  EXPECT_THAT(
      from_waiters,
      UnorderedElementsAre("CoalescedWait", "CoalescedWait", "CoalescedWait"));
}

TEST_F(ListenerTest, AWaitThatTimesOutIsReportedAsAWaitThenATimeout) {
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
  ASSERT_EQ(cache.Get("k").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(listener_.TakeFrom(std::this_thread::get_id()),
              ElementsAre("CoalescedWait", "WaitTimeout"));
  gate.Open();
  leader.join();
}

// SingleFlight keeps an expired value for one more ttl as the answer of a
// waiter that times out: that answer is a stale serve too.
TEST_F(ListenerTest, ATimedOutWaiterServedAStaleValueIsReportedWithItsAge) {
  options_.wait_timeout = absl::ZeroDuration();
  Gate gate;
  Counter entered;
  Cache<std::string, std::string, SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (entered.Increment() > 1) gate.Wait();  // The reload blocks.
        return "v";
      },
      options_);
  ASSERT_TRUE(cache.Get("k").ok());
  clock_.Advance(absl::Seconds(15));  // Expired, still kept.
  std::thread leader([&] { EXPECT_EQ(*cache.Get("k"), "v"); });
  ASSERT_TRUE(entered.WaitFor(2));
  ASSERT_EQ(*cache.Get("k"), "v");
  EXPECT_THAT(
      listener_.TakeFrom(std::this_thread::get_id()),
      ElementsAre("LoadStart(foreground)", "LoadFinish(foreground, 0, OK)",
                  "CoalescedWait", "WaitTimeout", "StaleServed(15s)"));
  gate.Open();
  leader.join();
}

// ---------------------------------------------------------------------------
// Evictions.

TEST_F(ListenerTest, EachEvictionIsReportedOnce) {
  options_.max_entries = 2;
  options_.shards = 1;
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("a").ok());
  ASSERT_TRUE(cache.Get("b").ok());
  listener_.Take();
  ASSERT_TRUE(cache.Get("c").ok());  // Evicts one by loading.
  EXPECT_THAT(listener_.Take(),
              ElementsAre("LoadStart(foreground)",
                          "LoadFinish(foreground, 0, OK)", "Eviction"));
  cache.Put("d", "put");  // Evicts one by a Put.
  EXPECT_THAT(listener_.Take(), ElementsAre("Eviction"));
  ASSERT_EQ(cache.size(), 2u);
}

// Only removals made to stay within max_entries are evictions.
TEST_F(ListenerTest, ReplacingOrInvalidatingAnEntryIsNoEviction) {
  options_.max_entries = 2;
  options_.shards = 1;
  Cache<std::string, std::string, SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      options_);
  ASSERT_TRUE(cache.Get("a").ok());
  ASSERT_TRUE(cache.Get("b").ok());
  listener_.Take();
  cache.Put("a", "put");  // Replaces a, in a full cache.
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(cache.Get("b").ok());  // Reloads b over its expired value.
  cache.Invalidate("a");
  cache.InvalidateAll();
  EXPECT_THAT(listener_.Take(), ElementsAre("LoadStart(foreground)",
                                            "LoadFinish(foreground, 0, OK)"));
  EXPECT_EQ(cache.stats().evictions, 0u);
}

}  // namespace
}  // namespace paddock
