// Tests of paddock/internal/load_state.h: the flight a load publishes to.

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

}  // namespace
}  // namespace paddock::internal
