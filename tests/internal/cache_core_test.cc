// Tests for internal::CacheCore without a Cache: what its constructor
// resolves and refuses, the clocks and lifetimes every stage reads, the load
// slots and the default executor, and what its destructor ends.

#include "paddock/internal/cache_core.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

template <typename P = SingleFlight, typename K = std::string>
using CoreFor = CacheCore<K, std::string, P, absl::Hash<K>, std::equal_to<K>>;

template <typename Core>
typename Core::Loader Echo() {
  return [](const auto& key) -> absl::StatusOr<std::string> {
    return std::string(key);
  };
}

TEST(CacheCoreTest, ResolvesShardsAndTheClock) {
  Options options;
  options.max_entries = 3;
  options.shards = 8;
  CoreFor<> core(Echo<CoreFor<>>(), {}, options, {}, {}, {});
  // Never more shards than entries, and the system clock by default.
  EXPECT_EQ(core.shard_count, 3u);
  EXPECT_EQ(core.options.shards, 3);
  EXPECT_EQ(core.clock, SystemClock::Get());
  EXPECT_TRUE(core.system_clock);

  CoreFor<> defaulted(Echo<CoreFor<>>(), {}, Options{}, {}, {}, {});
  const size_t n = defaulted.shard_count;
  EXPECT_GE(n, 4u);
  EXPECT_LE(n, 256u);
  EXPECT_EQ(n & (n - 1), 0u) << n << " is not a power of two";
}

TEST(CacheCoreTest, RefusesAnEmptyLoaderAndInvalidOptions) {
  EXPECT_THROW(CoreFor<>({}, {}, Options{}, {}, {}, {}), std::invalid_argument);
  Options negative;
  negative.ttl = absl::Seconds(-1);
  EXPECT_THROW(CoreFor<>(Echo<CoreFor<>>(), {}, negative, {}, {}, {}),
               std::invalid_argument);
  // A policy's own Validate() is asked too.
  EXPECT_THROW(CoreFor<XFetch>(Echo<CoreFor<XFetch>>(), {}, Options{},
                               {.beta = -1}, {}, {}),
               std::invalid_argument);
}

struct NoCodec {
  int n = 0;
  bool operator==(const NoCodec&) const = default;
};

TEST(CacheCoreTest, RefusesASharedTierForValuesWithoutACodec) {
  using Core = CacheCore<std::string, NoCodec, SingleFlight,
                         absl::Hash<std::string>, std::equal_to<std::string>>;
  static_assert(!Core::kShareable);
  ManualClock clock;
  Options options;
  options.clock = &clock;
  options.shared = std::make_shared<testing::FakeSharedTier>(&clock);
  EXPECT_THROW(Core([](const std::string&)
                        -> absl::StatusOr<NoCodec> { return NoCodec{}; },
                    {}, options, {}, {}, {}),
               std::invalid_argument);
}

TEST(CacheCoreTest, ReadsTheCachesClock) {
  ManualClock clock(absl::FromUnixSeconds(1000));
  Options options;
  options.clock = &clock;
  CoreFor<> core(Echo<CoreFor<>>(), {}, options, {}, {}, {});
  EXPECT_FALSE(core.system_clock);
  const int64_t t = absl::ToUnixNanos(absl::FromUnixSeconds(1000));
  EXPECT_EQ(core.NowNanos(), t);
  EXPECT_EQ(core.HitNowNanos(), t);
  EXPECT_EQ(core.StoreNowNanos(), t);

  // A load on another clock is timed by two precise reads.
  const auto start = core.StartLoadClock();
  EXPECT_EQ(start.nanos, t);
  EXPECT_EQ(start.tick_q32, 0u);
  clock.Advance(absl::Milliseconds(250));
  const LoadTimes times = core.EndLoadClock(start);
  EXPECT_EQ(times.started, t);
  EXPECT_EQ(times.finished,
            t + absl::ToInt64Nanoseconds(absl::Milliseconds(250)));
}

TEST(CacheCoreTest, AFixedLifetimeIsAskedOnceAndGivesExactTimes) {
  Options options;
  options.ttl = absl::Seconds(10);
  CoreFor<> core(Echo<CoreFor<>>(), {}, options, {}, {}, {});
  static_assert(CoreFor<>::kFixedLifetime);
  EXPECT_EQ(core.fixed_lifetime.expires_after, absl::Seconds(10));
  EXPECT_EQ(core.LifetimeFor(absl::Seconds(3)).expires_after,
            absl::Seconds(10));
  EXPECT_TRUE(core.fixed_times_exact);
  EXPECT_EQ(core.fixed_times.expires,
            absl::ToInt64Nanoseconds(absl::Seconds(10)));

  // A policy whose lifetime depends on the load asks on every store.
  CoreFor<XFetch> xfetch(Echo<CoreFor<XFetch>>(), {}, options, {}, {}, {});
  static_assert(!CoreFor<XFetch>::kFixedLifetime);
  EXPECT_EQ(xfetch.LifetimeFor(absl::Seconds(3)).expires_after,
            absl::Seconds(10));
}

TEST(CacheCoreTest, KeysOfAnotherTypeHashAlikeAndFindTheirShard) {
  CoreFor<> core(Echo<CoreFor<>>(), {}, Options{}, {}, {}, {});
  const std::string key = "member:page:0";
  EXPECT_EQ(core.HashOf(key), core.HashOf(std::string_view(key)));
  EXPECT_EQ(&core.ShardFor(core.HashOf(key)),
            &core.ShardFor(core.HashOf(std::string_view(key))));
  for (size_t h : {size_t{0}, ~size_t{0}, core.HashOf(key)}) {
    const auto* shard = &core.ShardFor(h);
    EXPECT_GE(shard, &core.shards[0]);
    EXPECT_LT(shard, &core.shards[0] + core.shard_count);
  }
}

TEST(CacheCoreTest, NoFreeSlotWithinWaitTimeoutIsAnError) {
  ManualClock clock;
  Options options;
  options.clock = &clock;
  options.max_concurrent_loads = 1;
  options.wait_timeout = absl::ZeroDuration();
  CoreFor<> core(Echo<CoreFor<>>(), {}, options, {}, {}, {});
  const LoadSlots::Ticket first = core.AcquireSlot();
  EXPECT_NE(first, 0u);
  EXPECT_EQ(core.AcquireSlot(), 0u);
  EXPECT_TRUE(absl::IsDeadlineExceeded(core.NoSlotError()));
  EXPECT_NE(core.NoSlotError().message().find("wait_timeout"),
            std::string_view::npos);
  core.slots.Release(first);
  const LoadSlots::Ticket again = core.AcquireSlot();
  EXPECT_NE(again, 0u);
  core.slots.Release(again);
}

TEST(CacheCoreTest, UsesTheGivenExecutorOrMakesOnePool) {
  ManualExecutor manual;
  Options options;
  options.executor = &manual;
  CoreFor<> given(Echo<CoreFor<>>(), {}, options, {}, {}, {});
  EXPECT_EQ(given.executor(), &manual);
  EXPECT_EQ(given.pool, nullptr);

  CoreFor<> pooled(Echo<CoreFor<>>(), {}, Options{}, {}, {}, {});
  EXPECT_EQ(pooled.pool, nullptr);  // Made on first use only.
  Executor* const pool = pooled.executor();
  EXPECT_NE(pool, nullptr);
  EXPECT_EQ(pooled.executor(), pool);
}

TEST(CacheCoreTest, DestructionClosesTheLifelineAndRunsQueuedTasks) {
  std::shared_ptr<Lifeline> lifeline;
  std::atomic<bool> ran{false};
  {
    CoreFor<> core(Echo<CoreFor<>>(), {}, Options{}, {}, {}, {});
    lifeline = core.lifeline;
    core.executor()->Schedule([&ran] { ran = true; });
    EXPECT_FALSE(lifeline->closing());
  }
  EXPECT_TRUE(lifeline->closing());
  EXPECT_FALSE(lifeline->Enter());
  EXPECT_TRUE(ran);  // The pool ran what was queued before it was joined.
}

}  // namespace
}  // namespace paddock::internal
