// Tests of paddock/internal/flight.h: publish-once, waiting with and without
// a timeout, many waiters on real threads, the join count, and the
// asynchronous waiters it holds.

#include "paddock/internal/flight.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
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

// A shard reads a flight's state and start time without the claimer's help
// (Shard::Live): once a claimed flight shows as running, it must show its new
// start time, or a load queued longer than max_load_age looks too old to
// wait for and a second one starts. Real threads, claimer and watcher in
// lockstep, so that the watcher looks as soon as the state changes.
TEST(FlightTest, AClaimedFlightNeverShowsRunningWithItsQueuedTime) {
  constexpr int kFlights = 20000;
  constexpr int64_t kClaimedAt = 1'000'000;
  std::vector<std::unique_ptr<Flight<int>>> flights;
  for (int i = 0; i < kFlights; ++i) {
    flights.push_back(
        std::make_unique<Flight<int>>(0, Flight<int>::State::kQueued));
  }
  std::atomic<int> watching{-1};
  int stale = 0;
  std::thread watcher([&] {
    for (int i = 0; i < kFlights; ++i) {
      watching.store(i, std::memory_order_release);
      // Tight, to look within nanoseconds; yields if the claimer is off
      // the CPU (a loaded CI machine).
      for (int spins = 0; flights[i]->queued(); ++spins) {
        if (spins > 1000) std::this_thread::yield();
      }
      if (flights[i]->started_at() != kClaimedAt) ++stale;
    }
  });
  for (int i = 0; i < kFlights; ++i) {
    for (int spins = 0; watching.load(std::memory_order_acquire) < i; ++spins) {
      if (spins > 1000) std::this_thread::yield();
    }
    ASSERT_TRUE(flights[i]->TryClaim(kClaimedAt));
    EXPECT_FALSE(flights[i]->TryClaim(kClaimedAt));
  }
  watcher.join();
  EXPECT_EQ(stale, 0);
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

// An asynchronous waiter that only records whether it was claimed.
class CountingWaiter : public AsyncWaiterBase {
 public:
  CountingWaiter() : AsyncWaiterBase(SteadyTime::max()) {}
  bool Expire() override { return true; }
  void Cancel() override {}
};

// A load that hangs for good while callers keep arriving and timing out
// (their claim is the timeout's) holds the waiters still waiting, not every
// caller since it began.
TEST(FlightTest, AHungLoadForgetsTheAsyncWaitersThatTimedOut) {
  Flight<int> flight(0);
  std::vector<std::weak_ptr<AsyncWaiterBase>> answered;
  std::shared_ptr<AsyncWaiterBase> waiting;
  for (int i = 0; i < 10'000; ++i) {
    auto w = std::make_shared<CountingWaiter>();
    ASSERT_TRUE(flight.AddAsyncWaiter(w));
    if (i % 1000 == 0) {
      waiting = w;  // Still waiting: must be kept.
      continue;
    }
    ASSERT_TRUE(w->Claim());  // Timed out.
    answered.push_back(w);
  }
  EXPECT_LE(flight.async_waiters_held(), 64u);
  int alive = 0;
  for (const auto& w : answered) alive += w.expired() ? 0 : 1;
  EXPECT_LE(alive, 64);
  // Every waiter still waiting is answered by the load.
  const std::vector<std::shared_ptr<AsyncWaiterBase>> published =
      flight.Publish(1);
  int unclaimed = 0;
  for (const auto& w : published) unclaimed += w->claimed() ? 0 : 1;
  EXPECT_EQ(unclaimed, 10);
  EXPECT_NE(std::find(published.begin(), published.end(), waiting),
            published.end());
}

// Waiters nobody answered are all kept, in the order they came.
TEST(FlightTest, KeepsEveryAsyncWaiterStillWaitingInOrder) {
  Flight<int> flight(0);
  std::vector<std::shared_ptr<AsyncWaiterBase>> added;
  for (int i = 0; i < 1000; ++i) {
    added.push_back(std::make_shared<CountingWaiter>());
    ASSERT_TRUE(flight.AddAsyncWaiter(added.back()));
    if (i % 2 == 1) {
      ASSERT_TRUE(added.back()->Claim());
    }
  }
  std::vector<std::shared_ptr<AsyncWaiterBase>> expected;
  for (const auto& w : added) {
    if (!w->claimed()) expected.push_back(w);
  }
  std::vector<std::shared_ptr<AsyncWaiterBase>> published = flight.Publish(1);
  std::erase_if(published, [](const auto& w) { return w->claimed(); });
  EXPECT_EQ(published, expected);
}

}  // namespace
}  // namespace paddock::internal
