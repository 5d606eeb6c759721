// Tests of paddock/executor.h: ThreadPool and ManualExecutor.

#include "paddock/executor.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/testing/sync.h"
#include "thread_limit.h"

namespace paddock {
namespace {

using ::paddock::testing::Counter;
using ::paddock::testing::Gate;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Sets `*destroyed` when destroyed; lets a test see whether a queued task was
// dropped. Held by unique_ptr so moving the task around does not count.
struct DestructionFlag {
  explicit DestructionFlag(bool* destroyed) : destroyed(destroyed) {}
  ~DestructionFlag() { *destroyed = true; }
  bool* destroyed;
};

TEST(ThreadPoolTest, ZeroThreadsThrowsNamingTheCount) {
  EXPECT_THAT([] { ThreadPool pool(0); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("got 0")));
}

TEST(ThreadPoolTest, NegativeThreadsThrowsNamingTheCount) {
  EXPECT_THAT([] { ThreadPool pool(-3); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("-3")));
}

TEST(ThreadPoolTest, ThreadsReturnsTheNumberStarted) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
}

TEST(ThreadPoolTest, RunsEveryScheduledTask) {
  constexpr int kTasks = 1000;
  ThreadPool pool(4);
  std::atomic<int> ran{0};
  std::latch all_ran(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    pool.Schedule([&] {
      ran.fetch_add(1, std::memory_order_relaxed);
      all_ran.count_down();
    });
  }
  all_ran.wait();
  EXPECT_EQ(ran.load(), kTasks);
}

TEST(ThreadPoolTest, RunsEveryTaskScheduledFromSeveralThreads) {
  constexpr int kSchedulers = 4;
  constexpr int kTasksPerScheduler = 500;
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  std::latch all_ran(std::ptrdiff_t{kSchedulers} * kTasksPerScheduler);
  std::vector<std::thread> schedulers;
  for (int s = 0; s < kSchedulers; ++s) {
    schedulers.emplace_back([&] {
      for (int i = 0; i < kTasksPerScheduler; ++i) {
        pool.Schedule([&] {
          ran.fetch_add(1, std::memory_order_relaxed);
          all_ran.count_down();
        });
      }
    });
  }
  for (std::thread& scheduler : schedulers) scheduler.join();
  all_ran.wait();
  EXPECT_EQ(ran.load(), kSchedulers * kTasksPerScheduler);
}

TEST(ThreadPoolTest, RunsTasksOffTheSchedulingThread) {
  ThreadPool pool(1);
  std::promise<std::thread::id> ran_on;
  pool.Schedule([&] { ran_on.set_value(std::this_thread::get_id()); });
  EXPECT_NE(ran_on.get_future().get(), std::this_thread::get_id());
}

TEST(ThreadPoolTest, OneThreadRunsTasksInTheOrderScheduled) {
  constexpr int kTasks = 100;
  std::vector<int> order;  // Written only by the pool's one thread.
  {
    ThreadPool pool(1);
    for (int i = 0; i < kTasks; ++i)
      pool.Schedule([&, i] { order.push_back(i); });
  }  // Joined: `order` is complete and visible here.
  ASSERT_EQ(order.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPoolTest, DestructorRunsTheTasksStillQueued) {
  constexpr int kQueued = 200;
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::promise<void> blocker_started;
  auto pool = std::make_unique<ThreadPool>(1);
  pool->Schedule([&, released = release.get_future()] {
    blocker_started.set_value();
    released.wait();
  });
  for (int i = 0; i < kQueued; ++i) {
    pool->Schedule([&] { ran.fetch_add(1, std::memory_order_relaxed); });
  }
  blocker_started.get_future().wait();
  // The only thread is blocked, so every other task is still queued.
  EXPECT_EQ(ran.load(), 0);
  release.set_value();
  pool.reset();
  EXPECT_EQ(ran.load(), kQueued);
}

// The destructor waits for the running task, then runs every queued one.
TEST(ThreadPoolTest, DestroyingAPoolRunsEveryQueuedTaskFirst) {
  std::atomic<int> ran{0};
  Gate unblock;
  Counter blocked;
  auto pool = std::make_unique<ThreadPool>(1);
  pool->Schedule([&] {
    blocked.Increment();
    unblock.Wait();
  });
  ASSERT_TRUE(blocked.WaitFor(1));
  for (int i = 0; i < 100; ++i) pool->Schedule([&] { ++ran; });
  auto destroyed = std::async(std::launch::async, [&] { pool.reset(); });
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(100)),
            std::future_status::timeout);  // Waits for the running task.
  unblock.Open();
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  EXPECT_EQ(ran, 100);
}

TEST(ThreadPoolTest, RunsMoveOnlyTasks) {
  ThreadPool pool(2);
  std::promise<int> result;
  pool.Schedule([value = std::make_unique<int>(42), &result] {
    result.set_value(*value);
  });
  EXPECT_EQ(result.get_future().get(), 42);
}

TEST(ThreadPoolTest, RunsTasksScheduledByATask) {
  ThreadPool pool(2);
  std::promise<void> inner_ran;
  pool.Schedule([&] { pool.Schedule([&] { inner_ran.set_value(); }); });
  inner_ran.get_future().wait();
}

TEST(ThreadPoolTest, DestroysEachTaskAfterRunningIt) {
  bool destroyed = false;
  bool ran = false;
  {
    ThreadPool pool(1);
    pool.Schedule([flag = std::make_unique<DestructionFlag>(&destroyed), &ran] {
      ran = true;
    });
  }
  EXPECT_TRUE(ran);
  EXPECT_TRUE(destroyed);
}

TEST(ManualExecutorTest, NothingRunsUntilRunAllOrRunOne) {
  ManualExecutor executor;
  int ran = 0;
  for (int i = 0; i < 3; ++i) executor.Schedule([&] { ++ran; });
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(executor.pending(), 3u);
  EXPECT_EQ(executor.RunAll(), 3u);
  EXPECT_EQ(ran, 3);
}

TEST(ManualExecutorTest, RunOneRunsTheOldestTaskOnTheCallingThread) {
  ManualExecutor executor;
  std::vector<int> order;
  std::optional<std::thread::id> ran_on;
  executor.Schedule([&] {
    order.push_back(1);
    ran_on = std::this_thread::get_id();
  });
  executor.Schedule([&] { order.push_back(2); });

  EXPECT_TRUE(executor.RunOne());
  EXPECT_THAT(order, ElementsAre(1));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(executor.pending(), 1u);

  EXPECT_TRUE(executor.RunOne());
  EXPECT_THAT(order, ElementsAre(1, 2));
  EXPECT_EQ(executor.pending(), 0u);
}

TEST(ManualExecutorTest, RunOneWithNothingQueuedReturnsFalse) {
  ManualExecutor executor;
  EXPECT_FALSE(executor.RunOne());
}

TEST(ManualExecutorTest, RunAllWithNothingQueuedReturnsZero) {
  ManualExecutor executor;
  EXPECT_EQ(executor.RunAll(), 0u);
}

TEST(ManualExecutorTest, RunAllRunsTasksQueuedWhileRunningAndReturnsTheCount) {
  ManualExecutor executor;
  std::vector<int> order;
  executor.Schedule([&] {
    order.push_back(1);
    executor.Schedule([&] {
      order.push_back(3);
      executor.Schedule([&] { order.push_back(4); });
    });
  });
  executor.Schedule([&] { order.push_back(2); });

  EXPECT_EQ(executor.RunAll(), 4u);
  EXPECT_THAT(order, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(executor.pending(), 0u);
}

TEST(ManualExecutorTest, PendingCountsQueuedTasks) {
  ManualExecutor executor;
  EXPECT_EQ(executor.pending(), 0u);
  executor.Schedule([] {});
  executor.Schedule([] {});
  EXPECT_EQ(executor.pending(), 2u);
  executor.RunOne();
  EXPECT_EQ(executor.pending(), 1u);
  executor.RunAll();
  EXPECT_EQ(executor.pending(), 0u);
}

TEST(ManualExecutorTest, RunsMoveOnlyTasks) {
  ManualExecutor executor;
  int seen = 0;
  executor.Schedule(
      [value = std::make_unique<int>(7), &seen] { seen = *value; });
  executor.RunAll();
  EXPECT_EQ(seen, 7);
}

TEST(ManualExecutorTest, DestroyingItDestroysQueuedTasksWithoutRunningThem) {
  bool destroyed = false;
  bool ran = false;
  {
    ManualExecutor executor;
    executor.Schedule([flag = std::make_unique<DestructionFlag>(&destroyed),
                       &ran] { ran = true; });
    EXPECT_FALSE(destroyed);
  }
  EXPECT_TRUE(destroyed);
  EXPECT_FALSE(ran);
}

TEST(ManualExecutorTest, QueuesEveryTaskScheduledFromSeveralThreads) {
  constexpr int kSchedulers = 4;
  constexpr int kTasksPerScheduler = 1000;
  ManualExecutor executor;
  int ran = 0;  // Tasks run on this thread only.
  std::vector<std::thread> schedulers;
  for (int s = 0; s < kSchedulers; ++s) {
    schedulers.emplace_back([&] {
      for (int i = 0; i < kTasksPerScheduler; ++i) {
        executor.Schedule([&] { ++ran; });
      }
    });
  }
  for (std::thread& scheduler : schedulers) scheduler.join();
  EXPECT_EQ(executor.pending(),
            static_cast<size_t>(kSchedulers * kTasksPerScheduler));
  EXPECT_EQ(executor.RunAll(),
            static_cast<size_t>(kSchedulers * kTasksPerScheduler));
  EXPECT_EQ(ran, kSchedulers * kTasksPerScheduler);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

TEST(ThreadPoolDeathTest, APoolWhoseThreadsCannotAllStartThrowsSystemError) {
  // The threads already started must be joined during unwinding: destroyed
  // joinable, they would call std::terminate instead of the exception.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // This process and two more tasks: the third thread cannot start.
        if (!testing::LimitTasksOfThisUser(3)) std::_Exit(2);
        try {
          ThreadPool pool(64);
        } catch (const std::system_error&) {
          std::_Exit(0);
        }
        std::_Exit(1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace paddock
