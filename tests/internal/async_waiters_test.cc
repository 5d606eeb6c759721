// Tests of paddock/internal/async_waiters.h: the timers of waiters answered
// before their deadline are dropped, and a waiter still pending expires on
// time however many were answered around it.

#include "paddock/internal/async_waiters.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

using std::chrono::steady_clock;

class FlagWaiter : public AsyncWaiterBase {
 public:
  explicit FlagWaiter(SteadyTime deadline) : AsyncWaiterBase(deadline) {}
  bool Expire() override {
    expired.store(true);
    return true;
  }
  void Cancel() override { cancelled.store(true); }
  std::atomic<bool> expired{false};
  std::atomic<bool> cancelled{false};
};

// Answered at once, as most waiters are: the heap must not keep one timer
// per waiter for a whole wait_timeout.
TEST(AsyncWaitersTest, TimersOfAnsweredWaitersAreDropped) {
  AsyncWaiters waiters;
  const auto far = steady_clock::now() + std::chrono::hours(1);
  for (int i = 0; i < 10'000; ++i) {
    auto w = std::make_shared<FlagWaiter>(far);
    waiters.Add(w);
    ASSERT_TRUE(w->Claim());  // Answered by its load.
    waiters.Remove(w.get());
  }
  EXPECT_EQ(waiters.pending(), 0u);
  EXPECT_LE(waiters.timers_held(), 130u);
  EXPECT_EQ(waiters.CancelAll(), 0u);
}

TEST(AsyncWaitersTest, APendingWaiterExpiresThoughOthersAroundItWereAnswered) {
  AsyncWaiters waiters;
  const auto far = steady_clock::now() + std::chrono::hours(1);
  auto late = std::make_shared<FlagWaiter>(far);
  waiters.Add(late);
  auto soon = std::make_shared<FlagWaiter>(steady_clock::now() +
                                           std::chrono::milliseconds(20));
  waiters.Add(soon);
  for (int i = 0; i < 1000; ++i) {
    auto w = std::make_shared<FlagWaiter>(far);
    waiters.Add(w);
    ASSERT_TRUE(w->Claim());
    waiters.Remove(w.get());
  }
  // Generous: the timer thread only has to run at all. It forgets a waiter
  // after expiring it, so the flag alone does not mean `pending` is 1 yet.
  const auto give_up = steady_clock::now() + std::chrono::seconds(30);
  while ((!soon->expired.load() || waiters.pending() != 1) &&
         steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(soon->expired.load());
  EXPECT_FALSE(late->expired.load());
  EXPECT_EQ(waiters.pending(), 1u);
  EXPECT_EQ(waiters.CancelAll(), 1u);
  EXPECT_TRUE(late->cancelled.load());
}

}  // namespace
}  // namespace paddock::internal
