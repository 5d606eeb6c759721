// Tests of paddock/internal/front.h on a bare CacheCore with a ManualClock and
// a ManualExecutor: what Admit serves or registers for each kind of caller,
// what it counts, a stale answer's refresh scheduled only by Finish, and how
// GetAsync's lead starts its load or ends one that cannot start.

#include "paddock/internal/front.h"

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
#include "paddock/executor.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/writes.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SoftTtl,
                       absl::Hash<std::string>, std::equal_to<std::string>>;
using Front = Engine<Core>::Front;
using Writes = Engine<Core>::Writes;
using As = AdmitAs<Core::Flight>;

class FrontTest : public ::testing::Test {
 protected:
  FrontTest() {
    Options options;
    options.clock = &clock_;
    options.executor = &executor_;
    options.ttl = absl::Seconds(10);
    core_ = std::make_unique<Core>(
        [this](const std::string& key) -> absl::StatusOr<std::string> {
          ++loads_;
          return "loaded " + key;
        },
        Core::AsyncLoader(), options, SoftTtl{.stale_for = absl::Seconds(30)},
        absl::Hash<std::string>(), std::equal_to<std::string>());
    hash_ = core_->HashOf(key_);
  }
  Core::Shard& shard() { return core_->ShardFor(hash_); }
  void StoreValue(const std::string& value) {
    auto n =
        Writes(*core_).NewEntry(key_, hash_, value, 0, core_->NowNanos(), {});
    Core::Writer w(shard());
    shard().Store(w, shard().Find(hash_, key_, core_->lookup_eq()),
                  std::move(n), core_->NowNanos());
  }
  std::optional<std::string> Stored() {
    EpochGuard guard;
    const Core::Entry* n = shard().Find(hash_, key_, core_->lookup_eq());
    if (n == nullptr || !n->has_value()) return std::nullopt;
    return n->value();
  }
  Admitted<Core> Admit(const As& as, PendingLoad<Core::Flight>* pending) {
    return Front(*core_).Admit(shard(), key_, hash_, as, /*times_load=*/false,
                               pending);
  }
  Stats stats() { return core_->recorder.Snapshot(); }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  ManualExecutor executor_;
  const std::string key_ = "k";
  size_t hash_ = 0;
  int loads_ = 0;
  std::unique_ptr<Core> core_;
};

TEST_F(FrontTest, AFreshEntryIsServedAndCountedOnlyByFinish) {
  StoreValue("v");
  Admitted<Core> admitted = Admit(As::Get(true), nullptr);
  ASSERT_TRUE(admitted.served.result.has_value());
  EXPECT_EQ(stats().misses, 0u);
  EXPECT_EQ(stats().hits, 0u);
  EXPECT_EQ(Front(*core_).Finish(admitted.served).value(), "v");
  EXPECT_EQ(stats().hits, 1u);
}

TEST_F(FrontTest, AMissRegistersTheCallersPendingLoadAndCountsAMiss) {
  PendingLoad<Core::Flight> pending;
  Admitted<Core> admitted = Admit(As::Get(true), &pending);
  EXPECT_FALSE(admitted.served.result.has_value());
  EXPECT_EQ(admitted.joined.role, Role::kLeadPending);
  EXPECT_EQ(stats().misses, 1u);

  // The next caller joins it, and is counted as a coalesced wait.
  PendingLoad<Core::Flight> unused;
  Admitted<Core> joiner = Admit(As::Get(true), &unused);
  EXPECT_EQ(joiner.joined.role, Role::kJoin);
  EXPECT_EQ(joiner.joined.flight, pending.flight);
  EXPECT_EQ(stats().misses, 2u);
  EXPECT_EQ(stats().coalesced_waits, 1u);
  Core::Writer w(shard());
  shard().ForgetPending(w, &pending);
}

TEST_F(FrontTest, AStaleEntrysRefreshIsScheduledOnlyAfterTheGuard) {
  StoreValue("old");
  clock_.Advance(absl::Seconds(15));
  Front front(*core_);
  std::optional<absl::StatusOr<std::string>> served =
      front.ServeNow(shard(), key_, hash_);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->value(), "old");
  EXPECT_EQ(stats().stale_hits, 1u);
  EXPECT_EQ(stats().refreshes, 1u);
  EXPECT_EQ(executor_.pending(), 1u);
  executor_.RunAll();
  EXPECT_EQ(Stored(), "loaded k");
}

TEST_F(FrontTest, NothingServedNowWithoutAnEntry) {
  EXPECT_FALSE(Front(*core_).ServeNow(shard(), key_, hash_).has_value());
  EXPECT_EQ(stats().misses, 0u);  // Its caller's locked path counts it.
}

TEST_F(FrontTest, GetAsyncsLeadQueuesItsLoadForTheExecutor) {
  Admitted<Core> admitted = Admit(As::GetAsync(false), nullptr);
  ASSERT_EQ(admitted.joined.role, Role::kLead);
  std::shared_ptr<Core::Flight> flight = admitted.joined.flight;
  EXPECT_TRUE(flight->queued());
  EXPECT_EQ(flight->joined(), 1);  // The caller, as its waiter.
  Front(*core_).StartAsyncLead(key_, hash_, flight, nullptr,
                               /*start_here=*/false);
  EXPECT_EQ(loads_, 0);
  executor_.RunAll();
  EXPECT_EQ(loads_, 1);
  ASSERT_NE(flight->published(), nullptr);
  EXPECT_EQ(flight->published()->value.value(), "loaded k");
}

TEST_F(FrontTest, AnUnstartedLeadEndsItsQueuedLoadUnlessAGetClaimedIt) {
  std::shared_ptr<Core::Flight> claimed =
      Admit(As::GetAsync(false), nullptr).joined.flight;
  ASSERT_TRUE(claimed->TryClaim(core_->NowNanos()));  // A blocking Get's.
  Front(*core_).EndUnstarted(key_, hash_, claimed, nullptr, false);
  EXPECT_EQ(claimed->published(), nullptr);  // That Get's load ends it.
  {
    Core::Writer w(shard());
    shard().DropFlight(w, key_, hash_);
  }

  std::shared_ptr<Core::Flight> queued =
      Admit(As::GetAsync(false), nullptr).joined.flight;
  ASSERT_NE(queued, claimed);
  Front(*core_).EndUnstarted(key_, hash_, queued, nullptr, false);
  ASSERT_NE(queued->published(), nullptr);
  EXPECT_EQ(queued->published()->value.status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace paddock::internal
