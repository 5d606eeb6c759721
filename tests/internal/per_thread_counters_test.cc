// Tests of paddock/internal/per_thread_counters.h: per-thread increments sum
// exactly, across threads, chunks of lines and reused thread records.

#include "paddock/internal/per_thread_counters.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "paddock/internal/epoch.h"

namespace paddock::internal {
namespace {

TEST(PerThreadCountersTest, FreshCountersSumToZero) {
  PerThreadCounters<3> counters;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(counters.Sum(i), 0u);
}

TEST(PerThreadCountersTest, CountersAreIndependent) {
  PerThreadCounters<3> counters;
  const ThreadRecord* record = CurrentThreadRecord();
  counters.Increment(record, 0);
  counters.Increment(record, 2);
  counters.Increment(record, 2);
  EXPECT_EQ(counters.Sum(0), 1u);
  EXPECT_EQ(counters.Sum(1), 0u);
  EXPECT_EQ(counters.Sum(2), 2u);
}

TEST(PerThreadCountersTest, IncrementsFromManyThreadsSumExactly) {
  constexpr int kThreads = 8;
  constexpr uint64_t kIncrements = 50'000;
  PerThreadCounters<2> counters;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const ThreadRecord* record = CurrentThreadRecord();
      start.arrive_and_wait();
      for (uint64_t i = 0; i < kIncrements; ++i) {
        counters.Increment(record, 0);
        if (i % 2 == 0) counters.Increment(record, 1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counters.Sum(0), kThreads * kIncrements);
  EXPECT_EQ(counters.Sum(1), kThreads * kIncrements / 2);
}

TEST(PerThreadCountersTest, SumWhileThreadsIncrementNeverExceedsTheTotal) {
  constexpr int kThreads = 4;
  constexpr uint64_t kIncrements = 100'000;
  PerThreadCounters<1> counters;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const ThreadRecord* record = CurrentThreadRecord();
      for (uint64_t i = 0; i < kIncrements; ++i) counters.Increment(record, 0);
    });
  }
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t sum = counters.Sum(0);
    ASSERT_GE(sum, last) << "a sum went back";
    ASSERT_LE(sum, kThreads * kIncrements);
    last = sum;
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counters.Sum(0), kThreads * kIncrements);
}

TEST(PerThreadCountersTest,
     IncrementsFromMoreThreadsThanOneChunkHoldSumExactly) {
  // 64 lines per chunk: with 100 threads alive at once, some records have
  // indices past the first chunk.
  constexpr int kThreads = 100;
  constexpr uint64_t kIncrements = 1000;
  PerThreadCounters<1> counters;
  std::latch all_registered(kThreads);
  std::vector<uint32_t> indices(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const ThreadRecord* record = CurrentThreadRecord();
      indices[t] = record->index;
      // All alive at once, so every thread holds a record of its own.
      all_registered.arrive_and_wait();
      for (uint64_t i = 0; i < kIncrements; ++i) counters.Increment(record, 0);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GE(*std::max_element(indices.begin(), indices.end()), 64u);
  EXPECT_EQ(counters.Sum(0), kThreads * kIncrements);
}

TEST(PerThreadCountersTest, CountsOutliveTheirThreadAndAddUpWithTheNextOwner) {
  constexpr int kThreads = 20;
  constexpr uint64_t kIncrements = 500;
  PerThreadCounters<1> counters;
  // One after another: each thread likely reuses the last one's record and
  // line, and must add to it, not reset it.
  for (int t = 0; t < kThreads; ++t) {
    std::thread([&] {
      const ThreadRecord* record = CurrentThreadRecord();
      for (uint64_t i = 0; i < kIncrements; ++i) counters.Increment(record, 0);
    }).join();
  }
  EXPECT_EQ(counters.Sum(0), kThreads * kIncrements);
}

}  // namespace
}  // namespace paddock::internal
