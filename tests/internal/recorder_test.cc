// Tests for internal::Recorder, the one door events go through: each event
// counts in its own Stats field (summed over threads), and reaches the
// listener, whose exceptions never reach the cache.

#include "paddock/internal/recorder.h"

#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/internal/epoch.h"
#include "paddock/listener.h"
#include "paddock/stats.h"

namespace paddock::internal {
namespace {

class CountingListener : public Listener {
 public:
  void OnLoadStart(LoadKind) override { ++starts; }
  void OnLoadFinish(LoadKind, absl::Duration d,
                    const absl::Status& status) override {
    ++finishes;
    last_duration = d;
    if (!status.ok()) ++failures;
  }
  void OnStaleServed(absl::Duration) override { ++stale; }
  void OnCoalescedWait() override { ++coalesced; }
  void OnWaitTimeout() override { ++timeouts; }
  void OnEviction() override { ++evictions; }

  int starts = 0, finishes = 0, failures = 0, stale = 0, coalesced = 0,
      timeouts = 0, evictions = 0;
  absl::Duration last_duration;
};

TEST(RecorderTest, EachEventCountsInItsOwnField) {
  Recorder recorder(nullptr);
  recorder.Hit(CurrentThreadRecord());
  recorder.Miss();
  recorder.StaleHit(absl::Seconds(1));
  recorder.NegativeHit();
  recorder.StaleFallback(absl::Seconds(1));
  recorder.CoalescedWait();
  recorder.WaitTimeout();
  recorder.Evicted(3);
  recorder.RefreshStarted();
  recorder.RefreshSkipped();
  recorder.SharedHit();
  recorder.LeaseAcquired();
  recorder.LeaseWait();
  recorder.SharedError();
  recorder.LoadStarted(LoadKind::kForeground);
  recorder.LoadFinished(LoadKind::kForeground, 1500,
                        absl::UnavailableError("down"));
  const Stats s = recorder.Snapshot();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.stale_hits, 1u);
  EXPECT_EQ(s.negative_hits, 1u);
  EXPECT_EQ(s.stale_fallbacks, 1u);
  EXPECT_EQ(s.coalesced_waits, 1u);
  EXPECT_EQ(s.wait_timeouts, 1u);
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(s.refreshes, 1u);
  EXPECT_EQ(s.refreshes_skipped, 1u);
  EXPECT_EQ(s.shared_hits, 1u);
  EXPECT_EQ(s.leases_acquired, 1u);
  EXPECT_EQ(s.lease_waits, 1u);
  EXPECT_EQ(s.shared_errors, 1u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.load_failures, 1u);
  EXPECT_EQ(s.total_load_time, absl::Nanoseconds(1500));
}

TEST(RecorderTest, HitsFromEveryThreadAreSummed) {
  Recorder recorder(nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) recorder.Hit(CurrentThreadRecord());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(recorder.Snapshot().hits, 4000u);
}

TEST(RecorderTest, EventsReachTheListener) {
  CountingListener listener;
  Recorder recorder(&listener);
  recorder.LoadStarted(LoadKind::kRefresh);
  recorder.LoadFinished(LoadKind::kRefresh, 2000, absl::OkStatus());
  recorder.StaleHit(absl::Seconds(2));
  recorder.CoalescedWait();
  recorder.WaitTimeout();
  recorder.Evicted(2);
  EXPECT_EQ(listener.starts, 1);
  EXPECT_EQ(listener.finishes, 1);
  EXPECT_EQ(listener.failures, 0);
  EXPECT_EQ(listener.last_duration, absl::Nanoseconds(2000));
  EXPECT_EQ(listener.stale, 1);
  EXPECT_EQ(listener.coalesced, 1);
  EXPECT_EQ(listener.timeouts, 1);
  EXPECT_EQ(listener.evictions, 2);
}

class ThrowingListener : public Listener {
 public:
  void OnLoadStart(LoadKind) override { throw std::runtime_error("boom"); }
  void OnEviction() override { throw std::runtime_error("boom"); }
};

TEST(RecorderTest, AListenerThatThrowsIsIgnoredAndStillCounted) {
  ThrowingListener listener;
  Recorder recorder(&listener);
  recorder.LoadStarted(LoadKind::kForeground);
  recorder.Evicted(1);
  const Stats s = recorder.Snapshot();
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.evictions, 1u);
}

}  // namespace
}  // namespace paddock::internal
