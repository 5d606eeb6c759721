// Tests of paddock/internal/load_pipeline.h on a bare CacheCore with a
// ManualClock and tests/fake_shared_tier.h: a load run here (blocking loader
// and asynchronous one), through the shared tier (a lease filled, a stale
// record served with a refresh left to do, another process's fill left to
// park for on an executor task), and a refresh skipped for want of a slot.

#include "paddock/internal/load_pipeline.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/load_state.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {
namespace {

using paddock::testing::FakeSharedTier;

template <typename P>
using CoreOf = CacheCore<std::string, std::string, P, absl::Hash<std::string>,
                         std::equal_to<std::string>>;

template <typename P = SingleFlight>
class Harness {
 public:
  using Core = CoreOf<P>;

  explicit Harness(Options options = {}, P policy = {},
                   typename Core::AsyncLoader async_loader = {}) {
    options.clock = &clock_;
    options.ttl = absl::Seconds(10);
    typename Core::Loader loader;
    if (!async_loader) {
      loader = [this](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads_;
        return "loaded " + key;
      };
    }
    core_ = std::make_unique<Core>(std::move(loader), std::move(async_loader),
                                   options, policy, absl::Hash<std::string>(),
                                   std::equal_to<std::string>());
    hash_ = core_->HashOf(key_);
  }

  // A foreground load of key_, registered as a coalesced flight.
  Load<Core> Register(LoadKind kind = LoadKind::kForeground) {
    flight_ =
        std::make_shared<typename Core::Flight>(key_, hash_, core_->NowNanos());
    auto& shard = core_->ShardFor(hash_);
    typename Core::Writer w(shard);
    shard.Register(w, key_, hash_, flight_);
    Load<Core> load{key_, hash_, flight_, kind};
    load.awaited =
        kind == LoadKind::kForeground ? Awaited::kByCaller : Awaited::kByNobody;
    return load;
  }
  std::optional<std::string> Stored() {
    EpochGuard guard;
    const auto* n =
        core_->ShardFor(hash_).Find(hash_, key_, core_->lookup_eq());
    if (n == nullptr || !n->has_value()) return std::nullopt;
    return n->value();
  }
  typename Engine<Core>::LoadPipeline pipeline() {
    return typename Engine<Core>::LoadPipeline(*core_);
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  const std::string key_ = "k";
  size_t hash_ = 0;
  int loads_ = 0;
  std::unique_ptr<Core> core_;
  std::shared_ptr<typename Core::Flight> flight_;
};

TEST(LoadPipelineTest, ALoadRunHereCallsTheLoaderStoresAndPublishes) {
  Harness<> h;
  Load<Harness<>::Core> load = h.Register();
  h.flight_->Join();
  LoadEnd<std::string> end = h.pipeline().Run(load, Where::kCallerThread);
  ASSERT_TRUE(end.outcome.has_value());
  EXPECT_EQ(end.outcome->value.value(), "loaded k");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(end.follow_up));
  EXPECT_EQ(h.loads_, 1);
  EXPECT_EQ(h.Stored(), "loaded k");
  EXPECT_EQ(h.flight_->published()->value.value(), "loaded k");
  EXPECT_EQ(h.core_->recorder.Snapshot().loads, 1u);
}

TEST(LoadPipelineTest, AnAsyncLoaderCompletesTheLoadWhenItIsCalled) {
  std::optional<Completion<std::string>> kept;
  Harness<> h({}, {}, [&](const std::string&, Completion<std::string> done) {
    kept.emplace(std::move(done));
  });
  Load<Harness<>::Core> load = h.Register();
  h.flight_->Join();
  LoadEnd<std::string> end = h.pipeline().Run(load, Where::kCallerThread);
  EXPECT_FALSE(end.outcome.has_value());
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(h.Stored(), std::nullopt);
  (*kept)(std::string("completed"));
  EXPECT_EQ(h.Stored(), "completed");
  EXPECT_EQ(h.flight_->published()->value.value(), "completed");
}

TEST(LoadPipelineTest, WithATierALeasedLoadFillsItAndStoresItsVersion) {
  ManualClock tier_clock;
  auto tier = std::make_shared<FakeSharedTier>(&tier_clock);
  Options options;
  options.shared = tier;
  Harness<> h(options);
  Load<Harness<>::Core> load = h.Register();
  LoadEnd<std::string> end = h.pipeline().Run(load, Where::kCallerThread);
  ASSERT_TRUE(end.outcome.has_value());
  EXPECT_EQ(end.outcome->value.value(), "loaded k");
  const std::optional<SharedFill> record = tier->record("k");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->value.value(), "loaded k");
  EpochGuard guard;
  const auto* n =
      h.core_->ShardFor(h.hash_).Find(h.hash_, h.key_, h.core_->lookup_eq());
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(*n->shared_version(), record->version);
}

TEST(LoadPipelineTest, AStaleRecordServedLeavesItsRefreshToDo) {
  ManualClock tier_clock;
  auto tier = std::make_shared<FakeSharedTier>(&tier_clock);
  tier->StoreRaw("k", SharedFill{.value = std::string("stale"),
                                 .fresh_for = absl::Seconds(1),
                                 .keep_for = absl::Seconds(60),
                                 .version = "v-stale"});
  tier_clock.Advance(absl::Seconds(5));
  Options options;
  options.shared = tier;
  Harness<SoftTtl> h(options, SoftTtl{.stale_for = absl::Seconds(30)});
  Load<Harness<SoftTtl>::Core> load = h.Register();
  LoadEnd<std::string> end = h.pipeline().Run(load, Where::kCallerThread);
  ASSERT_TRUE(end.outcome.has_value());
  EXPECT_EQ(end.outcome->value.value(), "stale");
  const auto* stored = std::get_if<RefreshStored>(&end.follow_up);
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->version, "v-stale");
  EXPECT_EQ(h.loads_, 0);
  EXPECT_EQ(tier->releases(), 1);  // The lease went back first.
}

TEST(LoadPipelineTest, AnExecutorTaskLeavesAnotherProcesssFillToParkFor) {
  ManualClock tier_clock;
  auto tier = std::make_shared<FakeSharedTier>(&tier_clock);
  tier->TakeLease("k");
  Options options;
  options.shared = tier;
  Harness<> h(options);
  Load<Harness<>::Core> load = h.Register();
  LoadEnd<std::string> end = h.pipeline().Run(load, Where::kExecutorTask);
  EXPECT_FALSE(end.outcome.has_value());
  const auto* park = std::get_if<ParkLoad>(&end.follow_up);
  ASSERT_NE(park, nullptr);
  EXPECT_EQ(park->progress.key_bytes, "k");
  EXPECT_TRUE(park->progress.waited);
  EXPECT_EQ(h.loads_, 0);
}

TEST(LoadPipelineTest, ARefreshWithoutASlotThroughTheTierIsSkipped) {
  ManualClock tier_clock;
  auto tier = std::make_shared<FakeSharedTier>(&tier_clock);
  Options options;
  options.shared = tier;
  options.max_concurrent_loads = 1;
  Harness<> h(options);
  const LoadSlots::Ticket taken =
      h.core_->slots.TryAcquire(h.core_->NowNanos());
  ASSERT_NE(taken, 0u);
  Load<Harness<>::Core> refresh = h.Register(LoadKind::kRefresh);
  LoadEnd<std::string> end = h.pipeline().Run(refresh, Where::kExecutorTask);
  EXPECT_FALSE(end.outcome.has_value());
  EXPECT_EQ(h.loads_, 0);
  EXPECT_EQ(h.core_->recorder.Snapshot().refreshes_skipped, 1u);
  EXPECT_EQ(tier->releases(), 1);  // Its lease went back.
  h.core_->slots.Release(taken);
}

}  // namespace
}  // namespace paddock::internal
