// paddock::AsyncGet (paddock/asio.h): a lookup as an asio operation, with
// every completion token; where it completes (the handler's executor, never
// a thread of the cache, never inline); cancellation of one waiter, which
// leaves the load to the others; and the cache's destruction.

#include "paddock/asio.h"

#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/execution/executor.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/io_context_strand.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/testing/sync.h"

namespace paddock {
namespace {

using ::paddock::testing::Gate;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using StringCache = Cache<std::string, std::string, SingleFlight>;
using Result = absl::StatusOr<std::string>;

// What one waiter got, and how many times it was completed.
struct Outcome {
  std::optional<Result> result;
  int completions = 0;
};

asio::awaitable<void> GetInto(StringCache& cache, std::string key,
                              Outcome* out) {
  Result result = co_await AsyncGet(cache, key, asio::use_awaitable);
  out->result = std::move(result);
  ++out->completions;
}

// Looks `*text` up by a view of it, and changes it before the co_await.
asio::awaitable<void> GetByViewThenOverwrite(StringCache& cache,
                                             std::string* text, Outcome* out) {
  auto lookup = AsyncGet(cache, std::string_view(*text), asio::use_awaitable);
  *text = "x";
  out->result = co_await std::move(lookup);
  ++out->completions;
}

class AsioTest : public ::testing::Test {
 protected:
  // Loads count themselves and return "<key>#<n>"; they wait for `release_`
  // when `gated_` is set.
  StringCache::Loader Loader() {
    return [this](const std::string& k) -> Result {
      loader_thread_.store(std::this_thread::get_id());
      if (gated_) release_.Wait();
      return absl::StrCat(k, "#", ++loads_);
    };
  }

  ManualExecutor executor_;  // Outlives every cache of a test.
  // A minute's wait: 10,000 waiters under a sanitizer take a while to start.
  Options options_{.ttl = absl::Seconds(60),
                   .wait_timeout = absl::Minutes(1),
                   .executor = &executor_};
  std::atomic<int> loads_{0};
  std::atomic<std::thread::id> loader_thread_{};
  bool gated_ = false;
  Gate release_;
};

TEST_F(AsioTest, CancellingOneOfThreeWaitersLeavesTheLoadToTheOtherTwo) {
  // Each waiter in turn is the one cancelled; waiter 0 started the load.
  for (int cancelled = 0; cancelled < 3; ++cancelled) {
    SCOPED_TRACE(absl::StrCat("cancelled waiter ", cancelled));
    loads_ = 0;
    StringCache cache(Loader(), options_);
    asio::io_context io;
    Outcome outcomes[3];
    asio::cancellation_signal signals[3];
    for (int i = 0; i < 3; ++i) {
      asio::co_spawn(
          io, GetInto(cache, "k", &outcomes[i]),
          asio::bind_cancellation_slot(signals[i].slot(), asio::detached));
    }
    io.poll();  // All three wait; the load is queued.
    ASSERT_EQ(executor_.pending(), 1u);

    // Emitted on the io_context's thread (this one), as asio requires.
    signals[cancelled].emit(asio::cancellation_type::terminal);
    io.poll();
    // Completed at once, before the load ran.
    ASSERT_EQ(outcomes[cancelled].completions, 1);
    EXPECT_EQ(outcomes[cancelled].result->status().code(),
              absl::StatusCode::kCancelled);
    EXPECT_EQ(loads_, 0);

    EXPECT_EQ(executor_.RunAll(), 1u);  // The load still runs, once.
    io.poll();
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(outcomes[i].completions, 1) << "waiter " << i;
      if (i != cancelled) {
        EXPECT_EQ(**outcomes[i].result, "k#1");
      }
    }
    EXPECT_EQ(loads_, 1);
    EXPECT_EQ(cache.GetIfPresent("k"), "k#1");  // And stored its result.
  }
}

TEST_F(AsioTest, TenThousandCoroutinesOnOneThreadShareOneLoad) {
  constexpr int kWaiters = 10000;
  options_.executor = nullptr;  // The cache's own pool: real threads.
  gated_ = true;
  StringCache cache(Loader(), options_);
  asio::io_context io(1);
  std::vector<Outcome> outcomes(kWaiters);
  int started = 0;
  auto wait = [&](Outcome* out) -> asio::awaitable<void> {
    // Once the last coroutine has asked (its lookup starts before this
    // handler returns, the posted one runs after), the load may finish:
    // every coroutine waits for it, none finds the value stored.
    if (++started == kWaiters) asio::post(io, [this] { release_.Open(); });
    co_await GetInto(cache, "cold", out);
  };
  for (Outcome& outcome : outcomes) {
    asio::co_spawn(io, wait(&outcome), asio::detached);
  }
  const std::thread::id io_thread = std::this_thread::get_id();
  io.run();  // Returns once every waiter has its value.

  EXPECT_EQ(loads_, 1);
  EXPECT_NE(loader_thread_.load(), io_thread);
  for (const Outcome& outcome : outcomes) {
    ASSERT_EQ(outcome.completions, 1);
    EXPECT_EQ(**outcome.result, "cold#1");
  }
  const Stats stats = cache.stats();
  EXPECT_EQ(stats.misses, static_cast<uint64_t>(kWaiters));
  EXPECT_EQ(stats.coalesced_waits, static_cast<uint64_t>(kWaiters - 1));
}

TEST_F(AsioTest, UseFutureGetsTheValue) {
  options_.executor = nullptr;
  StringCache cache(Loader(), options_);
  std::future<Result> cold = AsyncGet(cache, "k", asio::use_future);
  EXPECT_EQ(*cold.get(), "k#1");
  std::future<Result> hot = AsyncGet(cache, "k", asio::use_future);
  EXPECT_EQ(*hot.get(), "k#1");
  EXPECT_EQ(loads_, 1);
}

// The awaitable starts the lookup only at the co_await, after the
// characters the view showed have changed: the key was made at the call.
TEST_F(AsioTest, AViewKeyIsCopiedAtTheCallNotWhenTheLookupStarts) {
  StringCache cache(Loader(), options_);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  asio::io_context io;
  Outcome outcome;
  std::string text = "k";
  asio::co_spawn(io, GetByViewThenOverwrite(cache, &text, &outcome),
                 asio::detached);
  io.run();
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(**outcome.result, "k#1");
  EXPECT_EQ(loads_, 1);
}

TEST_F(AsioTest, APlainCallbackGetsTheValueOnTheSystemExecutor) {
  options_.executor = nullptr;
  StringCache cache(Loader(), options_);
  std::promise<Result> got;
  AsyncGet(cache, "k", [&got](Result v) { got.set_value(std::move(v)); });
  EXPECT_EQ(*got.get_future().get(), "k#1");
}

TEST_F(AsioTest, AHitIsPostedNotCalledInline) {
  StringCache cache(Loader(), options_);
  ASSERT_EQ(*cache.Get("k"), "k#1");
  asio::io_context io;
  Outcome outcome;
  AsyncGet(cache, "k", asio::bind_executor(io, [&outcome](Result v) {
             outcome.result = std::move(v);
             ++outcome.completions;
           }));
  EXPECT_EQ(outcome.completions, 0);  // Not inside AsyncGet.
  EXPECT_EQ(io.poll(), 1u);
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(**outcome.result, "k#1");
}

TEST_F(AsioTest, CompletesOnTheHandlersStrandNotOnTheLoadersThread) {
  options_.executor = nullptr;
  gated_ = true;
  // The cache first, so the context goes first, just after run() returned
  // while the cache's thread may still hold the waiters (see the next test).
  StringCache cache(Loader(), options_);
  asio::io_context io(2);
  auto strand = asio::make_strand(io);
  std::atomic<int> on_strand{0};
  std::atomic<int> on_loader_thread{0};
  std::atomic<int> done{0};
  auto check = [&] {
    if (strand.running_in_this_thread()) ++on_strand;
    if (std::this_thread::get_id() == loader_thread_.load()) {
      ++on_loader_thread;
    }
    ++done;
  };
  constexpr int kCoroutines = 50;
  for (int i = 0; i < kCoroutines; ++i) {
    asio::co_spawn(
        strand,
        [&]() -> asio::awaitable<void> {
          Result v = co_await AsyncGet(cache, "k", asio::use_awaitable);
          EXPECT_EQ(*v, "k#1");
          check();
        },
        asio::detached);
  }
  constexpr int kCallbacks = 50;
  for (int i = 0; i < kCallbacks; ++i) {
    AsyncGet(cache, "k", asio::bind_executor(strand, [&](Result v) {
               EXPECT_EQ(*v, "k#1");
               check();
             }));
  }
  std::thread second([&io] { io.run(); });
  release_.Open();
  io.run();  // Returns when every waiter is done (they hold work).
  second.join();
  EXPECT_EQ(done, kCoroutines + kCallbacks);
  EXPECT_EQ(on_strand, kCoroutines + kCallbacks);
  EXPECT_EQ(on_loader_thread, 0);
  EXPECT_EQ(loads_, 1);
}

TEST_F(AsioTest, AStrandsContextMayGoOnceRunReturnedWhileTheCacheLivesOn) {
  // The cache outlives the context. The load's thread delivers both waiters
  // of the key and only then lets go of them, and the second holds it until
  // the context is destroyed: whatever the first, a strand's waiter, kept of
  // its executor past its completion is released after the context is gone
  // (a strand's last copy locks the context's strand service, destroyed by
  // then: UBSan and ASan report it).
  options_.executor = nullptr;
  gated_ = true;
  // Before the cache: the load's thread may still be inside Wait() when the
  // test's body ends, until the cache's destructor has waited for it.
  Gate context_gone;
  StringCache cache(Loader(), options_);
  auto io = std::make_unique<asio::io_context>();
  std::atomic<bool> first_called{false};
  {
    auto strand = asio::make_strand(*io);
    AsyncGet(cache, "k", asio::bind_executor(strand, [&first_called](Result v) {
               EXPECT_EQ(*v, "k#1");
               first_called = true;
             }));
  }
  cache.GetAsync("k", [&context_gone](Result v) {
    EXPECT_EQ(*v, "k#1");
    EXPECT_TRUE(context_gone.Wait());
  });
  release_.Open();
  io->run();  // Returns once the strand's waiter has run.
  EXPECT_TRUE(first_called);
  io.reset();
  context_gone.Open();
  EXPECT_EQ(loads_, 1);
}  // The cache's destructor waits for its load's thread.

TEST_F(AsioTest, ANetworkingTsStrandHoldsWorkAndRunsTheHandler) {
  // io_context::strand is a Networking TS executor (on_work_started), not a
  // standard one: the operation holds its work through executor_work_guard.
  static_assert(!asio::execution::is_executor<asio::io_context::strand>::value);
  options_.executor = nullptr;
  gated_ = true;
  StringCache cache(Loader(), options_);
  asio::io_context io;
  asio::io_context::strand strand(io);
  std::atomic<bool> on_strand{false};
  AsyncGet(cache, "k", asio::bind_executor(strand, [&](Result v) {
             EXPECT_EQ(*v, "k#1");
             on_strand = strand.running_in_this_thread();
           }));
  std::thread opener([this] { release_.Open(); });
  io.run();  // Returns only once the handler ran: it held work until then.
  opener.join();
  EXPECT_TRUE(on_strand);
}

// An allocator that refuses every allocation (a handler's arena that is
// full): asio may use it for the post that completes the operation.
template <typename T>
struct RefusingAllocator {
  using value_type = T;
  RefusingAllocator() = default;
  template <typename U>
  RefusingAllocator(const RefusingAllocator<U>&) {}  // NOLINT: rebinding.
  T* allocate(size_t) { throw std::bad_alloc(); }
  void deallocate(T*, size_t) {}
  template <typename U>
  bool operator==(const RefusingAllocator<U>&) const {
    return true;
  }
};

TEST_F(AsioTest, AHandlerWhoseAllocatorThrowsIsStillCompletedOnce) {
  // The post falls back to the default allocator: the handler is neither
  // lost nor left holding the context's work (nor its cancellation slot).
  asio::io_context io;
  asio::cancellation_signal signal;
  StringCache cache(Loader(), options_);
  Outcome outcome;
  AsyncGet(cache, "k",
           asio::bind_cancellation_slot(
               signal.slot(),
               asio::bind_allocator(RefusingAllocator<void>(),
                                    asio::bind_executor(io, [&](Result v) {
                                      outcome.result = std::move(v);
                                      ++outcome.completions;
                                    }))));
  EXPECT_EQ(executor_.RunAll(), 1u);  // The load completes the operation.
  io.run();                           // Returns: no work is left held.
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(**outcome.result, "k#1");
  signal.emit(asio::cancellation_type::all);  // Nothing connected: no-op.
  EXPECT_EQ(outcome.completions, 1);
}

TEST_F(AsioTest, APendingWaiterKeepsTheIoContextRunning) {
  options_.executor = nullptr;
  gated_ = true;
  StringCache cache(Loader(), options_);
  asio::io_context io;
  std::atomic<bool> called{false};
  std::atomic<bool> run_returned_first{false};
  AsyncGet(cache, "k", asio::bind_executor(io, [&called](Result v) {
             EXPECT_EQ(*v, "k#1");
             called = true;
           }));
  std::promise<void> running;
  asio::post(io, [&running] { running.set_value(); });
  std::thread runner([&] {
    io.run();  // Without the waiter's work it would return at once.
    if (!called) run_returned_first = true;
  });
  running.get_future().wait();
  // Gives a broken adapter the time to let run() return; a correct one
  // passes whatever the timing.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release_.Open();
  runner.join();
  EXPECT_FALSE(run_returned_first);
  EXPECT_TRUE(called);
}

TEST_F(AsioTest, AWaitTimeoutCompletesOnTheHandlersExecutor) {
  options_.executor = nullptr;
  options_.wait_timeout = absl::Milliseconds(20);
  gated_ = true;
  StringCache cache(Loader(), options_);
  asio::io_context io;
  Outcome outcome;
  std::thread::id completed_on;
  AsyncGet(cache, "k", asio::bind_executor(io, [&](Result v) {
             outcome.result = std::move(v);
             ++outcome.completions;
             completed_on = std::this_thread::get_id();
           }));
  io.run();  // Until the timer thread's answer has been posted and run.
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(outcome.result->status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(completed_on, std::this_thread::get_id());
  release_.Open();
}

TEST_F(AsioTest, ATimerRacingTheLookupCancelsOnlyThatWaiter) {
  using asio::experimental::awaitable_operators::operator||;
  options_.executor = nullptr;
  gated_ = true;
  StringCache cache(Loader(), options_);
  asio::io_context io;
  std::optional<std::variant<Result, std::monostate>> raced;
  Outcome patient;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer deadline(io, std::chrono::milliseconds(1));
        raced = co_await (AsyncGet(cache, "k", asio::use_awaitable) ||
                          deadline.async_wait(asio::use_awaitable));
        release_.Open();  // Only now may the load finish.
      },
      asio::detached);
  asio::co_spawn(io, GetInto(cache, "k", &patient), asio::detached);
  io.run();
  ASSERT_TRUE(raced.has_value());
  EXPECT_EQ(raced->index(), 1u);  // The deadline won.
  ASSERT_EQ(patient.completions, 1);
  EXPECT_EQ(**patient.result, "k#1");
  EXPECT_EQ(loads_, 1);
}

TEST_F(AsioTest, CancellationRacingTheLoadCompletesEachWaiterExactlyOnce) {
  // Real threads: the load completes on the cache's pool while the
  // cancellation is emitted on the io_context's thread.
  options_.executor = nullptr;
  StringCache cache(Loader(), options_);
  asio::io_context io;
  constexpr int kRounds = 300;
  std::vector<Outcome> outcomes(kRounds);
  std::vector<asio::cancellation_signal> signals(kRounds);
  for (int round = 0; round < kRounds; ++round) {
    asio::co_spawn(
        io, GetInto(cache, absl::StrCat("k", round), &outcomes[round]),
        asio::bind_cancellation_slot(signals[round].slot(), asio::detached));
    asio::post(io, [&signals, round] {
      signals[round].emit(asio::cancellation_type::terminal);
    });
  }
  io.run();
  for (int round = 0; round < kRounds; ++round) {
    const Outcome& outcome = outcomes[round];
    ASSERT_EQ(outcome.completions, 1) << "round " << round;
    if (outcome.result->ok()) {
      EXPECT_THAT(**outcome.result, StartsWith(absl::StrCat("k", round, "#")));
    } else {
      EXPECT_EQ(outcome.result->status().code(), absl::StatusCode::kCancelled);
    }
  }
}

TEST_F(AsioTest, DestroyingTheCacheCancelsEachPendingWaiterOnce) {
  asio::io_context io;
  constexpr int kWaiters = 5;
  std::vector<Outcome> outcomes(kWaiters + 1);
  {
    StringCache cache(Loader(), options_);
    for (int i = 0; i < kWaiters; ++i) {
      asio::co_spawn(io, GetInto(cache, "k", &outcomes[i]), asio::detached);
    }
    AsyncGet(cache, "other", asio::bind_executor(io, [&outcomes](Result v) {
               outcomes[kWaiters].result = std::move(v);
               ++outcomes[kWaiters].completions;
             }));
    io.poll();  // All wait; the loads stay queued.
    for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.completions, 0);
  }
  io.run();  // The cancellations, posted by the destructor.
  for (const Outcome& outcome : outcomes) {
    ASSERT_EQ(outcome.completions, 1);
    EXPECT_EQ(outcome.result->status().code(), absl::StatusCode::kCancelled);
  }
  executor_.RunAll();  // The queued loads find the cache gone.
  io.restart();
  EXPECT_EQ(io.poll(), 0u);
  EXPECT_EQ(loads_, 0);
}

TEST_F(AsioTest, ALoaderErrorIsAValueNotAnException) {
  StringCache cache(
      [](const std::string&) -> Result {
        return absl::UnavailableError("backend down");
      },
      options_);
  asio::io_context io;
  Outcome outcome;
  asio::co_spawn(io, GetInto(cache, "k", &outcome), asio::detached);
  io.poll();
  executor_.RunAll();
  io.run();
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(outcome.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.result->status().message(), "backend down");
}

// Hashes like absl::Hash, but throws for one key.
struct ThrowingHash {
  size_t operator()(const std::string& key) const {
    if (key == "poison") throw std::runtime_error("cannot hash");
    return std::hash<std::string>()(key);
  }
};

TEST_F(AsioTest, AThrowingLookupCompletesWithInternal) {
  Cache<std::string, std::string, SingleFlight, ThrowingHash> cache(
      [](const std::string& k) -> Result { return k; }, options_);
  asio::io_context io;
  Outcome outcome;
  AsyncGet(cache, "poison", asio::bind_executor(io, [&outcome](Result v) {
             outcome.result = std::move(v);
             ++outcome.completions;
           }));
  io.run();
  ASSERT_EQ(outcome.completions, 1);
  EXPECT_EQ(outcome.result->status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(outcome.result->status().message(), HasSubstr("cannot hash"));
}

}  // namespace
}  // namespace paddock
