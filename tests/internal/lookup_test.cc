// Tests of paddock/internal/lookup.h on a bare CacheCore with a ManualClock:
// what an entry answers as time passes (fresh, stale with one refresh, a
// remembered error, a stale value standing in for it, nothing), what each
// answer counts, the hit path, GetIfPresent, and what a caller gets from an
// outcome or a timed-out wait.

#include "paddock/internal/lookup.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/writes.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SoftTtl,
                       absl::Hash<std::string>, std::equal_to<>>;
using Lookup = Engine<Core>::Lookup;
using Writes = Engine<Core>::Writes;
using Served = Answer<Core::Entry>::Served;

class LookupTest : public ::testing::Test {
 protected:
  LookupTest() {
    Options options;
    options.clock = &clock_;
    options.ttl = absl::Seconds(10);
    options.wait_timeout = absl::Seconds(1);
    core_ = std::make_unique<Core>(
        [](const std::string& key) -> absl::StatusOr<std::string> {
          return key;
        },
        Core::AsyncLoader(), options,
        SoftTtl{.stale_for = absl::Seconds(20),
                .stale_if_error = absl::Seconds(40)},
        absl::Hash<std::string>(), std::equal_to<>());
  }

  size_t HashOf(const std::string& key) { return core_->HashOf(key); }
  Core::Shard& ShardOf(const std::string& key) {
    return core_->ShardFor(HashOf(key));
  }
  // Stores `key` -> "value of <key>", loaded now.
  void Load(const std::string& key) {
    Store(Writes(*core_).NewEntry(key, HashOf(key), "value of " + key, 0,
                                  core_->NowNanos(), {}));
  }
  // Stores the error `error` for `key` (keeping its value, if any).
  void Fail(const std::string& key, const absl::Status& error) {
    EpochGuard guard;
    const Core::Entry* current = Find(key);
    const int64_t now = core_->NowNanos();
    Store(MakeErrorEntry(HashOf(key), key, current,
                         current != nullptr && current->has_value(), error, now,
                         now, absl::Seconds(5), core_->fixed_times));
  }
  void Store(std::unique_ptr<Core::Entry> entry) {
    const size_t hash = HashOf(entry->key);  // Entries keep its low half.
    Core::Shard& shard = core_->ShardFor(hash);
    Core::Writer w(shard);
    Core::Entry* current = shard.Find(hash, entry->key, core_->lookup_eq());
    shard.Store(w, current, std::move(entry), core_->NowNanos());
  }
  Core::Entry* Find(const std::string& key) {
    return ShardOf(key).Find(HashOf(key), key, core_->lookup_eq());
  }
  Answer<Core::Entry> Examine(const std::string& key) {
    EpochGuard guard;
    Core::Entry* n = Find(key);
    EXPECT_NE(n, nullptr);
    return Lookup(*core_).Examine(n, core_->NowNanos());
  }

  ManualClock clock_{absl::FromUnixSeconds(1'000)};
  std::unique_ptr<Core> core_;
};

TEST_F(LookupTest, AnEntryIsFreshThenStaleWithOneRefreshThenGone) {
  Load("k");
  EXPECT_EQ(Examine("k").served, Served::kFresh);
  EXPECT_FALSE(Examine("k").refresh);

  clock_.Advance(absl::Seconds(15));  // Past ttl, within stale_for.
  const Answer<Core::Entry> stale = Examine("k");
  EXPECT_EQ(stale.served, Served::kStale);
  EXPECT_TRUE(stale.refresh);
  // The entry is marked: the next caller starts no second refresh.
  EXPECT_EQ(Examine("k").served, Served::kStale);
  EXPECT_FALSE(Examine("k").refresh);

  clock_.Advance(absl::Seconds(20));  // Past stale_for.
  EXPECT_EQ(Examine("k").served, Served::kNothing);
}

TEST_F(LookupTest, ARememberedErrorAnswersUntilItsTtlWithAStandInIfKept) {
  Fail("gone", absl::NotFoundError("no such key"));
  const Answer<Core::Entry> negative = Examine("gone");
  EXPECT_EQ(negative.served, Served::kNegative);
  {
    EpochGuard guard;
    EXPECT_EQ(Lookup::ResultOf(
                  Lookup(*core_).Examine(Find("gone"), core_->NowNanos()))
                  .status(),
              absl::NotFoundError("no such key"));
  }

  Load("k");
  clock_.Advance(absl::Seconds(35));  // Past stale_for, within stale_if_error.
  Fail("k", absl::UnavailableError("down"));
  EXPECT_EQ(Examine("k").served, Served::kStaleFallback);
  clock_.Advance(absl::Seconds(6));  // Past the error's ttl: load again.
  EXPECT_EQ(Examine("k").served, Served::kNothing);
}

TEST_F(LookupTest, RecordCountsWhatEachAnswerServed) {
  const Lookup lookup(*core_);
  const int64_t now = core_->NowNanos();
  lookup.Record({Served::kFresh}, now);
  lookup.Record({Served::kStale, nullptr, false, now - 1'000}, now);
  lookup.Record({Served::kNegative}, now);
  lookup.Record({Served::kStaleFallback, nullptr, false, now - 1'000}, now);
  lookup.Record({Served::kNothing}, now);
  const Stats stats = core_->recorder.Snapshot();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.stale_hits, 1u);
  EXPECT_EQ(stats.negative_hits, 1u);
  EXPECT_EQ(stats.stale_fallbacks, 1u);
}

TEST_F(LookupTest, TheHitPathServesOnlyAQuietEntry) {
  Load("k");
  const Lookup lookup(*core_);
  std::optional<absl::StatusOr<std::string>> out;
  EXPECT_TRUE(lookup.TakeHitUnprepared(ShardOf("k"), std::string("k"),
                                       HashOf("k"), out));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->value(), "value of k");
  EXPECT_EQ(core_->recorder.Snapshot().hits, 1u);

  out.reset();
  EXPECT_FALSE(lookup.TakeHitUnprepared(ShardOf("other"), std::string("other"),
                                        HashOf("other"), out));
  EXPECT_FALSE(out.has_value());

  clock_.Advance(absl::Seconds(15));  // Not quiet: the policy decides.
  EXPECT_TRUE(lookup.TakeHitUnprepared(ShardOf("k"), std::string("k"),
                                       HashOf("k"), out));
  EXPECT_FALSE(out.has_value());
}

TEST_F(LookupTest, IfPresentServesWhatNeedsNoLoad) {
  const Lookup lookup(*core_);
  EXPECT_EQ(lookup.IfPresent(std::string("k")), std::nullopt);
  Load("k");
  EXPECT_EQ(lookup.IfPresent(std::string("k")), "value of k");
  clock_.Advance(absl::Seconds(15));  // Stale, served.
  EXPECT_EQ(lookup.IfPresent(std::string("k")), "value of k");
  clock_.Advance(absl::Seconds(20));  // Past stale_for.
  EXPECT_EQ(lookup.IfPresent(std::string("k")), std::nullopt);
}

TEST_F(LookupTest, ServeCountsAStaleValueStandingInForAnError) {
  const Lookup lookup(*core_);
  EXPECT_EQ(lookup.Serve({std::string("v")}).value(), "v");
  EXPECT_EQ(core_->recorder.Snapshot().stale_fallbacks, 0u);
  EXPECT_EQ(lookup.Serve({std::string("old"), true, core_->NowNanos()}).value(),
            "old");
  EXPECT_EQ(core_->recorder.Snapshot().stale_fallbacks, 1u);
}

TEST_F(LookupTest, ATimedOutWaitGetsAKeptValueOrDeadlineExceeded) {
  const Lookup lookup(*core_);
  const absl::StatusOr<std::string> none =
      lookup.TimedOut("k", HashOf("k"), /*counted=*/true);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(core_->recorder.Snapshot().wait_timeouts, 1u);

  Load("k");
  clock_.Advance(absl::Seconds(25));  // Stale, but kept.
  EXPECT_EQ(lookup.TimedOut("k", HashOf("k"), /*counted=*/false).value(),
            "value of k");
  EXPECT_EQ(core_->recorder.Snapshot().wait_timeouts, 1u);
  EXPECT_EQ(core_->recorder.Snapshot().stale_fallbacks, 1u);
}

}  // namespace
}  // namespace paddock::internal
