// Tests for internal::Mutex: mutual exclusion under contention, the count
// of paddock locks the calling thread holds (what the loader-reentrancy
// checks read), and waits on a condition that release the lock meanwhile.

#include "paddock/internal/mutex.h"

#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(MutexTest, CountsTheLocksThisThreadHolds) {
  Mutex a, b;
  const int before = LocksHeld();
  {
    MutexLock la(&a);
    EXPECT_EQ(LocksHeld(), before + 1);
    {
      MutexLock lb(&b);
      EXPECT_EQ(LocksHeld(), before + 2);
    }
    EXPECT_EQ(LocksHeld(), before + 1);
  }
  EXPECT_EQ(LocksHeld(), before);
}

TEST(MutexTest, TryLockTakesOnlyAFreeMutex) {
  Mutex mu;
  if (mu.TryLock()) {
    // Held here: another thread cannot take it.
    std::thread other(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { EXPECT_FALSE(mu.TryLock()); });
    other.join();
    mu.Unlock();
  } else {
    ADD_FAILURE() << "a free mutex was not taken";
  }
  EXPECT_EQ(LocksHeld(), 0);
}

TEST(MutexTest, ExcludesUnderContention) {
  Mutex mu;
  int64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock lock(&mu);
        ++counter;  // A data race, and a lost update, without the mutex.
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, 80000);
}

TEST(MutexTest, AwaitReleasesTheLockUntilTheConditionHolds) {
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(&mu);  // Only possible while the waiter waits.
    ready = true;
    cv.notify_all();
  });
  {
    MutexLock lock(&mu);
    mu.Await(cv, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return ready; });
    EXPECT_TRUE(ready);
    EXPECT_EQ(LocksHeld(), 1);  // Held again on return, and counted.
  }
  setter.join();
}

TEST(MutexTest, AwaitUntilGivesUpAtItsDeadline) {
  Mutex mu;
  std::condition_variable cv;
  MutexLock lock(&mu);
  EXPECT_FALSE(mu.AwaitUntil(
      cv, std::chrono::steady_clock::now() + std::chrono::milliseconds(5),
      [] { return false; }));
  EXPECT_EQ(LocksHeld(), 1);
}

}  // namespace
}  // namespace paddock::internal
