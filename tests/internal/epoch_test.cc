// Tests of paddock/internal/epoch.h: guards, retirement and reclamation, and
// the per-thread record registry.

#include "paddock/internal/epoch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <latch>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sanitizers.h"

namespace paddock::internal {
namespace {

// Sets `*freed` when deleted, so a test sees when reclamation freed it.
struct Tracked {
  explicit Tracked(std::atomic<bool>* freed) : freed(freed) {}
  ~Tracked() { freed->store(true, std::memory_order_release); }
  std::atomic<bool>* freed;
};

// Calls TryReclaim() a few times: more than enough for any grace period that
// is not held up by a guard.
void ReclaimRepeatedly() {
  for (int i = 0; i < 10; ++i) TryReclaim();
}

// A thread that enters an EpochGuard and stays inside it until Release().
class GuardOnAnotherThread {
 public:
  GuardOnAnotherThread()
      : thread_([this, released = release_.get_future()] {
          EpochGuard guard;
          entered_.set_value();
          released.wait();
        }) {
    entered_.get_future().wait();
  }
  ~GuardOnAnotherThread() {
    if (thread_.joinable()) Release();
  }

  // Ends the guard and waits for the thread to exit.
  void Release() {
    release_.set_value();
    thread_.join();
  }

 private:
  std::promise<void> entered_;
  std::promise<void> release_;
  std::thread thread_;
};

TEST(EpochTest, RetiredObjectIsFreedOnceNoGuardIsActive) {
  std::atomic<bool> freed{false};
  RetireObject(new Tracked(&freed));
  EXPECT_GE(TryReclaim(), 1u);
  EXPECT_TRUE(freed.load());
  EXPECT_EQ(PendingRetirements(), 0u);
}

TEST(EpochTest, RetiredObjectIsNotFreedWhileAGuardOnAnotherThreadIsActive) {
  std::atomic<bool> freed{false};
  GuardOnAnotherThread reader;
  RetireObject(new Tracked(&freed));
  for (int i = 0; i < 20; ++i) {
    TryReclaim();
    ASSERT_FALSE(freed.load()) << "freed under an active guard, attempt " << i;
  }
  EXPECT_GE(PendingRetirements(), 1u);

  reader.Release();
  TryReclaim();
  EXPECT_TRUE(freed.load());
}

TEST(EpochTest, ManyRetirementsDoNotFreeObjectsAGuardMayStillSee) {
  // Retire() advances the epoch on its own every so many calls; that must
  // respect active guards as TryReclaim() does.
  constexpr int kObjects = 500;
  std::vector<std::atomic<bool>> freed(kObjects);
  GuardOnAnotherThread reader;
  for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_FALSE(freed[i].load()) << "object " << i;
  }

  reader.Release();
  TryReclaim();
  for (int i = 0; i < kObjects; ++i) EXPECT_TRUE(freed[i].load()) << i;
}

// While a guard holds the epoch back, retiring more does not retry the
// advance (and its process-wide barrier) every few retirements: at most once
// per interval (200 µs), however many wait.
TEST(EpochTest, AnAdvanceBlockedByAGuardIsNotRetriedAtEveryHandOver) {
  constexpr int kObjects = 100'000;
  std::vector<std::atomic<bool>> freed(kObjects);
  GuardOnAnotherThread reader;
  const uint64_t tries = AdvanceTries();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // One try per interval, and one more for a try made just before the
  // guard blocked one; every 16 retirements would be 6,250.
  const uint64_t bound =
      static_cast<uint64_t>(elapsed / std::chrono::microseconds(200)) + 2;
  EXPECT_LE(AdvanceTries() - tries, bound);
  reader.Release();
  TryReclaim();
  for (int i = 0; i < kObjects; ++i) ASSERT_TRUE(freed[i].load()) << i;
}

TEST(EpochTest, ObjectRetiredInsideAGuardOnThisThreadOutlivesTheGuard) {
  std::atomic<bool> freed{false};
  {
    EpochGuard guard;
    RetireObject(new Tracked(&freed));
    ReclaimRepeatedly();
    EXPECT_FALSE(freed.load());
  }
  TryReclaim();
  EXPECT_TRUE(freed.load());
}

TEST(EpochTest, NestedGuardsProtectUntilTheOutermostEnds) {
  ThreadRecord* const record = CurrentThreadRecord();
  std::atomic<bool> freed{false};
  {
    EpochGuard outer;
    const uint64_t announced = record->state.load();
    EXPECT_NE(announced & 1, 0u);
    RetireObject(new Tracked(&freed));
    // Moves the epoch as far as `outer` allows.
    ReclaimRepeatedly();
    {
      // An inner guard must not announce the newer epoch: that would let
      // reclamation free what `outer` may still see.
      EpochGuard inner;
      EXPECT_EQ(record->state.load(), announced);
      ReclaimRepeatedly();
      EXPECT_FALSE(freed.load());
    }
    EXPECT_EQ(record->state.load(), announced) << "inner guard ended outer";
    ReclaimRepeatedly();
    EXPECT_FALSE(freed.load());
  }
  EXPECT_EQ(record->state.load(), 0u);
  TryReclaim();
  EXPECT_TRUE(freed.load());
}

TEST(EpochTest, AThreadThatExitedDoesNotHoldBackReclamation) {
  std::thread([] { EpochGuard guard; }).join();
  std::atomic<bool> freed{false};
  RetireObject(new Tracked(&freed));
  TryReclaim();
  EXPECT_TRUE(freed.load());
}

// A thread's retirements wait in its buffer until it is full, TryReclaim()
// or the thread exits; a thread that retired a few and exited must not keep
// them from being freed.
TEST(EpochTest, RetirementsOfAThreadThatExitedAreFreed) {
  constexpr int kObjects = 3;  // Fewer than a buffer holds.
  std::vector<std::atomic<bool>> freed(kObjects);
  std::thread([&] {
    for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  }).join();
  TryReclaim();
  for (int i = 0; i < kObjects; ++i) EXPECT_TRUE(freed[i].load()) << i;
  EXPECT_EQ(PendingRetirements(), 0u);
}

// Without any TryReclaim(), retiring keeps freeing: buffers are handed over
// when full and the epoch advances on its own, however fast retirements come
// (the advance's rate limit gives way to a count: this loop outruns the
// interval, and its count forces several advances).
TEST(EpochTest, RetiringAloneEventuallyFreesEarlierRetirements) {
  constexpr int kObjects = 20000;
  std::vector<std::atomic<bool>> freed(kObjects);
  for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  EXPECT_TRUE(freed[0].load());
  EXPECT_LT(PendingRetirements(), static_cast<size_t>(kObjects));
  TryReclaim();
}

TEST(EpochTest, CurrentThreadRecordIsStableOnAThread) {
  ThreadRecord* const record = CurrentThreadRecord();
  EXPECT_EQ(CurrentThreadRecord(), record);
  EXPECT_TRUE(record->in_use.load());
}

TEST(EpochTest, ConcurrentlyLiveThreadsHaveDistinctRecords) {
  constexpr int kThreads = 8;
  std::vector<ThreadRecord*> records(kThreads);
  std::latch all_registered(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      records[t] = CurrentThreadRecord();
      // Stay alive until every thread has its record.
      all_registered.arrive_and_wait();
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<ThreadRecord*> distinct_records(records.begin(), records.end());
  std::set<uint32_t> distinct_indices;
  for (ThreadRecord* record : records) distinct_indices.insert(record->index);
  EXPECT_EQ(distinct_records.size(), static_cast<size_t>(kThreads));
  EXPECT_EQ(distinct_indices.size(), static_cast<size_t>(kThreads));
}

TEST(EpochTest, ThreadRecordsAreReusedAfterThreadsExit) {
  constexpr int kThreads = 100;
  CurrentThreadRecord();  // This thread's record is taken before the loop.
  std::vector<uint32_t> indices;
  for (int t = 0; t < kThreads; ++t) {
    uint32_t index = 0;
    std::thread([&] { index = CurrentThreadRecord()->index; }).join();
    indices.push_back(index);
  }
  // Never more than a couple of threads are alive at once in this test (and
  // only a handful in this binary), so indices stay small if records are
  // reused; without reuse they would reach 100.
  EXPECT_LT(*std::max_element(indices.begin(), indices.end()), 16u);
}

// A thread-local object whose destructor takes a guard, as one that flushes
// into a cache when its thread exits would.
struct GuardsAtThreadExit {
  ~GuardsAtThreadExit() {
    EpochGuard guard;
    if (record_owned != nullptr) {
      record_owned->store(CurrentThreadRecord()->in_use.load());
    }
  }
  std::atomic<bool>* record_owned = nullptr;
};

// A guard on a record the thread no longer owns would share it with the next
// thread to register, which races on `depth` and can clear the other's
// announcement while it reads.
TEST(EpochTest, AGuardInAThreadLocalDestructorUsesARecordTheThreadStillOwns) {
  std::atomic<bool> record_owned{false};
  std::thread([&] {
    // Constructed before the thread acquires its record, so destroyed after
    // the thread-local owner that releases the record at thread exit.
    thread_local GuardsAtThreadExit at_exit;
    at_exit.record_owned = &record_owned;
    EpochGuard guard;
  }).join();
  EXPECT_TRUE(record_owned.load());
}

// Writes that stop (a few large values replaced, then quiet): fewer
// retirements wait than an advance by count needs, and no thread retires
// again. The idle reclaimer frees them. Real time: allowed 10 s, takes
// about 30 ms.
TEST(EpochTest, RetirementsThatStopAreFreedWithoutAnyMore) {
  TryReclaim();
  constexpr int kObjects = 16;  // One hand-over of a thread's buffer.
  std::vector<std::atomic<bool>> freed(kObjects);
  for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::all_of(freed.begin(), freed.end(),
                      [](const std::atomic<bool>& f) { return f.load(); }) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < kObjects; ++i) EXPECT_TRUE(freed[i].load()) << i;
  EXPECT_EQ(PendingRetirements(), 0u);
}

// ... and never while a guard that may still see them is open.
TEST(EpochTest, TheIdleReclaimerWaitsForAReaderLikeAnyAdvance) {
  TryReclaim();
  GuardOnAnotherThread reader;
  constexpr int kObjects = 16;
  std::vector<std::atomic<bool>> freed(kObjects);
  for (int i = 0; i < kObjects; ++i) RetireObject(new Tracked(&freed[i]));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < kObjects; ++i) EXPECT_FALSE(freed[i].load()) << i;
  reader.Release();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!freed[kObjects - 1].load() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < kObjects; ++i) EXPECT_TRUE(freed[i].load()) << i;
}

// A thread-local object constructed before its thread's first guard, so
// destroyed after whatever the first guard set up, whose destructor uses a
// cache (a per-thread handle that flushes at exit).
struct FirstGuardAtThreadExit {
  ~FirstGuardAtThreadExit() {
    if (used) EpochGuard guard;
  }
  bool used = false;
};

TEST(EpochTest, ARecordTakenByALateThreadLocalDestructorIsReleasedToo) {
  CurrentThreadRecord();
  std::vector<uint32_t> indices;
  for (int t = 0; t < 100; ++t) {
    std::thread([] {
      thread_local FirstGuardAtThreadExit at_exit;
      at_exit.used = true;
      EpochGuard guard;
    }).join();
    uint32_t index = 0;
    std::thread([&] { index = CurrentThreadRecord()->index; }).join();
    indices.push_back(index);
  }
  // With records leaked, one per thread above, indices would pass 100.
  EXPECT_LT(*std::max_element(indices.begin(), indices.end()), 16u);
}

// A pre-fork server: a thread of the parent is reading (inside a guard) at
// the moment another forks. In the child that thread does not exist; if its
// record still announced the old epoch, no advance would pass and nothing
// the child retired would ever be freed.
TEST(EpochTest, AChildForkedWhileAnotherThreadReadsStillReclaims) {
  if (PADDOCK_TEST_TSAN) GTEST_SKIP() << "fork() of a threaded process";
  GuardOnAnotherThread reader;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<bool> freed{false};
    RetireObject(new Tracked(&freed));
    for (int i = 0; i < 10'000; ++i) RetireObject(new int(i));
    ReclaimRepeatedly();
    _exit(freed.load() && PendingRetirements() == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's retirements were not freed";
  // The parent's reader is still inside its guard: nothing changed here.
  std::atomic<bool> freed{false};
  RetireObject(new Tracked(&freed));
  ReclaimRepeatedly();
  EXPECT_FALSE(freed.load());
  reader.Release();
  ReclaimRepeatedly();
  EXPECT_TRUE(freed.load());
}

// A shared object readers look at; its deleter only marks it, so a reader
// that sees a "freed" object reads valid memory and the test can say so.
struct Published {
  std::atomic<bool> freed{false};
};

void MarkFreed(void* p) {
  static_cast<Published*>(p)->freed.store(true, std::memory_order_release);
}

TEST(EpochTest, ReadersInsideAGuardNeverSeeAnObjectFreed) {
  constexpr int kReaders = 2;
  constexpr int kSwaps = 20'000;
  std::vector<std::unique_ptr<Published>> objects;  // Owned by this thread.
  objects.push_back(std::make_unique<Published>());
  std::atomic<Published*> current{objects.back().get()};
  std::atomic<bool> done{false};
  std::atomic<int> freed_seen{0};
  std::latch readers_started(kReaders);

  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      readers_started.count_down();
      while (!done.load(std::memory_order_acquire)) {
        EpochGuard guard;
        Published* seen = current.load(std::memory_order_acquire);
        // Look more than once: a premature free may come a moment later.
        for (int i = 0; i < 8; ++i) {
          if (seen->freed.load(std::memory_order_acquire)) {
            freed_seen.fetch_add(1, std::memory_order_relaxed);
            break;
          }
        }
      }
    });
  }
  readers_started.wait();
  for (int i = 0; i < kSwaps; ++i) {
    objects.push_back(std::make_unique<Published>());
    Published* old = current.exchange(objects.back().get());
    Retire(old, MarkFreed);
    if (i % 16 == 0) TryReclaim();
  }
  done.store(true, std::memory_order_release);
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(freed_seen.load(), 0);
  // With the readers gone, everything retired is freed: only the last
  // published object is left.
  TryReclaim();
  EXPECT_EQ(PendingRetirements(), 0u);
  const auto freed_count =
      std::count_if(objects.begin(), objects.end(),
                    [](const auto& object) { return object->freed.load(); });
  EXPECT_EQ(freed_count, kSwaps);
  EXPECT_FALSE(objects.back()->freed.load());
}

}  // namespace
}  // namespace paddock::internal

namespace paddock::internal {
namespace {

TEST(EpochDeathTest, AFailingMembarrierSwitchesGuardsToTheFencedPathSafely) {
  // As if a seccomp filter installed after start-up denied membarrier: the
  // reclaimer must stop relying on it, readers must switch to the seq_cst
  // path, and reclamation must go on. In a process of its own: the switch
  // is for good.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CurrentThreadRecord();  // Decides the announcement path.
        if (!asymmetric_fence.load()) std::_Exit(0);  // Never used it.
        std::atomic<bool> stop{false};
        std::atomic<uint64_t> reads{0};
        auto* shared = new std::atomic<int*>(new int(0));
        std::thread reader([&] {
          while (!stop.load()) {
            EpochGuard guard;
            const int* p = shared->load(std::memory_order_acquire);
            reads.fetch_add(static_cast<uint64_t>(*p >= 0));
          }
        });
        while (reads.load() == 0) std::this_thread::yield();
        SimulateMembarrierFailureForTest();
        for (int i = 1; i <= 20000; ++i) {
          int* old = shared->exchange(new int(i), std::memory_order_acq_rel);
          RetireObject(old);
        }
        const uint64_t reads_during = reads.load();
        stop = true;
        reader.join();
        TryReclaim();
        if (asymmetric_fence.load()) std::_Exit(1);     // Not switched.
        if (PendingRetirements() > 100) std::_Exit(2);  // Not reclaiming.
        std::_Exit(reads_during > 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace paddock::internal
