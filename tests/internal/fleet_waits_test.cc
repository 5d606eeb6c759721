// Tests for internal::FleetWaits: loads parked until another process fills
// a key are woken once, by a change of their key, by a change of every key,
// or by their time; a change announced before a wait parks is not lost; and
// dropping a cache's waits calls none of them.

#include "paddock/internal/fleet_waits.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

using SteadyTime = FleetWaits::SteadyTime;

// Far enough that no test sees it come.
SteadyTime Later() {
  return std::chrono::steady_clock::now() + std::chrono::hours(1);
}

// Counts its calls, and its destruction uncalled.
struct Probe {
  std::atomic<int> calls{0};
  std::atomic<int> dropped{0};
  std::atomic<std::thread::id> thread{};

  FleetWaits::Wake Wake() {
    // Destroyed without a call: counted as dropped.
    struct Guard {
      explicit Guard(Probe* p) : probe(p) {}
      Guard(const Guard&) = delete;
      Guard& operator=(const Guard&) = delete;
      Probe* const probe;
      bool called = false;
      ~Guard() {
        if (!called) probe->dropped.fetch_add(1);
      }
    };
    return [guard = std::make_unique<Guard>(this)]() mutable {
      guard->called = true;
      guard->probe->thread.store(std::this_thread::get_id());
      guard->probe->calls.fetch_add(1);
    };
  }
};

// Parks a wake of `probe`; returns what Park does.
bool Park(FleetWaits& waits, const void* tier, const void* owner,
          uint64_t since, SteadyTime at, Probe& probe) {
  FleetWaits::Wake wake = probe.Wake();
  return waits.Park(tier, "k", owner, since, at, wake);
}

const int kTier = 1;
const int kOtherTier = 2;
const int kOwner = 3;

TEST(FleetWaitsTest, AChangeOfTheKeyWakesItOnceOnTheNotifyingThread) {
  Probe probe;  // Outlives the waits, which may hold its wake.
  FleetWaits waits;
  ASSERT_TRUE(Park(waits, &kTier, &kOwner, waits.sequence(), Later(), probe));
  EXPECT_EQ(waits.parked(), 1u);
  waits.Notify(&kTier, "k");
  EXPECT_EQ(probe.calls, 1);
  EXPECT_EQ(probe.thread.load(), std::this_thread::get_id());
  EXPECT_EQ(waits.parked(), 0u);
  waits.Notify(&kTier, "k");  // Woken once only.
  EXPECT_EQ(probe.calls, 1);
  EXPECT_EQ(probe.dropped, 0);
}

TEST(FleetWaitsTest, AChangeOfAnotherKeyOrTierWakesNothing) {
  Probe probe;  // Outlives the waits, which may hold its wake.
  FleetWaits waits;
  ASSERT_TRUE(Park(waits, &kTier, &kOwner, waits.sequence(), Later(), probe));
  waits.Notify(&kTier, "j");
  waits.Notify(&kOtherTier, "k");
  waits.NotifyAll(&kOtherTier);
  EXPECT_EQ(probe.calls, 0);
  EXPECT_EQ(waits.parked(), 1u);
  waits.NotifyAll(&kTier);  // The tier may have missed changes.
  EXPECT_EQ(probe.calls, 1);
}

// The load reads the sequence, asks the tier, and parks; a change announced
// in between would be lost if Park did not look back.
TEST(FleetWaitsTest, AChangeBetweenTheLookupAndTheParkIsNotLost) {
  Probe probe;  // Outlives the waits, which may hold its wake.
  FleetWaits waits;
  const uint64_t since = waits.sequence();
  waits.Notify(&kTier, "k");
  FleetWaits::Wake wake = probe.Wake();
  EXPECT_FALSE(waits.Park(&kTier, "k", &kOwner, since, Later(), wake));
  EXPECT_EQ(waits.parked(), 0u);
  ASSERT_TRUE(wake);  // Left with the caller, uncalled.
  EXPECT_EQ(probe.dropped, 0);
  // Another key's change does not count against it.
  const uint64_t later = waits.sequence();
  waits.Notify(&kTier, "j");
  EXPECT_TRUE(waits.Park(&kTier, "k", &kOwner, later, Later(), wake));
  EXPECT_FALSE(wake);  // Taken.
}

TEST(FleetWaitsTest, APassedTimeWakesItOnTheTimerThread) {
  Probe probe;  // Outlives the waits, which may hold its wake.
  FleetWaits waits;
  ASSERT_TRUE(Park(waits, &kTier, &kOwner, waits.sequence(),
                   std::chrono::steady_clock::now(), probe));
  for (int i = 0; i < 10000 && probe.calls == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(probe.calls, 1);
  EXPECT_NE(probe.thread.load(), std::this_thread::get_id());
  EXPECT_EQ(waits.parked(), 0u);
}

TEST(FleetWaitsTest, DropDestroysTheOwnersWaitsUncalled) {
  Probe mine, theirs;
  FleetWaits waits;
  const int other_owner = 4;
  ASSERT_TRUE(Park(waits, &kTier, &kOwner, waits.sequence(), Later(), mine));
  ASSERT_TRUE(
      Park(waits, &kTier, &other_owner, waits.sequence(), Later(), theirs));
  EXPECT_EQ(waits.Drop(&kOwner), 1u);
  EXPECT_EQ(mine.dropped, 1);
  EXPECT_EQ(mine.calls, 0);
  waits.Notify(&kTier, "k");
  EXPECT_EQ(mine.calls, 0);
  EXPECT_EQ(theirs.calls, 1);
}

TEST(FleetWaitsTest, WaitsStillParkedAtTheEndAreDestroyedUncalled) {
  Probe probe;
  {
    FleetWaits waits;
    ASSERT_TRUE(Park(waits, &kTier, &kOwner, waits.sequence(), Later(), probe));
  }
  EXPECT_EQ(probe.calls, 0);
  EXPECT_EQ(probe.dropped, 1);
}

}  // namespace
}  // namespace paddock::internal
