// Tests of paddock/internal/shard.h: the eviction order (SIEVE, whose hand
// also takes an entry never served again, visited or not; an entry served
// stale is live) and the writer's promise that nothing it removes is
// destroyed under the shard's mutex.

#include "paddock/internal/shard.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/flight.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {
namespace {

// Counts destructions that ran while the destroying thread held a paddock
// mutex.
// Atomic: entries may be freed by the epoch's idle reclaimer thread.
std::atomic<int> destroyed_under_lock{0};
std::atomic<int> destroyed{0};

struct Watched {
  explicit Watched(int v) : v(v) {}
  Watched(const Watched&) = default;
  ~Watched() {
    ++destroyed;
    if (LocksHeld() != 0) ++destroyed_under_lock;
  }
  int v;
};

struct WatchedKeyHash {};  // Unused: the shard takes hashes from its caller.
struct WatchedKeyEq {
  bool operator()(const Watched& a, const Watched& b) const {
    return a.v == b.v;
  }
};

using TestFlight = KeyedFlight<int, int>;
using TestShard =
    Shard<int, Watched, TestFlight, absl::Hash<int>, std::equal_to<int>>;
using Node = TestShard::Node;

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    destroyed = 0;
    destroyed_under_lock = 0;
    shard_.set_capacity(3);
  }
  void TearDown() override { TryReclaim(); }

  // An entry for `key`, kept until `keep_until` (fresh until
  // `expires_at`), visited or not.
  std::unique_ptr<Node> Make(int key, int64_t keep_until, bool visited = false,
                             int64_t expires_at = 0) {
    auto n = std::make_unique<Node>(absl::HashOf(key), key);
    n->emplace_value(key);
    n->SetTimes({.expires_at = expires_at, .keep_until = keep_until}, {});
    n->visited.store(visited);
    return n;
  }
  size_t Store(std::unique_ptr<Node> n, int64_t now) {
    const size_t hash = n->hash;
    const int key = n->key;
    TestShard::Writer w(shard_);
    return shard_.Store(w, shard_.Find(hash, key, std::equal_to<int>()),
                        std::move(n), now);
  }
  bool Has(int key) {
    EpochGuard guard;
    return shard_.Find(absl::HashOf(key), key, std::equal_to<int>()) != nullptr;
  }

  TestShard shard_;
};

TEST_F(ShardTest, AnEntryNeverServedAgainIsEvictedFirstEvenIfVisited) {
  ASSERT_EQ(Store(Make(1, /*keep_until=*/100, /*visited=*/true), 0), 0u);
  ASSERT_EQ(Store(Make(2, 500), 0), 0u);
  ASSERT_EQ(Store(Make(3, 500), 0), 0u);
  // At 200, entry 1 is past keep_until: it goes, though SIEVE would keep it.
  EXPECT_EQ(Store(Make(4, 500), 200), 1u);
  EXPECT_FALSE(Has(1));
  EXPECT_TRUE(Has(2) && Has(3) && Has(4));
}

TEST_F(ShardTest, TheHandTakesAVisitedEntryNeverServedAgainWhereItReachesIt) {
  ASSERT_EQ(Store(Make(1, /*keep_until=*/500, /*visited=*/true), 0), 0u);
  ASSERT_EQ(Store(Make(2, /*keep_until=*/100, /*visited=*/true), 0), 0u);
  ASSERT_EQ(Store(Make(3, 500), 0), 0u);
  // The hand clears 1's bit and stops at 2, past keep_until: SIEVE alone
  // would have taken the unvisited 3.
  EXPECT_EQ(Store(Make(4, 500), 200), 1u);
  EXPECT_FALSE(Has(2));
  EXPECT_TRUE(Has(1) && Has(3) && Has(4));
}

TEST_F(ShardTest, AnEntryServedStaleIsLiveAndSieveChoosesAmongLiveEntries) {
  // Entry 1 is past its ttl but still served stale (keep_until ahead) and
  // was read: it must survive, the unread fresh entry 2 goes.
  auto stale = Make(1, /*keep_until=*/1000, /*visited=*/true,
                    /*expires_at=*/100);
  ASSERT_EQ(Store(std::move(stale), 0), 0u);
  ASSERT_EQ(Store(Make(2, 1000), 0), 0u);
  ASSERT_EQ(Store(Make(3, 1000, /*visited=*/true), 0), 0u);
  EXPECT_EQ(Store(Make(4, 1000), 200), 1u);
  EXPECT_TRUE(Has(1));
  EXPECT_FALSE(Has(2));
  EXPECT_TRUE(Has(3) && Has(4));
}

TEST_F(ShardTest, ARememberedErrorThatStillAnswersIsNotEvictedFirst) {
  // Its value is past keep_until, but the error it remembers answers callers
  // until error_until: evicting it would cost a loader call.
  auto remembered = Make(1, /*keep_until=*/100, /*visited=*/true);
  remembered->mutable_extras({}).error_until = 500;
  ASSERT_EQ(Store(std::move(remembered), 0), 0u);
  ASSERT_EQ(Store(Make(2, 1000), 0), 0u);
  ASSERT_EQ(Store(Make(3, 1000, /*visited=*/true), 0), 0u);
  EXPECT_EQ(Store(Make(4, 1000), 200), 1u);
  EXPECT_TRUE(Has(1));
  EXPECT_FALSE(Has(2));  // SIEVE's choice among the live entries.
}

TEST_F(ShardTest, RemovedEntriesAreDestroyedOnlyAfterTheLockIsReleased) {
  shard_.set_capacity(4);
  // Grow the table, replace, evict and unlink many times, reclaiming as we
  // go, so retirements and slot-array replacements free memory often.
  for (int round = 0; round < 200; ++round) {
    for (int key = 0; key < 8; ++key) {
      Store(Make(round * 8 + key, 1000, key % 2 == 0), 0);
    }
    {
      TestShard::Writer w(shard_);
      shard_.UnlinkAll(w);
    }
    TryReclaim();
  }
  TryReclaim();
  EXPECT_GT(destroyed.load(), 1000);
  EXPECT_EQ(destroyed_under_lock.load(), 0);
}

TEST_F(ShardTest, DroppedFlightRegistrationsAreDestroyedAfterTheLock) {
  // A flight's outcome holds values; the registration holds a key. Neither
  // may be destroyed under the mutex.
  struct Outcome {
    Watched value{7};
  };
  using OutcomeFlight = KeyedFlight<Outcome, Watched>;
  Shard<Watched, int, OutcomeFlight, WatchedKeyHash, WatchedKeyEq> shard;
  using ShardWriter = decltype(shard)::Writer;
  // The test's own keys outlive every locked section.
  const Watched one(1), two(2);
  {
    auto flight = std::make_shared<OutcomeFlight>(one, 1, 0);
    flight->Publish(Outcome{});
    {
      ShardWriter w(shard);
      shard.Register(w, one, 1, std::move(flight));
    }
    ShardWriter w(shard);
    shard.DropFlight(w, one, 1);
  }
  {
    auto flight = std::make_shared<OutcomeFlight>(two, 2, 0);
    flight->Publish(Outcome{});
    {
      ShardWriter w(shard);
      shard.Register(w, two, 2, std::move(flight));
    }
    ShardWriter w(shard);
    shard.DropAllFlights(w);
  }
  EXPECT_GE(destroyed.load(), 4);  // Two keys and two outcomes, at least.
  EXPECT_EQ(destroyed_under_lock.load(), 0);
}

TEST_F(ShardTest, LiveFlightIgnoresDoneAndAgedFlights) {
  TestShard::Writer w(shard_);
  auto flight = std::make_shared<TestFlight>(5, 5, /*started_at=*/100);
  shard_.Register(w, 5, 5, flight);
  EXPECT_EQ(shard_.LiveFlight(5, 5, 150, /*max_age=*/100), flight);
  EXPECT_EQ(shard_.LiveFlight(5, 5, 200, 100), nullptr);  // Aged.
  flight->Abandon();
  EXPECT_EQ(shard_.LiveFlight(5, 5, 150, 100), nullptr);  // Done.
  EXPECT_EQ(shard_.live_flights(), 0u);
}

TEST_F(ShardTest, LiveFlightOrRegisterJoinsALiveLoadOrRegistersThePending) {
  TestShard::Writer w(shard_);
  // A pending registration refers to its leader's key: these outlive it.
  const int five = 5;
  const int six = 6;
  TestShard::Pending first;
  first.started_at = 100;
  // Nothing registered: `first` is, without a flight.
  EXPECT_EQ(shard_.LiveFlightOrRegister(w, five, 5, 100, 100, &first), nullptr);
  EXPECT_TRUE(shard_.IsRegistered(w, 5, 5, nullptr, false, &first));
  EXPECT_EQ(first.flight, nullptr);
  // A second caller joins: the first joiner makes the pending load's flight.
  TestShard::Pending second;
  second.started_at = 150;
  std::shared_ptr<TestFlight> joined =
      shard_.LiveFlightOrRegister(w, five, 5, 150, 100, &second);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined, first.flight);
  EXPECT_EQ(shard_.LiveFlightOrRegister(w, five, 5, 160, 100, &second), joined);
  EXPECT_TRUE(shard_.IsRegistered(w, 5, 5, nullptr, false, &first));
  // Aged past max_age: the newcomer's pending load takes its place.
  EXPECT_EQ(shard_.LiveFlightOrRegister(w, five, 5, 200, 100, &second),
            nullptr);
  EXPECT_FALSE(shard_.IsRegistered(w, 5, 5, nullptr, false, &first));
  EXPECT_TRUE(shard_.IsRegistered(w, 5, 5, nullptr, true, &second));
  // A registered flight is returned as it is.
  auto flight = std::make_shared<TestFlight>(6, 6, /*started_at=*/100);
  shard_.Register(w, 6, 6, flight);
  TestShard::Pending third;
  third.started_at = 120;
  EXPECT_EQ(shard_.LiveFlightOrRegister(w, six, 6, 120, 100, &third), flight);
  EXPECT_EQ(shard_.live_flights(), 1u);
}

}  // namespace
}  // namespace paddock::internal
