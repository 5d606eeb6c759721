// Tests of paddock/internal/fleet_path.h on a bare CacheCore over
// tests/fake_shared_tier.h, with no Cache: the verdict of each kind of
// lookup (a fresh record, a remembered error, a lease, a stale record the
// policy serves, garbage, a failing tier, a lease held elsewhere on the
// caller's thread and on an executor task, past the deadline, while the cache
// closes), and what filling the tier returns.

#include "paddock/internal/fleet_path.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
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

using paddock::testing::FakeSharedTier;

template <typename P, typename V>
using CoreOf =
    CacheCore<std::string, V, P, absl::Hash<std::string>, std::equal_to<>>;

constexpr size_t kHash = 0x12345678'9abcdef0;

template <typename P = SingleFlight, typename V = std::string>
class Fixture {
 public:
  using Core = CoreOf<P, V>;

  explicit Fixture(Options options = {}, P policy = {}) {
    options.clock = &clock_;
    options.shared = tier_;
    options.ttl = absl::Seconds(10);
    options.wait_timeout = absl::Seconds(2);
    core_ = std::make_unique<Core>(
        [](const std::string&) -> absl::StatusOr<V> {
          return absl::UnimplementedError("the loader is not called here");
        },
        typename Core::AsyncLoader(), options, policy,
        absl::Hash<std::string>(), std::equal_to<>());
  }

  Core& core() { return *core_; }
  typename Engine<Core>::FleetPath fleet() {
    return typename Engine<Core>::FleetPath(*core_);
  }
  Load<Core> LoadFor(bool caller_waits = true) {
    Load<Core> load{key_, kHash, nullptr, LoadKind::kForeground};
    load.awaited = caller_waits ? Awaited::kByCaller : Awaited::kByNobody;
    return load;
  }
  typename Engine<Core>::FleetPath::Verdict Ask(
      Load<Core>& load, Where where = Where::kCallerThread) {
    std::optional<FleetProgress> progress = fleet().Begin(load);
    EXPECT_TRUE(progress.has_value());
    return fleet().Ask(load, *progress, where);
  }
  void StoreInTier(absl::StatusOr<std::string> value,
                   absl::Duration fresh_for = absl::Seconds(10),
                   absl::Duration keep_for = absl::Seconds(60)) {
    tier_->StoreRaw(key_, SharedFill{.value = std::move(value),
                                     .fresh_for = fresh_for,
                                     .keep_for = keep_for,
                                     .version = "v-other"});
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000'000)};
  ManualClock tier_clock_{absl::FromUnixSeconds(5'000)};
  std::shared_ptr<FakeSharedTier> tier_ =
      std::make_shared<FakeSharedTier>(&tier_clock_);
  const std::string key_ = "k";
  std::unique_ptr<Core> core_;
};

TEST(FleetPathTest, BeginEncodesTheKeyAndBudgetsACallerByWaitTimeout) {
  Fixture<> f;
  const std::optional<FleetProgress> caller = f.fleet().Begin(f.LoadFor());
  ASSERT_TRUE(caller.has_value());
  EXPECT_EQ(caller->key_bytes, "k");
  EXPECT_EQ(caller->have_version, "");
  EXPECT_EQ(caller->budget, absl::Seconds(2));
  // A refresh waits as long as a load may take.
  const std::optional<FleetProgress> refresh =
      f.fleet().Begin(f.LoadFor(/*caller_waits=*/false));
  ASSERT_TRUE(refresh.has_value());
  EXPECT_EQ(refresh->budget, f.core().options.max_load_age);
}

TEST(FleetPathTest, BeginTakesTheVersionHeldHere) {
  Fixture<> f;
  SharedRecord record{.value = std::string("v"), .version = "v-here"};
  record.fresh_for = record.keep_for = absl::Seconds(10);
  auto& shard = f.core().ShardFor(kHash);
  {
    EpochGuard guard;
    auto entry = Engine<Fixture<>::Core>::Writes(f.core()).EntryFromTier(
        f.key_, kHash, "v", record, f.core().NowNanos());
    Fixture<>::Core::Writer w(shard);
    shard.Store(w, nullptr, std::move(entry), f.core().NowNanos());
  }
  EXPECT_EQ(f.fleet().Begin(f.LoadFor())->have_version, "v-here");
}

TEST(FleetPathTest, AFreshRecordAnswersWithoutALease) {
  Fixture<> f;
  f.StoreInTier(std::string("from-tier"));
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* answer = std::get_if<TierAnswer<std::string>>(&verdict);
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer->value.value(), "from-tier");
  EXPECT_EQ(answer->record.version, "v-other");
  EXPECT_EQ(answer->now, f.core().NowNanos());
  EXPECT_EQ(f.core().recorder.Snapshot().shared_hits, 1u);
  EXPECT_EQ(f.core().recorder.Snapshot().leases_acquired, 0u);
}

TEST(FleetPathTest, ARememberedErrorAnswersAsTheFleetsError) {
  Fixture<> f;
  f.StoreInTier(absl::NotFoundError("gone"), absl::ZeroDuration());
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* answer = std::get_if<TierAnswer<std::string>>(&verdict);
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer->value.status(), absl::NotFoundError("gone"));
}

TEST(FleetPathTest, AnEmptyTierGrantsTheLeaseToLoadUnder) {
  Fixture<> f;
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* leased = std::get_if<LoadUnderLease>(&verdict);
  ASSERT_NE(leased, nullptr);
  EXPECT_EQ(leased->lease.key_bytes, "k");
  EXPECT_FALSE(leased->lease.token.empty());
  EXPECT_FALSE(leased->lease.record_stands_in);
  EXPECT_EQ(f.core().recorder.Snapshot().leases_acquired, 1u);
}

TEST(FleetPathTest, ALeaseOverARecordThatStandsInForErrorsSaysSo) {
  Fixture<> f;
  f.tier_->StoreRaw(f.key_, SharedFill{.value = std::string("old"),
                                       .fresh_for = absl::Seconds(1),
                                       .keep_for = absl::Seconds(60),
                                       .serve_on_error_for = absl::Seconds(60),
                                       .version = "v-old"});
  f.tier_clock_.Advance(absl::Seconds(5));  // Past fresh: the lease is granted.
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* leased = std::get_if<LoadUnderLease>(&verdict);
  ASSERT_NE(leased, nullptr);
  EXPECT_TRUE(leased->lease.record_stands_in);
}

TEST(FleetPathTest, ALeaseOverAStaleRecordThePolicyServesServesIt) {
  Fixture<SoftTtl> f({}, SoftTtl{.stale_for = absl::Seconds(30)});
  f.StoreInTier(std::string("stale"), absl::Seconds(1));
  f.tier_clock_.Advance(absl::Seconds(5));
  Load<Fixture<SoftTtl>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* stale = std::get_if<ServeStale<std::string>>(&verdict);
  ASSERT_NE(stale, nullptr);
  EXPECT_EQ(stale->stale.value(), "stale");
  EXPECT_EQ(stale->record.version, "v-other");
  EXPECT_FALSE(stale->lease.token.empty());
  EXPECT_EQ(f.core().recorder.Snapshot().shared_hits, 1u);

  // A background refresh is never answered stale: it loads under the lease.
  f.fleet().GiveBack(&stale->lease);
  Load<Fixture<SoftTtl>::Core> refresh = f.LoadFor(/*caller_waits=*/false);
  auto refresh_verdict = f.Ask(refresh);
  EXPECT_TRUE(std::holds_alternative<LoadUnderLease>(refresh_verdict));
}

TEST(FleetPathTest, GarbageIsAskedPastOnceAndThenLoadedUnderTheLease) {
  Fixture<SingleFlight, int> f;
  f.StoreInTier(std::string("not a number"));
  Load<Fixture<SingleFlight, int>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  EXPECT_TRUE(std::holds_alternative<LoadUnderLease>(verdict));
  EXPECT_EQ(f.core().recorder.Snapshot().shared_errors, 1u);
  EXPECT_EQ(f.tier_->lookups(), 2);
}

TEST(FleetPathTest, AFailingOrThrowingTierLoadsAlone) {
  Fixture<> f;
  f.tier_->set_failure(absl::UnavailableError("down"));
  Load<Fixture<>::Core> load = f.LoadFor();
  EXPECT_TRUE(std::holds_alternative<LoadAlone>(f.Ask(load)));
  f.tier_->set_failure(absl::OkStatus());
  f.tier_->set_throws(true);
  EXPECT_TRUE(std::holds_alternative<LoadAlone>(f.Ask(load)));
  EXPECT_EQ(f.core().recorder.Snapshot().shared_errors, 2u);
}

TEST(FleetPathTest, HeldElsewhereAnExecutorTaskParksWithoutItsSlot) {
  Fixture<> f;
  f.tier_->TakeLease(f.key_);
  Load<Fixture<>::Core> load = f.LoadFor();
  load.slot = f.core().slots.TryAcquire(f.core().NowNanos());
  auto verdict = f.Ask(load, Where::kExecutorTask);
  const auto* park = std::get_if<ParkFor>(&verdict);
  ASSERT_NE(park, nullptr);
  EXPECT_GT(park->wait, absl::ZeroDuration());
  EXPECT_LE(park->wait, absl::Seconds(1));
  EXPECT_EQ(load.slot, 0u);  // No slot is held while another process loads.
  EXPECT_EQ(f.tier_->awaits(), 0);
  EXPECT_EQ(f.core().recorder.Snapshot().lease_waits, 1u);
}

TEST(FleetPathTest, HeldElsewhereACallerWaitsHereAndTakesTheFill) {
  Fixture<> f;
  const std::string token = f.tier_->TakeLease(f.key_);
  f.tier_->set_on_await([&] {
    (void)f.tier_->Fill(f.key_, token,
                        SharedFill{.value = std::string("filled"),
                                   .fresh_for = absl::Seconds(10),
                                   .keep_for = absl::Seconds(10),
                                   .version = "v-filled"});
  });
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* answer = std::get_if<TierAnswer<std::string>>(&verdict);
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer->value.value(), "filled");
  EXPECT_EQ(f.tier_->awaits(), 1);
}

TEST(FleetPathTest, HeldElsewherePastTheDeadlineGivesUpAndKeptValuesStandIn) {
  Fixture<> f;
  f.tier_->TakeLease(f.key_);
  Load<Fixture<>::Core> load = f.LoadFor();
  std::optional<FleetProgress> progress = f.fleet().Begin(load);
  progress->deadline = std::chrono::steady_clock::now();
  auto verdict = f.fleet().Ask(load, *progress, Where::kCallerThread);
  const auto* give_up = std::get_if<GiveUp>(&verdict);
  ASSERT_NE(give_up, nullptr);
  EXPECT_EQ(give_up->error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(give_up->stale_until_keep);
  EXPECT_EQ(f.core().recorder.Snapshot().wait_timeouts, 1u);
}

TEST(FleetPathTest, HeldElsewhereWhileTheCacheClosesGivesUpCancelled) {
  Fixture<> f;
  f.tier_->TakeLease(f.key_);
  f.core().lifeline->CloseAndWait();
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const auto* give_up = std::get_if<GiveUp>(&verdict);
  ASSERT_NE(give_up, nullptr);
  EXPECT_EQ(give_up->error.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(give_up->stale_until_keep);
}

TEST(FleetPathTest, FillWritesAValueAndReturnsItsScheduleAndVersion) {
  Fixture<> f;
  Load<Fixture<>::Core> load = f.LoadFor();
  auto verdict = f.Ask(load);
  const Lease lease = std::get<LoadUnderLease>(verdict).lease;
  const TierFill filled = f.fleet().Fill(load, lease, std::string("loaded"), 0,
                                         1'000'000, /*verdict=*/true);
  EXPECT_FALSE(filled.lease_lost);
  EXPECT_FALSE(filled.version.empty());
  ASSERT_TRUE(filled.lifetime.has_value());
  EXPECT_EQ(filled.lifetime->expires_after, absl::Seconds(10));
  const std::optional<SharedFill> record = f.tier_->record(f.key_);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->value.value(), "loaded");
  EXPECT_EQ(record->version, filled.version);
  EXPECT_EQ(record->load_duration, absl::Milliseconds(1));
}

TEST(FleetPathTest, AnErrorIsFilledOnlyAsAVerdictWithAnErrorTtl) {
  Options options;
  options.error_ttl = absl::Seconds(5);
  Fixture<> f(options);
  Load<Fixture<>::Core> load = f.LoadFor();
  Lease lease = std::get<LoadUnderLease>(f.Ask(load)).lease;
  // This process's own failure (not a verdict on the key): the lease goes
  // back, nothing is remembered.
  f.fleet().Fill(load, lease, absl::UnavailableError("mine"), 0, 1, false);
  EXPECT_FALSE(f.tier_->record(f.key_).has_value());
  EXPECT_EQ(f.tier_->releases(), 1);

  lease = std::get<LoadUnderLease>(f.Ask(load)).lease;
  f.fleet().Fill(load, lease, absl::NotFoundError("no such key"), 0, 1, true);
  const std::optional<SharedFill> record = f.tier_->record(f.key_);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->value.status(), absl::NotFoundError("no such key"));
  EXPECT_EQ(record->keep_for, absl::Seconds(5));
}

TEST(FleetPathTest, AFillThatLostItsLeaseSaysSo) {
  Fixture<> f;
  Load<Fixture<>::Core> load = f.LoadFor();
  const Lease lease = std::get<LoadUnderLease>(f.Ask(load)).lease;
  ASSERT_TRUE(f.tier_->Invalidate(f.key_, /*origin=*/0).ok());  // Another's.
  const TierFill filled =
      f.fleet().Fill(load, lease, std::string("late"), 0, 1, true);
  EXPECT_TRUE(filled.lease_lost);
  EXPECT_TRUE(filled.version.empty());
}

TEST(FleetPathTest, AValueTooLargeToShareGivesTheLeaseBack) {
  Fixture<> f;
  Load<Fixture<>::Core> load = f.LoadFor();
  const Lease lease = std::get<LoadUnderLease>(f.Ask(load)).lease;
  f.tier_->set_max_value_bytes(4);
  const TierFill filled =
      f.fleet().Fill(load, lease, std::string("far too long"), 0, 1, true);
  EXPECT_FALSE(filled.lease_lost);
  EXPECT_TRUE(filled.version.empty());
  EXPECT_TRUE(filled.lifetime.has_value());  // Stored here with it.
  EXPECT_EQ(f.tier_->releases(), 1);
  EXPECT_FALSE(f.tier_->record(f.key_).has_value());
}

TEST(FleetPathTest, DecodeMissesWhatThisProcessCannotUse) {
  Fixture<SingleFlight, int> f;
  SharedRecord record{.value = std::string("42"), .version = "v"};
  EXPECT_EQ(f.fleet().Decode(record)->value(), 42);
  record.value = std::string("forty-two");
  EXPECT_FALSE(f.fleet().Decode(record).has_value());
  record.value = absl::NotFoundError("remembered");
  EXPECT_EQ(f.fleet().Decode(record)->status(),
            absl::NotFoundError("remembered"));
  f.tier_->set_max_value_bytes(1);
  record.value = std::string("42");
  EXPECT_FALSE(f.fleet().Decode(record).has_value());
}

// Hears nothing: what a cache's subscription would hear is not tested here.
class DeafSubscriber final : public SharedTier::Subscriber {
 public:
  void OnInvalidate(std::string_view) override {}
  void OnMissedInvalidations() override {}
  void OnChange(std::string_view) override {}
};

TEST(FleetPathTest, PutThroughWritesTheValueAsThisCachesWrite) {
  static DeafSubscriber deaf;
  Fixture<> f;
  // PutThrough names this cache's subscription as the write's origin.
  f.core().subscription = f.tier_->Subscribe(&deaf);
  PutPlan plan;
  plan.life = Lifetime{.expires_after = absl::Seconds(3),
                       .quiet_for = absl::Seconds(3),
                       .keep_for = absl::Seconds(4),
                       .serve_on_error_for = absl::Seconds(3)};
  plan.version = "v-put";
  plan.bytes = "put";
  f.fleet().PutThrough(f.key_, kHash, plan);
  const std::optional<SharedFill> record = f.tier_->record(f.key_);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->value.value(), "put");
  EXPECT_EQ(record->fresh_for, absl::Seconds(3));
}

}  // namespace
}  // namespace paddock::internal
