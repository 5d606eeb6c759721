// Tests for internal::Lifeline: a task holding a pass keeps the cache's
// destructor waiting; once closing, no pass is given and `closing()` says
// so; and a destructor called from inside one of the cache's own callbacks
// ends the process with a message rather than deadlock or use freed memory.

#include "paddock/internal/lifeline.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(LifelineTest, PassesAreGivenUntilItCloses) {
  Lifeline lifeline;
  EXPECT_FALSE(lifeline.closing());
  {
    const Lifeline::Pass pass = lifeline.Enter();
    EXPECT_TRUE(pass);
    const Lifeline::Pass nested = lifeline.Enter();
    EXPECT_TRUE(nested);
  }
  lifeline.CloseAndWait();
  EXPECT_TRUE(lifeline.closing());
  EXPECT_FALSE(lifeline.Enter());
}

TEST(LifelineTest, CloseWaitsForEveryPassGiven) {
  Lifeline lifeline;
  auto pass = std::make_unique<Lifeline::Pass>(lifeline.Enter());
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    lifeline.CloseAndWait();
    closed = true;
  });
  // It is closing (no new pass) but waits for the one held.
  while (!lifeline.closing()) std::this_thread::yield();
  EXPECT_FALSE(lifeline.Enter());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(closed);
  pass.reset();
  closer.join();
  EXPECT_TRUE(closed);
}

TEST(LifelineTest, AMovedPassIsReleasedOnce) {
  Lifeline lifeline;
  {
    Lifeline::Pass first = lifeline.Enter();
    Lifeline::Pass second(std::move(first));
    EXPECT_TRUE(second);
  }
  lifeline.CloseAndWait();  // Returns: nothing is held.
  EXPECT_TRUE(lifeline.closing());
}

TEST(LifelineDeathTest, ClosingFromInsideItsOwnCallbackAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Lifeline lifeline;
        const Lifeline::CallbackScope scope(&lifeline);
        lifeline.CloseAndWait();
      },
      "from inside one of its own GetAsync callbacks");
}

TEST(LifelineTest, ACallbackOfAnotherLifelineMayCloseThisOne) {
  Lifeline outer, inner;
  const Lifeline::CallbackScope scope(&outer);
  inner.CloseAndWait();
  EXPECT_TRUE(inner.closing());
}

}  // namespace
}  // namespace paddock::internal
