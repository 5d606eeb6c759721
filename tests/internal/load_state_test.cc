// Tests of paddock/internal/load_state.h: the flight a load publishes to,
// and who waits for it.

#include "paddock/internal/load_state.h"

#include <memory>

#include "gtest/gtest.h"
#include "paddock/internal/flight.h"
#include "paddock/internal/in_flight_set.h"

namespace paddock::internal {
namespace {

// What Load needs of a cache's core.
struct FakeCore {
  using Key = int;
  using Flight = KeyedFlight<int, int>;
};

TEST(LoadStateTest, ALoadPublishesOnItsOwnFlight) {
  auto flight = std::make_shared<FakeCore::Flight>(1, 2, 0);
  const int key = 1;
  Load<FakeCore> load{key, 2, flight, LoadKind::kRefresh};
  EXPECT_EQ(load.Rendezvous(), flight.get());
}

TEST(LoadStateTest, APendingLoadPublishesOnlyOnceSomeoneJoined) {
  PendingLoad<FakeCore::Flight> pending;
  const int key = 1;
  Load<FakeCore> load{key, 2, nullptr, LoadKind::kForeground};
  load.pending = &pending;
  EXPECT_EQ(load.Rendezvous(), nullptr);
  pending.flight = std::make_shared<FakeCore::Flight>(1, 2, 0);
  EXPECT_EQ(load.Rendezvous(), pending.flight.get());
}

TEST(LoadStateTest, ALoadIsAwaitedByNobodyUntilACallerWaits) {
  const int key = 1;
  Load<FakeCore> load{key, 2, nullptr, LoadKind::kRefresh};
  EXPECT_EQ(load.awaited, Awaited::kByNobody);
  EXPECT_FALSE(load.caller_waits());
  load.awaited = Awaited::kByCaller;
  EXPECT_TRUE(load.caller_waits());
  // A caller whose wait for another process ran out still waits for this
  // load's outcome: only what a failure falls back to changes.
  load.awaited = Awaited::kByCallerPastItsWait;
  EXPECT_TRUE(load.caller_waits());
}

TEST(LoadStateTest, ALoadStartsWithNothingFromTheTier) {
  const int key = 1;
  Load<FakeCore> load{key, 2, nullptr, LoadKind::kForeground};
  EXPECT_EQ(load.from_tier, nullptr);
  EXPECT_FALSE(load.filled.lifetime.has_value());
  EXPECT_TRUE(load.filled.version.empty());
  EXPECT_FALSE(load.filled.lease_lost);
}

}  // namespace
}  // namespace paddock::internal
