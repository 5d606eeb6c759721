// Tests of paddock/internal/async_load.h on a bare CacheCore: what an
// asynchronous load's state takes from its load, and the decisions its
// completion makes: once only, the loader's throw first, a completion dropped
// while the loader call unwinds left to the call's catch, and a lease given
// back when the cache is gone.

#include "paddock/internal/async_load.h"

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/load_state.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SingleFlight,
                       absl::Hash<std::string>, std::equal_to<std::string>>;
using Loads = AsyncLoads<Core>;
using State = AsyncLoadState<Core>;

class AsyncLoadTest : public ::testing::Test {
 protected:
  void Make(Core::AsyncLoader loader, std::shared_ptr<SharedTier> tier = {}) {
    Options options;
    options.clock = &clock_;
    options.shared = std::move(tier);
    core_ = std::make_unique<Core>(Core::Loader(), std::move(loader), options,
                                   SingleFlight(), absl::Hash<std::string>(),
                                   std::equal_to<std::string>());
  }
  std::shared_ptr<State> Start(const Lease* lease = nullptr) {
    Load<Core> from{key_, 7, nullptr, LoadKind::kForeground};
    return std::make_shared<State>(*core_, from, lease, 100);
  }

  ManualClock clock_;
  const std::string key_ = "k";
  std::unique_ptr<Core> core_;
};

TEST_F(AsyncLoadTest, TheStateTakesTheLoadItsSlotLastAndItsOwnKey) {
  Make([](const std::string&, Completion<std::string>) {});
  Load<Core> from{key_, 7, nullptr, LoadKind::kRefresh};
  from.slot = 3;
  from.awaited = Awaited::kByCaller;
  State state(*core_, from, nullptr, 100);
  EXPECT_EQ(from.slot, 0u);
  EXPECT_EQ(state.load.slot, 3u);
  EXPECT_EQ(state.load.awaited, Awaited::kByCaller);
  EXPECT_EQ(state.load.kind, LoadKind::kRefresh);
  EXPECT_EQ(&state.load.key, &state.key);  // Not the caller's.
  EXPECT_EQ(state.started, 100);
  EXPECT_EQ(state.tier, nullptr);
  state.load.slot = 0;  // Not a real ticket.
}

TEST_F(AsyncLoadTest, ACompletionIsHonouredOnceAndTheLoadersThrowWins) {
  Make([](const std::string&, Completion<std::string>) {});
  std::shared_ptr<State> state = Start();
  const absl::Status thrown = absl::InternalError("threw");
  EXPECT_EQ(Loads::Settle(*state, std::string("v"), false, thrown)->status(),
            thrown);
  EXPECT_FALSE(
      Loads::Settle(*state, std::string("again"), false, absl::OkStatus())
          .has_value());
}

TEST_F(AsyncLoadTest, ALoaderThatThrowsIsSettledByItsCaller) {
  Make([](const std::string&, Completion<std::string>) {
    throw std::runtime_error("boom");
  });
  std::shared_ptr<State> state = Start();
  bool completed = false;
  const std::optional<SettleNow> now =
      Loads::Call(*core_, *state,
                  Completion<std::string>(
                      [&](absl::StatusOr<std::string> result, bool dropped) {
                        // Dropped while the call unwinds: the caller settles
                        // it.
                        EXPECT_TRUE(dropped);
                        completed = Loads::Settle(*state, std::move(result),
                                                  dropped, absl::OkStatus())
                                        .has_value();
                      }));
  EXPECT_FALSE(completed);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->thrown.code(), absl::StatusCode::kInternal);
  EXPECT_NE(now->thrown.message().find("boom"), std::string::npos);
  EXPECT_TRUE(
      Loads::Settle(*state, now->result, false, now->thrown).has_value());
}

TEST_F(AsyncLoadTest, ACompletionDroppedByAnExceptionTheLoaderCaughtIsADrop) {
  Make([](const std::string&, Completion<std::string> done) {
    try {
      Completion<std::string> doomed = std::move(done);
      throw std::runtime_error("caught inside");
    } catch (const std::exception&) {
    }
  });
  std::shared_ptr<State> state = Start();
  const std::optional<SettleNow> now =
      Loads::Call(*core_, *state,
                  Completion<std::string>(
                      [&](absl::StatusOr<std::string> result, bool dropped) {
                        (void)Loads::Settle(*state, std::move(result), dropped,
                                            absl::OkStatus());
                      }));
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(now->thrown.ok());
  EXPECT_EQ(now->result.code(), absl::StatusCode::kCancelled);
}

TEST_F(AsyncLoadTest, ALoaderThatKeepsItsCompletionLeavesItToTheCompletion) {
  std::optional<Completion<std::string>> kept;
  Make([&](const std::string&, Completion<std::string> done) {
    kept.emplace(std::move(done));
  });
  std::shared_ptr<State> state = Start();
  std::optional<absl::StatusOr<std::string>> settled;
  EXPECT_FALSE(
      Loads::Call(*core_, *state,
                  Completion<std::string>(
                      [&](absl::StatusOr<std::string> result, bool dropped) {
                        settled = Loads::Settle(*state, std::move(result),
                                                dropped, absl::OkStatus());
                      }))
          .has_value());
  (*kept)(std::string("later"));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->value(), "later");
}

TEST_F(AsyncLoadTest, AnOrphanedLoadGivesItsLeaseBack) {
  ManualClock tier_clock;
  auto tier = std::make_shared<testing::FakeSharedTier>(&tier_clock);
  Make([](const std::string&, Completion<std::string>) {}, tier);
  const Lease lease{"k", tier->TakeLease("k")};
  std::shared_ptr<State> state = Start(&lease);
  EXPECT_EQ(state->tier, tier);
  Loads::ReleaseOrphanLease(*state);
  EXPECT_EQ(tier->releases(), 1);
  // Released: the next asker gets the lease.
  EXPECT_FALSE(tier->TakeLease("k").empty());
}

}  // namespace
}  // namespace paddock::internal
