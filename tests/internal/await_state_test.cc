// Tests for internal::AwaitState: the coroutine suspended in Await and the
// answer to its lookup meet there, whichever comes first, and a destroyed
// awaiter's answer touches nothing of its frame.

#include "paddock/internal/await_state.h"

#include <atomic>
#include <coroutine>
#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "eager_coroutine.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

// Starts at once and stays suspended at its end, for the test to destroy.
using Owned = ::paddock::testing::OwnedCoroutine;

// What `AwaiterFor` does with the state, minus the cache.
struct Awaiter {
  std::shared_ptr<AwaitState<int>> state;
  bool await_ready() { return false; }
  bool await_suspend(std::coroutine_handle<> h) { return state->Suspend(h); }
  int await_resume() { return state->Take(); }
};

Owned AwaitInto(std::shared_ptr<AwaitState<int>> state, int* out) {
  *out = co_await Awaiter{std::move(state)};
}

TEST(AwaitStateTest, AnAnswerBeforeTheSuspendContinuesWithoutSuspending) {
  auto state = std::make_shared<AwaitState<int>>();
  state->Complete(7);
  int out = 0;
  Owned c = AwaitInto(state, &out);
  EXPECT_TRUE(c.handle.done());  // Ran to its end on this thread.
  EXPECT_EQ(out, 7);
  c.handle.destroy();
}

TEST(AwaitStateTest, AnAnswerAfterTheSuspendResumesTheCoroutine) {
  auto state = std::make_shared<AwaitState<int>>();
  int out = 0;
  Owned c = AwaitInto(state, &out);
  EXPECT_FALSE(c.handle.done());
  state->Complete(8);
  EXPECT_TRUE(c.handle.done());
  EXPECT_EQ(out, 8);
  c.handle.destroy();
}

TEST(AwaitStateTest, AnAnswerAfterADetachIsDroppedAndResumesNothing) {
  auto state = std::make_shared<AwaitState<int>>();
  int out = 0;
  Owned c = AwaitInto(state, &out);
  state->Detach();
  c.handle.destroy();  // The frame goes first.
  state->Complete(9);  // Under ASan: touches nothing of it.
  EXPECT_EQ(out, 0);
}

TEST(AwaitStateTest, ADetachAfterTheAnswerChangesNothing) {
  auto state = std::make_shared<AwaitState<int>>();
  int out = 0;
  Owned c = AwaitInto(state, &out);
  state->Complete(10);
  state->Detach();
  EXPECT_EQ(out, 10);
  c.handle.destroy();
}

// A detach racing the answer on another thread: exactly one of the two
// wins, every time (under TSan: with no race on the frame or the answer).
TEST(AwaitStateTest, ADetachRacingTheAnswerEitherDropsItOrResumes) {
  int detached = 0;
  int resumed = 0;
  for (int i = 0; i < 500; ++i) {
    auto state = std::make_shared<AwaitState<int>>();
    int out = 0;
    Owned c = AwaitInto(state, &out);
    std::atomic<bool> go{false};
    std::thread answer([&go, state] {
      while (!go.load(std::memory_order_acquire)) {
      }
      state->Complete(11);
    });
    go.store(true, std::memory_order_release);
    state->Detach();
    answer.join();
    if (c.handle.done()) {
      EXPECT_EQ(out, 11);
      ++resumed;
    } else {
      EXPECT_EQ(out, 0);
      ++detached;
    }
    c.handle.destroy();
  }
  EXPECT_EQ(detached + resumed, 500);
}

}  // namespace
}  // namespace paddock::internal
