// Tests of paddock/internal/refresh.h on a bare CacheCore with a ManualClock,
// a ManualExecutor and tests/fake_shared_tier.h: a refresh prepared (or not:
// the entry replaced, no slot free), run by the executor, or dropped by it;
// a load parked until another process's fill and resumed by its next task;
// and the refresh of a stale record a load stored.

#include "paddock/internal/refresh.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/tier_subscriber.h"
#include "paddock/internal/writes.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {
namespace {

using paddock::testing::FakeSharedTier;
using Core = CacheCore<std::string, std::string, SingleFlight,
                       absl::Hash<std::string>, std::equal_to<std::string>>;
using Refresh = Engine<Core>::Refresh;
using Writes = Engine<Core>::Writes;

class RefreshTest : public ::testing::Test {
 protected:
  void Make(Options options = {}) {
    options.clock = &clock_;
    options.executor = &executor_;
    options.ttl = absl::Seconds(10);
    core_ = std::make_unique<Core>(
        [this](const std::string& key) -> absl::StatusOr<std::string> {
          ++loads_;
          return "loaded " + key;
        },
        Core::AsyncLoader(), options, SingleFlight(), absl::Hash<std::string>(),
        std::equal_to<std::string>());
    hash_ = core_->HashOf(key_);
    if (options.shared != nullptr) {
      core_->subscriber = std::make_unique<TierSubscriber<Core>>(core_.get());
      core_->subscription = options.shared->Subscribe(core_->subscriber.get());
    }
  }
  Core::Shard& shard() { return core_->ShardFor(hash_); }
  Core::Entry* Find() { return shard().Find(hash_, key_, core_->lookup_eq()); }
  void Store(std::unique_ptr<Core::Entry> entry) {
    Core::Writer w(shard());
    shard().Store(w, Find(), std::move(entry), core_->NowNanos());
  }
  void StoreValue(const std::string& value) {
    Store(
        Writes(*core_).NewEntry(key_, hash_, value, 0, core_->NowNanos(), {}));
  }
  std::optional<std::string> Stored() {
    EpochGuard guard;
    const Core::Entry* n = Find();
    if (n == nullptr || !n->has_value()) return std::nullopt;
    return n->value();
  }
  // Prepares a refresh of the stored entry, marked as Examine marks it.
  std::optional<LoadTask<Core>> Prepare() {
    std::optional<LoadTask<Core>> task;
    EpochGuard guard;
    Core::Entry* n = Find();
    n->refreshing = true;
    Refresh(*core_).Prepare(shard(), key_, hash_, n, task);
    return task;
  }
  bool Marked() {
    EpochGuard guard;
    return Find()->refreshing;
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  ManualExecutor executor_;
  const std::string key_ = "k";
  size_t hash_ = 0;
  int loads_ = 0;
  std::unique_ptr<Core> core_;
};

TEST_F(RefreshTest, APreparedRefreshIsQueuedAndTheExecutorRunsIt) {
  Make();
  StoreValue("old");
  std::optional<LoadTask<Core>> task = Prepare();
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(core_->recorder.Snapshot().refreshes, 1u);
  EXPECT_TRUE(Marked());
  Refresh(*core_).Schedule(*std::move(task));
  EXPECT_EQ(loads_, 0);
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(loads_, 1);
  EXPECT_EQ(Stored(), "loaded k");
}

TEST_F(RefreshTest, NoRefreshOfAnEntryReplacedMeanwhile) {
  Make();
  StoreValue("old");
  std::optional<LoadTask<Core>> task;
  EpochGuard guard;  // Keeps the replaced entry readable.
  Core::Entry* replaced = Find();
  replaced->refreshing = true;
  StoreValue("new");
  Refresh(*core_).Prepare(shard(), key_, hash_, replaced, task);
  EXPECT_FALSE(task.has_value());
  EXPECT_FALSE(replaced->refreshing);
  EXPECT_EQ(core_->recorder.Snapshot().refreshes, 0u);
}

TEST_F(RefreshTest, NoRefreshWithoutAFreeSlotAndTheEntryStaysRefreshable) {
  Options options;
  options.max_concurrent_loads = 1;
  Make(options);
  StoreValue("old");
  const LoadSlots::Ticket taken = core_->slots.TryAcquire(core_->NowNanos());
  EXPECT_FALSE(Prepare().has_value());
  EXPECT_FALSE(Marked());
  EXPECT_EQ(core_->recorder.Snapshot().refreshes_skipped, 1u);
  core_->slots.Release(taken);
}

TEST_F(RefreshTest, ATaskTheExecutorDropsEndsItsLoadCancelled) {
  Make();
  auto flight = std::make_shared<Core::Flight>(key_, hash_, core_->NowNanos(),
                                               Core::Flight::State::kQueued);
  {
    Core::Writer w(shard());
    shard().Register(w, key_, hash_, flight);
  }
  flight->Join();
  {
    LoadTask<Core> task(core_.get(), key_, hash_, LoadKind::kForeground);
    task.Attach(flight);
  }  // Destroyed unrun.
  ASSERT_NE(flight->published(), nullptr);
  EXPECT_EQ(flight->published()->value.status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(loads_, 0);
}

TEST_F(RefreshTest, AParkedLoadIsResumedByItsNextTaskWhenTheKeyIsFilled) {
  ManualClock tier_clock;
  auto tier = std::make_shared<FakeSharedTier>(&tier_clock);
  const std::string token = tier->TakeLease(key_);  // Another process's.
  Options options;
  options.shared = tier;
  options.wait_timeout = absl::Hours(1);
  Make(options);
  auto flight = std::make_shared<Core::Flight>(key_, hash_, core_->NowNanos(),
                                               Core::Flight::State::kQueued);
  {
    Core::Writer w(shard());
    shard().Register(w, key_, hash_, flight);
  }
  flight->Join();
  LoadTask<Core> task(core_.get(), key_, hash_, LoadKind::kForeground);
  task.Attach(flight);
  Refresh(*core_).Schedule(std::move(task));
  EXPECT_EQ(executor_.RunAll(), 1u);  // Parked: the thread is given back.
  EXPECT_EQ(flight->published(), nullptr);

  ASSERT_TRUE(tier->Fill(key_, token,
                         SharedFill{.value = std::string("filled"),
                                    .fresh_for = absl::Seconds(10),
                                    .keep_for = absl::Seconds(10),
                                    .version = "v-filled"})
                  .value());
  // The next step, woken by the fill (or, on a slow machine, by its timer
  // first: it then finds the fill all the same).
  EXPECT_EQ(executor_.RunAll(), 1u);
  ASSERT_NE(flight->published(), nullptr);
  EXPECT_EQ(flight->published()->value.value(), "filled");
  EXPECT_EQ(Stored(), "filled");
  EXPECT_EQ(loads_, 0);
}

TEST_F(RefreshTest, AStaleRecordAServedLoadStoredIsRefreshed) {
  Make();
  SharedRecord record{.value = std::string("stale"), .version = "v-stale"};
  record.fresh_for = absl::Seconds(10);
  record.keep_for = absl::Seconds(60);
  Store(Writes(*core_).EntryFromTier(key_, hash_, "stale", record,
                                     core_->NowNanos()));
  Load<Core> load{key_, hash_, nullptr, LoadKind::kForeground};
  LoadEnd<std::string> end{Core::Outcome{std::string("stale")},
                           RefreshStored{"v-stale"}};
  const std::optional<Core::Outcome> outcome =
      Refresh(*core_).Continue(load, std::move(end), Where::kCallerThread);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->value.value(), "stale");
  EXPECT_TRUE(Marked());
  EXPECT_EQ(executor_.RunAll(), 1u);
  EXPECT_EQ(Stored(), "loaded k");

  // A record replaced meanwhile is not refreshed.
  LoadEnd<std::string> other{Core::Outcome{std::string("x")},
                             RefreshStored{"v-other"}};
  Refresh(*core_).Continue(load, std::move(other), Where::kCallerThread);
  EXPECT_EQ(executor_.pending(), 0u);
}

}  // namespace
}  // namespace paddock::internal
