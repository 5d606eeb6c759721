// Tests of paddock/internal/outcome_store.h on a bare CacheCore with a
// ManualClock: what completing a load stores and publishes (a value; an
// error remembered for error_ttl or not; a stale value standing in for an
// error; a failed refresh keeping its value; a load superseded by a write; a
// fill that lost the shared tier's lease; a value from the tier), that the
// load slot goes back, and when a refresh without a slot is skipped.

#include "paddock/internal/outcome_store.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/writes.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SoftTtl,
                       absl::Hash<std::string>, std::equal_to<>>;
using OutcomeStore = Engine<Core>::OutcomeStore;
using Writes = Engine<Core>::Writes;

class OutcomeStoreTest : public ::testing::Test {
 protected:
  void Make(Options options = {}) {
    options.clock = &clock_;
    options.ttl = absl::Seconds(10);
    core_ = std::make_unique<Core>(
        [](const std::string& key) -> absl::StatusOr<std::string> {
          return key;
        },
        Core::AsyncLoader(), options,
        SoftTtl{.stale_for = absl::Seconds(20),
                .stale_if_error = absl::Seconds(40)},
        absl::Hash<std::string>(), std::equal_to<>());
    hash_ = core_->HashOf(key_);
  }
  Core::Shard& shard() { return core_->ShardFor(hash_); }
  // A load of key_ registered as a coalesced flight, and a caller joined.
  Load<Core> Register(LoadKind kind = LoadKind::kForeground) {
    flight_ = std::make_shared<Core::Flight>(key_, hash_, core_->NowNanos());
    Core::Writer w(shard());
    shard().Register(w, key_, hash_, flight_);
    return Load<Core>{key_, hash_, flight_, kind};
  }
  void StoreValue(const std::string& value) {
    auto n =
        Writes(*core_).NewEntry(key_, hash_, value, 0, core_->NowNanos(), {});
    Core::Writer w(shard());
    shard().Store(w, shard().Find(hash_, key_, core_->lookup_eq()),
                  std::move(n), core_->NowNanos());
  }
  // What the key's entry holds now: its value or error, or nullopt.
  std::optional<absl::StatusOr<std::string>> Stored() {
    EpochGuard guard;
    const Core::Entry* n = shard().Find(hash_, key_, core_->lookup_eq());
    if (n == nullptr) return std::nullopt;
    if (core_->NowNanos() < n->error_until()) return n->error();
    return n->value();
  }
  Core::Outcome Complete(Load<Core>& load, absl::StatusOr<std::string> result,
                         bool loader_ran = true) {
    const int64_t now = core_->NowNanos();
    return OutcomeStore(*core_).Complete(load, std::move(result), loader_ran,
                                         now - 1'000, now);
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  const std::string key_ = "k";
  size_t hash_ = 0;
  std::unique_ptr<Core> core_;
  std::shared_ptr<Core::Flight> flight_;
};

TEST_F(OutcomeStoreTest, AValueIsStoredAndPublishedToTheJoined) {
  Make();
  Load<Core> load = Register();
  flight_->Join();
  const Core::Outcome outcome = Complete(load, std::string("loaded"));
  EXPECT_EQ(outcome.value.value(), "loaded");
  EXPECT_EQ(Stored()->value(), "loaded");
  ASSERT_NE(flight_->published(), nullptr);
  EXPECT_EQ(flight_->published()->value.value(), "loaded");
  // Unregistered: the next caller of the key starts afresh.
  Core::Writer w(shard());
  EXPECT_FALSE(shard().IsRegistered(w, key_, hash_, flight_.get(), false));
}

TEST_F(OutcomeStoreTest, ALoadSupersededByAWriteStoresNothingButAnswers) {
  Make();
  Load<Core> load = Register();
  {
    Core::Writer w(shard());
    shard().DropFlight(w, key_, hash_);  // What a Put or Invalidate does.
  }
  EXPECT_EQ(Complete(load, std::string("late")).value.value(), "late");
  EXPECT_EQ(Stored(), std::nullopt);
}

TEST_F(OutcomeStoreTest, TheLoadSlotGoesBack) {
  Options options;
  options.max_concurrent_loads = 1;
  Make(options);
  Load<Core> load = Register();
  load.slot = core_->slots.TryAcquire(core_->NowNanos());
  ASSERT_NE(load.slot, 0u);
  EXPECT_EQ(core_->slots.TryAcquire(core_->NowNanos()), 0u);
  Complete(load, std::string("v"));
  EXPECT_EQ(load.slot, 0u);
  EXPECT_NE(core_->slots.TryAcquire(core_->NowNanos()), 0u);
}

TEST_F(OutcomeStoreTest, AnErrorIsRememberedOnlyIfTheLoaderRanWithErrorTtl) {
  Options options;
  options.error_ttl = absl::Seconds(5);
  Make(options);
  Load<Core> failed = Register();
  OutcomeStore(*core_).Fail(failed, absl::CancelledError("never ran"));
  EXPECT_EQ(Stored(), std::nullopt);
  Load<Core> load = Register();
  Complete(load, absl::NotFoundError("no such key"));
  EXPECT_EQ(Stored()->status(), absl::NotFoundError("no such key"));
}

TEST_F(OutcomeStoreTest, AValueThePolicyServesOnErrorsStandsInForAFailure) {
  Make();
  StoreValue("old");
  clock_.Advance(absl::Seconds(35));  // Within stale_if_error only.
  Load<Core> load = Register();
  const Core::Outcome outcome = Complete(load, absl::UnavailableError("down"));
  EXPECT_EQ(outcome.value.value(), "old");
  EXPECT_TRUE(outcome.stale);
}

TEST_F(OutcomeStoreTest, AFailedRefreshKeepsTheValueItWasRefreshing) {
  Options options;
  options.error_ttl = absl::Seconds(5);
  Make(options);
  StoreValue("old");
  clock_.Advance(absl::Seconds(50));  // Past serving it on errors, even.
  Load<Core> load = Register(LoadKind::kRefresh);
  Complete(load, absl::UnavailableError("down"));
  EpochGuard guard;
  const Core::Entry* n = shard().Find(hash_, key_, core_->lookup_eq());
  ASSERT_NE(n, nullptr);
  ASSERT_TRUE(n->has_value());
  EXPECT_EQ(n->value(), "old");
  EXPECT_EQ(n->error(), absl::UnavailableError("down"));
}

TEST_F(OutcomeStoreTest, AFillThatLostTheTiersLeaseStoresNothing) {
  Make();
  Load<Core> load = Register();
  load.filled.lease_lost = true;
  EXPECT_EQ(Complete(load, std::string("v")).value.value(), "v");
  EXPECT_EQ(Stored(), std::nullopt);
}

TEST_F(OutcomeStoreTest, AValueFromTheTierKeepsItsVersionAndSchedule) {
  Make();
  SharedRecord record{.value = std::string("shared"), .version = "v-9"};
  record.age = absl::Seconds(3);
  record.fresh_for = absl::Seconds(10);
  record.keep_for = absl::Seconds(30);
  Load<Core> load = Register();
  load.from_tier = &record;
  Complete(load, std::string("shared"), /*loader_ran=*/false);
  EpochGuard guard;
  const Core::Entry* n = shard().Find(hash_, key_, core_->lookup_eq());
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(*n->shared_version(), "v-9");
  EXPECT_EQ(n->loaded_at(core_->fixed_times),
            core_->NowNanos() - absl::ToInt64Nanoseconds(absl::Seconds(3)));
}

TEST_F(OutcomeStoreTest, ARefreshWithoutASlotIsSkippedUnlessSomeoneJoined) {
  Make();
  StoreValue("old");
  {
    EpochGuard guard;
    shard().Find(hash_, key_, core_->lookup_eq())->refreshing = true;
  }
  Load<Core> joined = Register(LoadKind::kRefresh);
  flight_->Join();
  EXPECT_FALSE(OutcomeStore(*core_).SkipRefresh(joined));

  Load<Core> alone = Register(LoadKind::kRefresh);
  EXPECT_TRUE(OutcomeStore(*core_).SkipRefresh(alone));
  EXPECT_EQ(core_->recorder.Snapshot().refreshes_skipped, 1u);
  EpochGuard guard;
  EXPECT_FALSE(shard().Find(hash_, key_, core_->lookup_eq())->refreshing);
}

}  // namespace
}  // namespace paddock::internal
