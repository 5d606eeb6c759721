// Tests of paddock/internal/writes.h on a bare CacheCore: the times of an
// entry this process loaded (the policy's lifetime, or the one given) and of
// one taken from the shared tier (counted from when the tier stored it), and
// the local invalidations.

#include "paddock/internal/writes.h"

#include <functional>
#include <memory>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/flight.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {
namespace {

template <typename P>
using CoreOf = CacheCore<std::string, std::string, P, absl::Hash<std::string>,
                         std::equal_to<>>;
template <typename P>
using WritesOf = typename Engine<CoreOf<P>>::Writes;

constexpr int64_t kSecond = 1'000'000'000;

template <typename P>
std::unique_ptr<CoreOf<P>> MakeCore(ManualClock* clock, P policy = {}) {
  Options options;
  options.clock = clock;
  options.ttl = absl::Seconds(10);
  return std::make_unique<CoreOf<P>>(
      [](const std::string& key) -> absl::StatusOr<std::string> { return key; },
      typename CoreOf<P>::AsyncLoader(), options, policy,
      absl::Hash<std::string>(), std::equal_to<>());
}

template <typename Core>
void Store(Core& core, std::unique_ptr<typename Core::Entry> entry) {
  const size_t hash = core.HashOf(entry->key);  // Entries keep its low half.
  auto& shard = core.ShardFor(hash);
  typename Core::Writer w(shard);
  shard.Store(w, nullptr, std::move(entry), core.NowNanos());
}

template <typename Core>
bool Has(Core& core, const std::string& key) {
  EpochGuard guard;
  const size_t hash = core.HashOf(key);
  return core.ShardFor(hash).Find(hash, key, core.lookup_eq()) != nullptr;
}

TEST(WritesTest, ANewEntryLivesByThePolicysLifetimeFromNow) {
  ManualClock clock(absl::FromUnixSeconds(100));
  auto core = MakeCore<SoftTtl>(&clock, SoftTtl{.stale_for = absl::Seconds(5)});
  const int64_t now = core->NowNanos();
  auto n = WritesOf<SoftTtl>(*core).NewEntry("k", 7, "v", /*load_duration=*/3,
                                             now, {});
  EXPECT_EQ(n->value(), "v");
  const EntryTimes t = n->times(core->fixed_times);
  EXPECT_EQ(t.loaded_at, now);
  EXPECT_EQ(t.expires_at, now + 10 * kSecond);
  EXPECT_EQ(t.keep_until, now + 15 * kSecond);
  EXPECT_EQ(t.load_duration, 3);
}

TEST(WritesTest, ANewEntryTakesTheLifetimeItIsGiven) {
  ManualClock clock(absl::FromUnixSeconds(100));
  auto core = MakeCore<XFetch>(&clock);
  const int64_t now = core->NowNanos();
  const Lifetime given{.expires_after = absl::Seconds(2),
                       .quiet_for = absl::Seconds(1),
                       .keep_for = absl::Seconds(3),
                       .serve_on_error_for = absl::Seconds(4)};
  auto n = WritesOf<XFetch>(*core).NewEntry("k", 7, "v", 0, now, given);
  const EntryTimes t = n->times(core->fixed_times);
  EXPECT_EQ(t.quiet_until, now + 1 * kSecond);
  EXPECT_EQ(t.expires_at, now + 2 * kSecond);
  EXPECT_EQ(t.keep_until, now + 3 * kSecond);
  EXPECT_EQ(t.stale_if_error_until, now + 4 * kSecond);
}

TEST(WritesTest, AnEntryFromTheTierCountsFromWhenTheTierStoredIt) {
  ManualClock clock(absl::FromUnixSeconds(100));
  auto core = MakeCore<XFetch>(&clock);
  const int64_t now = core->NowNanos();
  SharedRecord record{.value = std::string("v"), .version = "v-7"};
  record.age = absl::Seconds(4);
  record.fresh_for = absl::Seconds(6);
  record.keep_for = absl::Seconds(20);
  record.serve_on_error_for = absl::Seconds(8);
  record.load_duration = absl::Milliseconds(5);
  auto n = WritesOf<XFetch>(*core).EntryFromTier("k", 7, "v", record, now);
  EXPECT_EQ(*n->shared_version(), "v-7");
  const EntryTimes t = n->times(core->fixed_times);
  const int64_t stored = now - 4 * kSecond;
  EXPECT_EQ(t.loaded_at, stored);
  EXPECT_EQ(t.expires_at, stored + 6 * kSecond);
  EXPECT_EQ(t.keep_until, stored + 20 * kSecond);
  EXPECT_EQ(t.stale_if_error_until, stored + 8 * kSecond);
  EXPECT_EQ(t.load_duration, 5'000'000);
  // The quiet window is the policy's, never past the record's freshness.
  EXPECT_LE(t.quiet_until, t.expires_at);
}

TEST(WritesTest, InvalidatingAKeyDropsItsEntryAndItsLoad) {
  ManualClock clock;
  auto core = MakeCore<SingleFlight>(&clock);
  const WritesOf<SingleFlight> writes(*core);
  for (const char* key : {"a", "b"}) {
    Store(*core, writes.NewEntry(key, core->HashOf(std::string(key)), key, 0,
                                 core->NowNanos(), {}));
  }
  const size_t hash = core->HashOf(std::string("a"));
  auto& shard = core->ShardFor(hash);
  auto flight = std::make_shared<typename CoreOf<SingleFlight>::Flight>(
      std::string("a"), hash, core->NowNanos());
  {
    typename CoreOf<SingleFlight>::Writer w(shard);
    shard.Register(w, "a", hash, flight);
  }
  writes.InvalidateLocally("a", hash);
  EXPECT_FALSE(Has(*core, "a"));
  EXPECT_TRUE(Has(*core, "b"));
  // The load's result may no longer be stored over the removal.
  typename CoreOf<SingleFlight>::Writer w(shard);
  EXPECT_FALSE(shard.IsRegistered(w, "a", hash, flight.get(), /*drop=*/false));
}

TEST(WritesTest, InvalidatingEverythingEmptiesEveryShard) {
  ManualClock clock;
  auto core = MakeCore<SingleFlight>(&clock);
  const WritesOf<SingleFlight> writes(*core);
  for (int i = 0; i < 50; ++i) {
    const std::string key = std::to_string(i);
    Store(*core, writes.NewEntry(key, core->HashOf(key), key, 0,
                                 core->NowNanos(), {}));
  }
  writes.InvalidateAllLocally();
  size_t left = 0;
  for (size_t i = 0; i < core->shard_count; ++i) left += core->shards[i].size();
  EXPECT_EQ(left, 0u);
  EXPECT_FALSE(Has(*core, "7"));
}

}  // namespace
}  // namespace paddock::internal
