// Tests of paddock/internal/leading.h on a bare CacheCore with a ManualClock:
// a blocking caller leading its key's load (the short way of a pending load,
// the general way with a slot limit, an asynchronous loader waited for), no
// slot coming free, and a pending lead abandoned by an exception.

#include "paddock/internal/leading.h"

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
#include "paddock/completion.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/front.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SingleFlight,
                       absl::Hash<std::string>, std::equal_to<std::string>>;
using Front = Engine<Core>::Front;
using Leading = Engine<Core>::Leading;
using As = AdmitAs<Core::Flight>;

class LeadingTest : public ::testing::Test {
 protected:
  void Make(Options options = {}, Core::AsyncLoader async_loader = {}) {
    options.clock = &clock_;
    Core::Loader loader;
    if (!async_loader) {
      loader = [this](const std::string& key) -> absl::StatusOr<std::string> {
        ++loads_;
        return "loaded " + key;
      };
    }
    core_ = std::make_unique<Core>(
        std::move(loader), std::move(async_loader), options, SingleFlight(),
        absl::Hash<std::string>(), std::equal_to<std::string>());
    hash_ = core_->HashOf(key_);
  }
  Core::Shard& shard() { return core_->ShardFor(hash_); }
  std::optional<std::string> Stored() {
    EpochGuard guard;
    const Core::Entry* n = shard().Find(hash_, key_, core_->lookup_eq());
    if (n == nullptr || !n->has_value()) return std::nullopt;
    return n->value();
  }
  // A Get's miss: admitted, then led.
  absl::StatusOr<std::string> Miss() {
    PendingLead<Core> pending(*core_, shard());
    Admitted<Core> admitted =
        Front(*core_).Admit(shard(), key_, hash_, As::Get(!core_->async_loader),
                            /*times_load=*/true, pending.get());
    EXPECT_NE(admitted.joined.role, Role::kJoin);
    if (admitted.joined.role == Role::kLeadPending) pending.set_registered();
    return Leading(*core_).LeadMiss(shard(), key_, hash_, admitted.joined,
                                    admitted.start, pending.registered());
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  const std::string key_ = "k";
  size_t hash_ = 0;
  int loads_ = 0;
  std::unique_ptr<Core> core_;
};

TEST_F(LeadingTest, APendingLeadLoadsAndStores) {
  Make();
  EXPECT_EQ(Miss().value(), "loaded k");
  EXPECT_EQ(loads_, 1);
  EXPECT_EQ(Stored(), "loaded k");
  EXPECT_EQ(core_->recorder.Snapshot().loads, 1u);
}

TEST_F(LeadingTest, WithASlotLimitTheLeadTakesASlotAndGivesItBack) {
  Options options;
  options.max_concurrent_loads = 1;
  Make(options);
  EXPECT_EQ(Miss().value(), "loaded k");
  EXPECT_EQ(Stored(), "loaded k");
  const LoadSlots::Ticket slot = core_->slots.TryAcquire(core_->NowNanos());
  EXPECT_NE(slot, 0u);  // Given back.
  core_->slots.Release(slot);
}

TEST_F(LeadingTest, NoSlotWithinWaitTimeoutIsDeadlineExceeded) {
  Options options;
  options.max_concurrent_loads = 1;
  options.wait_timeout = absl::Milliseconds(1);
  Make(options);
  const LoadSlots::Ticket taken = core_->slots.TryAcquire(core_->NowNanos());
  const absl::StatusOr<std::string> got = Miss();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(loads_, 0);
  core_->slots.Release(taken);
}

TEST_F(LeadingTest, AnAsyncLoaderIsWaitedForLikeAJoiner) {
  Make({}, [](const std::string& key, Completion<std::string> done) {
    done("async " + key);  // Inline: published before the wait begins.
  });
  EXPECT_EQ(Miss().value(), "async k");
  EXPECT_EQ(Stored(), "async k");
  EXPECT_EQ(core_->recorder.Snapshot().coalesced_waits, 0u);
}

TEST_F(LeadingTest, APendingLeadAbandonedByAnExceptionAnswersItsJoiners) {
  Make();
  std::shared_ptr<Core::Flight> joined;
  {
    PendingLead<Core> pending(*core_, shard());
    Admitted<Core> lead =
        Front(*core_).Admit(shard(), key_, hash_, As::Get(true),
                            /*times_load=*/true, pending.get());
    ASSERT_EQ(lead.joined.role, Role::kLeadPending);
    pending.set_registered();
    PendingLoad<Core::Flight> unused;
    joined = Front(*core_)
                 .Admit(shard(), key_, hash_, As::Get(true),
                        /*times_load=*/true, &unused)
                 .joined.flight;
    ASSERT_NE(joined, nullptr);
  }  // The leader leaves without completing its load.
  ASSERT_NE(joined->published(), nullptr);
  EXPECT_EQ(joined->published()->value.status().code(),
            absl::StatusCode::kInternal);
  // Unregistered: the next caller leads afresh.
  EXPECT_EQ(Miss().value(), "loaded k");
}

}  // namespace
}  // namespace paddock::internal
