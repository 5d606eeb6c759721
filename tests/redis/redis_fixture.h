// File: tests/redis/redis_fixture.h
// -----------------------------------------------------------------------------
// `RedisTest`: the one fixture of the tests against a real redis-server. Each
// test gets a server of its own (redis_server.h: a unix socket in a temporary
// directory, stopped by its pid), tier options generous enough for a busy
// machine or a sanitizer (fault tests shorten them), and Connect. With it,
// the checks the tests of each way of reaching Redis (plain, ACL, TLS,
// Sentinel, Cluster) share: waiting for a condition, for a tier to recover,
// every operation, two pods of a cache loading a cold key once, garbage at a
// record, and what a failover took.

#ifndef PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_
#define PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_server.h"

namespace paddock::testing {

// A tier connected with `options`, or nullptr (the test fails).
inline std::shared_ptr<RedisTier> ConnectTier(const RedisOptions& options) {
  absl::StatusOr<std::shared_ptr<RedisTier>> tier = RedisTier::Connect(options);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *tier : nullptr;
}

// A fill of `value`: fresh for 10 s, kept for 20 s.
inline SharedFill ValueFill(std::string value) {
  SharedFill fill;
  fill.value = std::move(value);
  fill.fresh_for = absl::Seconds(10);
  fill.keep_for = absl::Seconds(20);
  return fill;
}

// Whether `done()` holds within `timeout`, asked every 5 ms.
inline bool Eventually(const std::function<bool()>& done,
                       absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!done() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

// Looks up fresh keys until one call succeeds; returns whether one did
// within `timeout`.
inline bool RecoversWithin(RedisTier& tier, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  for (int i = 0; absl::Now() < give_up; ++i) {
    if (tier.Lookup(absl::StrCat("probe", i), "", absl::ZeroDuration()).ok()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

// Every operation of the tier, between two tiers of one server: a lease
// (extended by the keeper: their options need `lease_for` 1 s, which
// leaves a busy machine half a second for each extension), a wait
// for it that the holder's Fill wakes (its change message), hits, a Put of
// `value` read back by the other, Invalidate and Release; no call fails.
inline void ExpectEveryOperationWorks(RedisTier& a, RedisTier& b,
                                      const std::string& value) {
  using Lease = SharedLookup::Lease;
  ASSERT_TRUE(Eventually([&] { return a.subscribed() && b.subscribed(); }));
  absl::StatusOr<SharedLookup> held = a.Lookup("k", "", absl::Seconds(5));
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->lease, Lease::kGranted);
  absl::SleepFor(absl::Milliseconds(700));  // Extended every 500 ms.
  EXPECT_GE(a.stats().leases_extended, 1u);

  // b asks and waits on a thread of its own: AwaitChange wakes for what
  // arrived since that thread's Lookup.
  std::atomic<bool> asked{false};
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    absl::StatusOr<SharedLookup> waits = b.Lookup("k", "", absl::Seconds(5));
    asked = waits.ok() && waits->lease == Lease::kHeldElsewhere;
    if (asked) woke = b.AwaitChange("k", absl::Seconds(10));
  });
  const bool b_asked = Eventually([&] { return asked.load(); });
  SharedFill fill = ValueFill("v1");
  absl::StatusOr<bool> filled = a.Fill("k", held->lease_token, fill);
  waiter.join();
  ASSERT_TRUE(b_asked) << "b did not ask";
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_TRUE(*filled);
  EXPECT_TRUE(woke);  // The fill's message (PUBLISH) reached b.
  absl::StatusOr<SharedLookup> hit = b.Lookup("k", "", absl::Seconds(5));
  ASSERT_TRUE(hit.ok() && hit->record.has_value()) << hit.status();
  EXPECT_EQ(hit->record->value.value_or(""), "v1");

  fill.value = value;
  ASSERT_TRUE(a.Put("p", fill, 1).ok());
  absl::StatusOr<SharedLookup> read = b.Lookup("p", "", absl::Seconds(5));
  ASSERT_TRUE(read.ok() && read->record.has_value()) << read.status();
  EXPECT_EQ(read->record->value.value_or(""), value);
  EXPECT_TRUE(a.Invalidate("p", 1).ok());
  absl::StatusOr<SharedLookup> other = a.Lookup("r", "", absl::Seconds(5));
  ASSERT_TRUE(other.ok() && other->lease == Lease::kGranted);
  EXPECT_TRUE(a.Release("r", other->lease_token).ok());
  EXPECT_EQ(a.stats().failures, 0u);
  EXPECT_EQ(b.stats().failures, 0u);
}

// Two pods, each a SingleFlight cache with a tier of its own from
// `connect`, and eight callers of the cold key "cold" spread over them;
// the loader takes 50 ms. Returns how many loads the fleet ran, or -1 when
// a tier does not connect; every caller must get the loaded value (a
// failure of the test otherwise).
inline int FleetLoadsOfAColdKey(
    const std::function<std::shared_ptr<RedisTier>()>& connect) {
  std::atomic<int> loads{0};
  auto loader = [&](const std::string& key) -> absl::StatusOr<std::string> {
    ++loads;
    absl::SleepFor(absl::Milliseconds(50));
    return key + "!";
  };
  using Pod = Cache<std::string, std::string, SingleFlight>;
  std::vector<std::unique_ptr<Pod>> pods;
  for (int i = 0; i < 2; ++i) {
    std::shared_ptr<RedisTier> tier = connect();
    if (tier == nullptr) return -1;
    Options options;
    options.ttl = absl::Seconds(30);
    options.wait_timeout = absl::Seconds(10);
    options.shared = std::move(tier);
    pods.push_back(std::make_unique<Pod>(loader, options));
  }
  std::vector<std::thread> callers;
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] {
      if (pods[i % 2]->Get("cold").value_or("") == "cold!") ++right;
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(right, 8);
  return loads;
}

// What garbage at a record costs in every mode: `write_garbage` puts
// something that is no record of the tier at `key`'s record key (on
// whatever server holds it); the tier's Lookup then finds no record, counts
// a bad record and grants the lease, and its Fill replaces the garbage.
inline void ExpectGarbageIsNoRecordAndAFillReplacesIt(
    RedisTier& tier, const std::string& key,
    const std::function<absl::Status()>& write_garbage) {
  ASSERT_TRUE(write_garbage().ok());
  const uint64_t bad = tier.stats().bad_records;
  absl::StatusOr<SharedLookup> lookup = tier.Lookup(key, "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->record.has_value());
  ASSERT_EQ(lookup->lease, SharedLookup::Lease::kGranted);
  EXPECT_EQ(tier.stats().bad_records, bad + 1);
  ASSERT_TRUE(
      tier.Fill(key, lookup->lease_token, ValueFill("v")).value_or(false));
  lookup = tier.Lookup(key, "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
  EXPECT_EQ(lookup->record->value.value_or(""), "v");
}

// Records how long after a master's failure its replica was `promoted` and
// the tier `recovered` (test properties promoted_ms, recovered_ms: the
// numbers of docs/fleet.md, "Deploying"), and expects the tier to follow a
// promotion within 5 s.
inline void RecordFailover(absl::Duration promoted, absl::Duration recovered) {
  ::testing::Test::RecordProperty(
      "promoted_ms", absl::StrCat(absl::ToInt64Milliseconds(promoted)));
  ::testing::Test::RecordProperty(
      "recovered_ms", absl::StrCat(absl::ToInt64Milliseconds(recovered)));
  EXPECT_LT(recovered - promoted, absl::Seconds(5));
}

// The options of a tier in a failover mode (Sentinel, Cluster) with key
// prefix `prefix`: io_timeout 1 s, connect_timeout 500 ms, lease_for 10 s and
// a breaker that probes every 200 ms, so that a test sees a failover through.
inline RedisOptions FailoverTierOptions(std::string prefix) {
  RedisOptions options;
  options.key_prefix = std::move(prefix);
  options.io_timeout = absl::Seconds(1);
  options.connect_timeout = absl::Milliseconds(500);
  options.lease_for = absl::Seconds(10);
  options.breaker_cooldown = absl::Milliseconds(200);
  options.health_check_interval = absl::Milliseconds(200);
  return options;
}

class RedisTest : public ::testing::Test {
 protected:
  // `prefix`: the key prefix of TierOptions().
  explicit RedisTest(std::string prefix = "test:v1:")
      : prefix_(std::move(prefix)) {}

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A tier of this test's server: io_timeout 2 s and lease_for 10 s.
  RedisOptions TierOptions() const {
    RedisOptions options;
    options.address = server_->address();
    options.key_prefix = prefix_;
    options.io_timeout = absl::Seconds(2);
    options.lease_for = absl::Seconds(10);
    return options;
  }

  // A tier connected with `options`, or nullptr (the test fails).
  std::shared_ptr<RedisTier> Connect(const RedisOptions& options) {
    return ConnectTier(options);
  }
  std::shared_ptr<RedisTier> Connect() { return Connect(TierOptions()); }

  const std::string prefix_;
  std::unique_ptr<RedisServer> server_;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_
