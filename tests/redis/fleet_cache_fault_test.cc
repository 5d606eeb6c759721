// paddock::Cache with a shared tier when Redis fails: hung (SIGSTOP), killed
// and restarted. A Get must keep answering as a cache without a tier does
// (one load per process), within the tier's I/O timeout plus the load; every
// failed call is counted; the circuit breaker stops calling Redis; and the
// same caches and tiers use Redis again once it is back.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fleet_testing.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/redis.h"
#include "paddock/stats.h"

namespace paddock::testing {
namespace {

// Slack allowed on top of a bound on waiting.
constexpr absl::Duration kSlack = absl::Seconds(2);
constexpr absl::Duration kLoad = absl::Milliseconds(20);

class FleetCacheFaultTest : public RedisFleetTest {
 protected:
  RedisOptions FaultOptions() const {
    RedisOptions options = TierOptions();
    options.io_timeout = absl::Milliseconds(100);
    options.breaker_failures = 3;
    options.breaker_cooldown = absl::Milliseconds(300);
    options.health_check_interval = absl::Milliseconds(200);
    return options;
  }

  // Two pods, each with its own tier, and a key both have.
  void StartPods() { StartPods(FaultOptions()); }
  void StartPods(const RedisOptions& options) {
    for (int i = 0; i < 2; ++i) {
      tiers_.push_back(Connect(options));
      ASSERT_NE(tiers_.back(), nullptr);
      pods_.push_back(NewCache(backend_, CacheOptions(tiers_.back())));
    }
    backend_.set_delay(kLoad);
    ASSERT_EQ(pods_[0]->Get("warm").value_or("error"), "warm#1");
    ASSERT_EQ(pods_[1]->Get("warm").value_or("error"), "warm#1");
    ASSERT_EQ(pods_[1]->stats().shared_hits, 1u);
  }

  // Both pods Get `keys` new keys while Redis is out; each Get must return
  // a value, loaded by its own pod, within io_timeout plus the load.
  void GetNewKeysWhileRedisIsOut(const std::string& prefix, int keys) {
    const absl::Duration bound = FaultOptions().io_timeout + kLoad + kSlack;
    for (int i = 0; i < keys; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      for (auto& pod : pods_) {
        const int calls = backend_.calls();
        const absl::Time start = absl::Now();
        const absl::StatusOr<std::string> value = pod->Get(key);
        const absl::Duration took = absl::Now() - start;
        EXPECT_EQ(value.value_or("error"), absl::StrCat(key, "#", calls + 1))
            << value.status();
        EXPECT_LT(took, bound) << key;
      }
    }
  }

  // Both pods Get new keys until the second takes the first's value from
  // Redis again; returns whether that happened within `timeout`.
  bool SharedHitsAgainWithin(const std::string& prefix,
                             absl::Duration timeout) {
    const uint64_t before = pods_[1]->stats().shared_hits;
    const absl::Time give_up = absl::Now() + timeout;
    for (int i = 0; absl::Now() < give_up; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      if (!pods_[0]->Get(key).ok() || !pods_[1]->Get(key).ok()) return false;
      if (pods_[1]->stats().shared_hits > before) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // Calls `done` every 10 ms until it returns true or `timeout` passes;
  // returns its last answer.
  template <typename Done>
  static bool Eventually(Done done,
                         absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() >= give_up) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  CountingBackend backend_;
  std::vector<std::shared_ptr<RedisTier>> tiers_;
  std::vector<std::unique_ptr<StringCache<>>> pods_;
};

TEST_F(FleetCacheFaultTest, HitsNeverWaitForAHungRedis) {
  StartPods();
  ASSERT_FALSE(HasFailure());
  const uint64_t calls = tiers_[0]->stats().calls;
  ASSERT_TRUE(server_->Pause().ok());
  const absl::Time start = absl::Now();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(pods_[0]->Get("warm").value_or("error"), "warm#1");
  }
  // A thousand hits take microseconds each; each Redis call would wait
  // io_timeout (100 ms) or be refused by the breaker, and be counted.
  EXPECT_LT(absl::Now() - start, kSlack);
  const RedisTierStats tier = tiers_[0]->stats();
  EXPECT_EQ(tier.calls, calls);
  EXPECT_EQ(tier.breaker_rejections, 0u);
  EXPECT_EQ(pods_[0]->stats().shared_errors, 0u);
  EXPECT_EQ(pods_[0]->stats().hits, 1000u);
  ASSERT_TRUE(server_->Resume().ok());
}

TEST_F(FleetCacheFaultTest, AHungRedisCostsEachGetAtMostIoTimeoutAndRecovers) {
  StartPods();
  ASSERT_FALSE(HasFailure());
  const int calls_before = backend_.calls();
  ASSERT_TRUE(server_->Pause().ok());
  constexpr int kKeys = 10;
  GetNewKeysWhileRedisIsOut("paused", kKeys);
  // One load per pod and key, as without a tier.
  EXPECT_EQ(backend_.calls() - calls_before, 2 * kKeys);
  for (size_t i = 0; i < pods_.size(); ++i) {
    // Every Get asked Redis (or its breaker) once, and failed.
    EXPECT_EQ(pods_[i]->stats().shared_errors, uint64_t{kKeys}) << "pod " << i;
    const RedisTierStats tier = tiers_[i]->stats();
    EXPECT_GE(tier.timeouts, 1u);
    EXPECT_GE(tier.breaker_opens, 1u);
    // The breaker spared Redis most of the calls.
    EXPECT_GE(tier.breaker_rejections, 1u);
  }

  ASSERT_TRUE(server_->Resume().ok());
  // The same caches and tiers share values again.
  EXPECT_TRUE(SharedHitsAgainWithin("resumed", absl::Seconds(10)));
}

TEST_F(FleetCacheFaultTest,
       AKilledRedisCostsOnlySharedErrorsAndARestartIsUsed) {
  StartPods();
  ASSERT_FALSE(HasFailure());
  const int calls_before = backend_.calls();
  ASSERT_TRUE(server_->Kill().ok());
  constexpr int kKeys = 10;
  GetNewKeysWhileRedisIsOut("killed", kKeys);
  EXPECT_EQ(backend_.calls() - calls_before, 2 * kKeys);
  for (size_t i = 0; i < pods_.size(); ++i) {
    EXPECT_EQ(pods_[i]->stats().shared_errors, uint64_t{kKeys}) << "pod " << i;
    EXPECT_GE(tiers_[i]->stats().breaker_opens, 1u);
  }
  // What the pods hold locally is still served.
  EXPECT_EQ(pods_[1]->Get("warm").value_or("error"), "warm#1");

  ASSERT_TRUE(server_->Restart().ok());
  EXPECT_TRUE(SharedHitsAgainWithin("restarted", absl::Seconds(10)));
  EXPECT_GE(tiers_[0]->stats().script_loads, 1u);
}

TEST_F(FleetCacheFaultTest, AWaiterWhoseRedisHangsStopsWaitingAndLoadsItself) {
  StartPods();
  ASSERT_FALSE(HasFailure());
  // Pod 0 holds the lease and loads; pod 1 waits for its fill.
  backend_.Close();
  absl::StatusOr<std::string> held;
  std::thread holding([&] { held = pods_[0]->Get("k"); });
  ASSERT_TRUE(backend_.WaitForCalls(2));  // "warm", then "k".
  absl::StatusOr<std::string> waited;
  absl::Duration took;
  std::thread waiting([&] {
    const absl::Time start = absl::Now();
    waited = pods_[1]->Get("k");
    took = absl::Now() - start;
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (pods_[1]->stats().lease_waits == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(pods_[1]->stats().lease_waits, 1u);
  // Redis hangs while pod 1 waits (wait_timeout 10 s): it asks again
  // within a second, fails, and loads on its own.
  ASSERT_TRUE(server_->Pause().ok());
  ASSERT_TRUE(backend_.WaitForCalls(3, absl::Seconds(10)));
  backend_.Open();
  waiting.join();
  holding.join();
  EXPECT_EQ(waited.value_or("error"), "k#3");
  EXPECT_LT(took, absl::Seconds(1) + FaultOptions().io_timeout + kSlack);
  EXPECT_GE(pods_[1]->stats().shared_errors, 1u);
  // The holder's fill fails too: its value is served and kept here.
  EXPECT_EQ(held.value_or("error"), "k#2");
  EXPECT_EQ(pods_[0]->GetIfPresent("k"), "k#2");
  EXPECT_GE(pods_[0]->stats().shared_errors, 1u);
  ASSERT_TRUE(server_->Resume().ok());
}

TEST_F(FleetCacheFaultTest, WritesWhileRedisIsOutAreCountedAndDoNotBlock) {
  StartPods();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(server_->Pause().ok());
  const absl::Time start = absl::Now();
  pods_[0]->Put("warm", "put while paused");
  pods_[0]->Invalidate("other");
  EXPECT_LT(absl::Now() - start, 2 * FaultOptions().io_timeout + kSlack);
  EXPECT_EQ(pods_[0]->stats().shared_errors, 2u);
  // Written here all the same.
  EXPECT_EQ(pods_[0]->GetIfPresent("warm"), "put while paused");
  ASSERT_TRUE(server_->Resume().ok());
}

// Two Puts of one key that both time out while Redis hangs wait in their
// connections' sockets and both run once it resumes, in an order nobody
// promises (docs/fleet.md, "What is not promised"). What is promised: Redis
// keeps one of them, and every pod, the writer included, then serves what
// Redis keeps.
TEST_F(FleetCacheFaultTest, TwoWritesThatTimeOutInAHangLeaveEveryPodWithRedis) {
  RedisOptions options = FaultOptions();
  options.breaker_failures = 10;  // Both Puts are sent.
  // The subscriptions outlive the hang: the change messages must do it.
  options.health_check_interval = absl::Seconds(30);
  StartPods(options);
  ASSERT_FALSE(HasFailure());
  const uint64_t heard = tiers_[1]->stats().notifications;
  ASSERT_TRUE(server_->Pause().ok());
  pods_[0]->Put("warm", "first");
  pods_[0]->Put("warm", "second");
  EXPECT_EQ(tiers_[0]->stats().timeouts, 2u);
  EXPECT_EQ(pods_[0]->stats().shared_errors, 2u);
  ASSERT_TRUE(server_->Resume().ok());

  // Both land, and both messages reach the other pod.
  ASSERT_TRUE(Eventually(
      [&] { return tiers_[1]->stats().notifications >= heard + 2; }));
  const std::string kept = Redis({"HGET", RecordKey("warm"), "value"});
  EXPECT_TRUE(kept == "first" || kept == "second") << kept;
  const auto agree = [&] {
    return pods_[0]->Get("warm").value_or("error") == kept &&
           pods_[1]->Get("warm").value_or("error") == kept;
  };
  EXPECT_TRUE(Eventually(agree, absl::Seconds(3)));  // Copies live 10 s.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(agree());
  EXPECT_EQ(Redis({"HGET", RecordKey("warm"), "value"}), kept);
  EXPECT_EQ(tiers_[0]->stats().subscription_losses, 0u);
  EXPECT_EQ(tiers_[1]->stats().subscription_losses, 0u);
}

// A Put that times out while Redis hangs lands when it resumes, after a
// later Put of the same pod that the open breaker refused (never sent).
// Redis then holds the earlier value, the other pod drops its copy on the
// message, and so must the writer, whose copy is the value Redis never saw:
// the message of a write that may land late reaches its origin too.
TEST_F(FleetCacheFaultTest, AWriteThatLandsAfterAHangReachesTheWritingPodToo) {
  RedisOptions options = FaultOptions();
  options.breaker_failures = 1;  // The second Put is refused, never sent.
  options.breaker_cooldown = absl::Seconds(1);
  // The subscriptions outlive the hang: the change message must do it.
  options.health_check_interval = absl::Seconds(30);
  StartPods(options);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(server_->Pause().ok());
  pods_[0]->Put("warm", "sent");
  pods_[0]->Put("warm", "never sent");
  EXPECT_EQ(tiers_[0]->stats().timeouts, 1u);
  EXPECT_EQ(tiers_[0]->stats().breaker_rejections, 1u);
  EXPECT_EQ(pods_[0]->GetIfPresent("warm"), "never sent");
  ASSERT_TRUE(server_->Resume().ok());

  // Well before the copies expire (ttl 10 s).
  EXPECT_TRUE(Eventually(
      [&] {
        return !pods_[0]->GetIfPresent("warm").has_value() &&
               !pods_[1]->GetIfPresent("warm").has_value();
      },
      absl::Seconds(3)));
  EXPECT_EQ(Redis({"HGET", RecordKey("warm"), "value"}), "sent");
  EXPECT_EQ(pods_[1]->Get("warm").value_or("error"), "sent");
  // Pod 0 reads it too once its breaker lets it ask Redis again.
  EXPECT_TRUE(Eventually([&] {
    return tiers_[0]->Lookup("probe", "", absl::ZeroDuration()).ok();
  }));
  EXPECT_EQ(pods_[0]->Get("warm").value_or("error"), "sent");
  EXPECT_EQ(tiers_[0]->stats().subscription_losses, 0u);
}

}  // namespace
}  // namespace paddock::testing
