// Tests of paddock/internal/flight.h: publish-once, waiting with and without
// a timeout, many waiters on real threads, and the join count.

#include "paddock/internal/flight.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(FlightTest, KeepsItsStartTime) {
  Flight<int> flight(42);
  EXPECT_EQ(flight.started_at(), 42);
}

TEST(FlightTest, WaitAfterPublishReturnsTheOutcome) {
  Flight<std::string> flight(0);
  flight.Publish("page");
  const std::string* outcome = flight.WaitFor(absl::ZeroDuration());
  ASSERT_NE(outcome, nullptr);
  EXPECT_EQ(*outcome, "page");
  // Waiting again sees the same outcome.
  EXPECT_EQ(flight.WaitFor(absl::InfiniteDuration()), outcome);
}

TEST(FlightTest, WaitBeforePublishTimesOut) {
  Flight<int> flight(0);
  EXPECT_EQ(flight.WaitFor(absl::ZeroDuration()), nullptr);
  EXPECT_EQ(flight.WaitFor(-absl::Seconds(1)), nullptr);
  flight.Publish(7);
  ASSERT_NE(flight.WaitFor(absl::ZeroDuration()), nullptr);
  EXPECT_EQ(*flight.WaitFor(absl::ZeroDuration()), 7);
}

TEST(FlightTest, CountsJoins) {
  Flight<int> flight(0);
  EXPECT_EQ(flight.joined(), 0);
  flight.Join();
  flight.Join();
  EXPECT_EQ(flight.joined(), 2);
}

// Waiters that block without limit all wake with the one outcome, whether
// they started waiting before or after it was published.
TEST(FlightTest, EveryWaiterOnRealThreadsGetsTheOutcome) {
  for (int round = 0; round < 50; ++round) {
    auto flight = std::make_shared<Flight<std::string>>(0);
    constexpr int kWaiters = 8;
    std::vector<std::string> seen(kWaiters);
    std::vector<std::thread> threads;
    for (int i = 0; i < kWaiters; ++i) {
      flight->Join();
      threads.emplace_back([flight, &seen, i] {
        const std::string* outcome = flight->WaitFor(absl::InfiniteDuration());
        seen[i] = outcome != nullptr ? *outcome : "timed out";
      });
    }
    flight->Publish("value " + std::to_string(round));
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(flight->joined(), kWaiters);
    for (const std::string& s : seen) {
      EXPECT_EQ(s, "value " + std::to_string(round));
    }
  }
}

// A bounded wait that the outcome beats returns it, not nullptr.
TEST(FlightTest, BoundedWaitReturnsAnOutcomePublishedMeanwhile) {
  auto flight = std::make_shared<Flight<int>>(0);
  std::thread publisher([flight] { flight->Publish(3); });
  const int* outcome = flight->WaitFor(absl::Hours(1));
  publisher.join();
  ASSERT_NE(outcome, nullptr);
  EXPECT_EQ(*outcome, 3);
}

}  // namespace
}  // namespace paddock::internal
