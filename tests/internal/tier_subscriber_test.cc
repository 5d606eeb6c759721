// Tests of paddock/internal/tier_subscriber.h on a bare CacheCore: what the
// shared tier's change feed does to this process (a key invalidated, every
// key when a key cannot be read back or notices were missed) and which loads
// parked for another process's fill it wakes.

#include "paddock/internal/tier_subscriber.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/internal/writes.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using paddock::testing::FakeSharedTier;

template <typename K>
class TierSubscriberTest : public ::testing::Test {
 protected:
  using Core =
      CacheCore<K, std::string, SingleFlight, absl::Hash<K>, std::equal_to<K>>;

  TierSubscriberTest() {
    Options options;
    options.clock = &clock_;
    options.shared = tier_;
    core_ = std::make_unique<Core>(
        [](const K&) -> absl::StatusOr<std::string> { return "v"; },
        typename Core::AsyncLoader(), options, SingleFlight(), absl::Hash<K>(),
        std::equal_to<K>());
  }
  ~TierSubscriberTest() override { FleetWaits::Process().Drop(this); }

  void Put(const K& key) {
    const size_t hash = core_->HashOf(key);
    auto& shard = core_->ShardFor(hash);
    auto entry = typename Engine<Core>::Writes(*core_).NewEntry(key, hash, "v",
                                                                0, 0, {});
    typename Core::Writer w(shard);
    shard.Store(w, nullptr, std::move(entry), 0);
  }
  bool Has(const K& key) {
    EpochGuard guard;
    const size_t hash = core_->HashOf(key);
    return core_->ShardFor(hash).Find(hash, key, core_->lookup_eq()) != nullptr;
  }
  // Parks a wait on `key` of this core's tier; `*woken` is set when it wakes.
  void Park(const std::string& key, bool* woken) {
    FleetWaits::Wake wake = [woken] { *woken = true; };
    ASSERT_TRUE(FleetWaits::Process().Park(
        core_->tier, key, this, FleetWaits::Process().sequence(),
        std::chrono::steady_clock::now() + std::chrono::hours(1), wake));
  }

  ManualClock clock_;
  std::shared_ptr<FakeSharedTier> tier_ =
      std::make_shared<FakeSharedTier>(&clock_);
  std::unique_ptr<Core> core_;
};

using StringKeys = TierSubscriberTest<std::string>;
using IntKeys = TierSubscriberTest<int>;

TEST_F(StringKeys, AnInvalidatedKeyIsDroppedAndNoOther) {
  Put("a");
  Put("b");
  TierSubscriber<Core> subscriber(core_.get());
  subscriber.OnInvalidate("a");
  EXPECT_FALSE(Has("a"));
  EXPECT_TRUE(Has("b"));
}

TEST_F(IntKeys, AKeyThatCannotBeReadBackDropsEveryKey) {
  Put(1);
  Put(2);
  TierSubscriber<Core> subscriber(core_.get());
  subscriber.OnInvalidate("2");
  EXPECT_TRUE(Has(1));
  EXPECT_FALSE(Has(2));
  subscriber.OnInvalidate("not a number");
  EXPECT_FALSE(Has(1));
}

TEST_F(StringKeys, AChangeWakesTheLoadsParkedOnThatKeyOnly) {
  bool a_woken = false;
  bool b_woken = false;
  Park("a", &a_woken);
  Park("b", &b_woken);
  TierSubscriber<Core> subscriber(core_.get());
  subscriber.OnChange("a");
  EXPECT_TRUE(a_woken);
  EXPECT_FALSE(b_woken);
}

TEST_F(StringKeys, MissedNoticesDropEveryKeyAndWakeEveryParkedLoad) {
  Put("a");
  bool a_woken = false;
  bool b_woken = false;
  Park("a", &a_woken);
  Park("b", &b_woken);
  TierSubscriber<Core> subscriber(core_.get());
  subscriber.OnMissedInvalidations();
  EXPECT_FALSE(Has("a"));
  EXPECT_TRUE(a_woken);
  EXPECT_TRUE(b_woken);
}

}  // namespace
}  // namespace paddock::internal
