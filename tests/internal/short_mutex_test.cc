// Tests of paddock/internal/short_mutex.h: mutual exclusion under contention
// (spinning and sleeping), and the per-thread count of locks held.

#include "paddock/internal/short_mutex.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {
namespace {

TEST(ShortMutexTest, CountsAsALockHeld) {
  ShortMutex mu;
  const int before = LocksHeld();
  mu.Lock();
  EXPECT_EQ(LocksHeld(), before + 1);
  mu.Unlock();
  EXPECT_EQ(LocksHeld(), before);
}

TEST(ShortMutexTest, ExcludesUnderContention) {
  ShortMutex mu;
  uint64_t counter = 0;  // Guarded by mu; TSan checks it.
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        mu.Lock();
        const uint64_t seen = counter;
        if (i % 1000 == 0) std::this_thread::yield();  // Others pile up.
        counter = seen + 1;
        mu.Unlock();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kRounds);
}

TEST(ShortMutexTest, AHolderThatSleepsLetsTheWaiterSleepAndWakesIt) {
  // The holder keeps the lock far longer than the spin, so the waiter
  // sleeps on the futex and must be woken by the unlock.
  ShortMutex mu;
  std::atomic<bool> waiter_started{false};
  std::atomic<bool> waiter_done{false};
  mu.Lock();
  std::thread waiter([&] {
    waiter_started = true;
    mu.Lock();
    waiter_done = true;
    mu.Unlock();
  });
  while (!waiter_started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(waiter_done.load());
  mu.Unlock();
  waiter.join();
  EXPECT_TRUE(waiter_done.load());
  // Taken again after the sleeping round: still a working lock.
  mu.Lock();
  mu.Unlock();
}

}  // namespace
}  // namespace paddock::internal
