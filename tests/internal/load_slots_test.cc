// Tests of paddock/internal/load_slots.h: the limit, release, a hung holder
// that stops counting once it passes the maximum load age (including for
// callers already waiting when it does), and reservations of queued loads.

#include "paddock/internal/load_slots.h"

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(LoadSlotsTest, ZeroMeansUnlimited) {
  LoadSlots slots(0, absl::Seconds(1));
  for (int i = 0; i < 1000; ++i) EXPECT_NE(slots.TryAcquire(0), 0u);
}

TEST(LoadSlotsTest, TheLimitHoldsUntilASlotIsReleased) {
  LoadSlots slots(2, absl::Seconds(1));
  const LoadSlots::Ticket a = slots.TryAcquire(0);
  const LoadSlots::Ticket b = slots.TryAcquire(0);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(slots.TryAcquire(0), 0u);
  slots.Release(a);
  EXPECT_NE(slots.TryAcquire(0), 0u);
}

TEST(LoadSlotsTest, AHolderPastTheMaximumAgeNoLongerCounts) {
  LoadSlots slots(1, absl::Nanoseconds(100));
  const LoadSlots::Ticket hung = slots.TryAcquire(0);
  EXPECT_EQ(slots.TryAcquire(99), 0u);
  const LoadSlots::Ticket next = slots.TryAcquire(100);
  EXPECT_NE(next, 0u);
  slots.Release(hung);  // Taken away already: not returned twice.
  EXPECT_EQ(slots.TryAcquire(100), 0u);
}

TEST(LoadSlotsTest, AWaiterTimesOutWhenNothingComesFree) {
  LoadSlots slots(1, absl::InfiniteDuration());
  ASSERT_NE(slots.TryAcquire(0), 0u);
  EXPECT_EQ(slots.AcquireFor(absl::Milliseconds(20), [] { return int64_t{0}; }),
            0u);
}

TEST(LoadSlotsTest, AWaiterIsWokenWhenASlotIsReleased) {
  LoadSlots slots(1, absl::InfiniteDuration());
  const LoadSlots::Ticket held = slots.TryAcquire(0);
  std::atomic<LoadSlots::Ticket> got{0};
  std::thread waiter([&] {
    got = slots.AcquireFor(absl::InfiniteDuration(), [] { return int64_t{0}; });
  });
  slots.Release(held);
  waiter.join();
  EXPECT_NE(got.load(), 0u);
}

TEST(LoadSlotsTest, AWaiterTakesTheSlotOfAHolderThatAgesOutWhileItWaits) {
  // The holder never returns. Once it is past the maximum age (on the cache
  // clock, advanced here after the waiter looked once and blocked), the
  // waiter must take its slot rather than wait for a release that never
  // comes, which would cost it its whole timeout.
  LoadSlots slots(1, absl::Milliseconds(200));
  std::atomic<int64_t> cache_now{0};
  std::atomic<int> looks{0};
  ASSERT_NE(slots.TryAcquire(0), 0u);  // Hung holder.
  std::atomic<LoadSlots::Ticket> got{0};
  std::thread waiter([&] {
    got = slots.AcquireFor(absl::Seconds(20), [&] {
      looks.fetch_add(1);
      return cache_now.load();
    });
  });
  while (looks.load() == 0) std::this_thread::yield();
  cache_now = absl::ToInt64Nanoseconds(absl::Milliseconds(250));
  waiter.join();
  EXPECT_NE(got.load(), 0u);
}

TEST(LoadSlotsTest, AReservationCountsAgainstTheLimitUntilALoadTakesIt) {
  LoadSlots slots(1, absl::Seconds(1));
  const LoadSlots::Ticket reserved = slots.TryReserve(0);
  ASSERT_NE(reserved, 0u);
  EXPECT_EQ(slots.TryReserve(0), 0u);  // Never another's reservation.
  const LoadSlots::Ticket load = slots.TryAcquire(0);  // A load takes it.
  EXPECT_NE(load, 0u);
  // Its queued load starts and finds no slot free; releasing the lost
  // reservation returns nothing.
  EXPECT_EQ(slots.Restart(reserved, 0), 0u);
  slots.Release(reserved);
  EXPECT_EQ(slots.TryAcquire(0), 0u);
  slots.Release(load);
  EXPECT_NE(slots.TryAcquire(0), 0u);
}

TEST(LoadSlotsTest, ALoadTakesTheNewestReservation) {
  LoadSlots slots(2, absl::Seconds(1));
  const LoadSlots::Ticket older = slots.TryReserve(0);
  const LoadSlots::Ticket newer = slots.TryReserve(5);
  ASSERT_NE(slots.TryAcquire(10), 0u);
  EXPECT_EQ(slots.Restart(older, 10), older);  // Kept.
  EXPECT_EQ(slots.Restart(newer, 10), 0u);     // Taken.
}

TEST(LoadSlotsTest, AReservationNeverAgesOutButItsRunningLoadDoes) {
  LoadSlots slots(1, absl::Nanoseconds(100));
  const LoadSlots::Ticket reserved = slots.TryReserve(0);
  // Queued for longer than the maximum age: still held, not hung.
  EXPECT_EQ(slots.TryReserve(1000), 0u);
  // Started at 1000, it ages from then.
  EXPECT_EQ(slots.Restart(reserved, 1000), reserved);
  EXPECT_EQ(slots.TryAcquire(1099), 0u);
  EXPECT_NE(slots.TryAcquire(1100), 0u);
}

TEST(LoadSlotsTest, ALoadTakesAHungHoldersSlotBeforeAReservation) {
  LoadSlots slots(2, absl::Nanoseconds(100));
  const LoadSlots::Ticket hung = slots.TryAcquire(0);
  const LoadSlots::Ticket reserved = slots.TryReserve(0);
  ASSERT_NE(hung, 0u);
  ASSERT_NE(slots.TryAcquire(100), 0u);
  EXPECT_EQ(slots.Restart(reserved, 100), reserved);
}

TEST(LoadSlotsTest, UnlimitedReservesAndRestartsForFree) {
  LoadSlots slots(0, absl::Seconds(1));
  const LoadSlots::Ticket reserved = slots.TryReserve(0);
  EXPECT_NE(reserved, 0u);
  EXPECT_NE(slots.Restart(reserved, 0), 0u);
}

}  // namespace
}  // namespace paddock::internal
