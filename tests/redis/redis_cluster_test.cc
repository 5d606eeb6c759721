// RedisTier in Cluster mode against a real Redis Cluster the test creates:
// three masters and three replicas on loopback ports (redis_cluster.h,
// cluster-node-timeout 1 s). Every operation works whatever node serves the
// key, change messages from every master reach every tier, a fleet of pods
// loads each key once per expiry, a slot migrated mid-run (ASK, MOVED) costs
// no wrong value and no load, a killed or hung master costs its own slots
// only until its replica takes over, which the tier follows, and garbage at
// a record on any node is no record. An ACL user works on every node.

#include "redis_cluster.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/paddock.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis/cluster_map.h"
#include "redis/protocol.h"
#include "redis_fixture.h"
#include "redis_server.h"

// In paddock::testing, for the fixture's helpers (redis_fixture.h).
namespace paddock::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPrefix[] = "cluster:v1:";
using Pod = Cache<std::string, std::string, SingleFlight>;

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
        RedisCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // Options of a tier in Cluster mode: io_timeout 1 s, a breaker that
  // probes every 200 ms.
  RedisOptions TierOptions() const {
    RedisOptions options = FailoverTierOptions(kPrefix);
    options.cluster_nodes = cluster_->addresses();
    return options;
  }

  std::shared_ptr<RedisTier> Connect() { return ConnectTier(TierOptions()); }

  // The node that serves `key`'s record now.
  int MasterOfKey(const std::string& key) {
    return cluster_->MasterOf(
        internal::KeySlot(internal::RecordKey(kPrefix, key)));
  }

  // A key whose record master `node` serves, or "" if none of 1000 is.
  std::string KeyOn(int node, const std::string& stem) {
    for (int i = 0; i < 1000; ++i) {
      std::string key = absl::StrCat(stem, i);
      if (MasterOfKey(key) == node) return key;
    }
    return "";
  }

  // A pod: a SingleFlight cache with a tier of its own, counting its loads
  // of key i in `loads[i]` (keys are "key<i>").
  // With `tiers`, the pod's tier is also added there.
  std::unique_ptr<Pod> StartPod(
      std::vector<std::atomic<int>>& loads, absl::Duration ttl,
      std::vector<std::shared_ptr<RedisTier>>* tiers = nullptr) {
    std::shared_ptr<RedisTier> tier = Connect();
    if (tier == nullptr) return nullptr;
    if (tiers != nullptr) tiers->push_back(tier);
    Options options;
    options.ttl = ttl;
    options.wait_timeout = absl::Seconds(10);
    options.shared = std::move(tier);
    return std::make_unique<Pod>(
        [&loads](const std::string& key) -> absl::StatusOr<std::string> {
          ++loads[std::stoi(key.substr(3))];
          return key + "!";
        },
        options);
  }

  // Every pod reads every key on two threads, in orders of their own;
  // returns how many answers were wrong or failed.
  static int ReadAll(const std::vector<std::unique_ptr<Pod>>& pods, int keys) {
    std::atomic<int> wrong{0};
    std::vector<std::thread> readers;
    for (size_t p = 0; p < pods.size(); ++p) {
      for (int t = 0; t < 2; ++t) {
        readers.emplace_back([&, p, t] {
          for (int i = 0; i < keys; ++i) {
            const int k = (i * 7 + static_cast<int>(p) * 131 + t * 61) % keys;
            const std::string key = absl::StrCat("key", k);
            if (pods[p]->Get(key).value_or("") != key + "!") ++wrong;
          }
        });
      }
    }
    for (std::thread& reader : readers) reader.join();
    return wrong;
  }

  std::unique_ptr<RedisCluster> cluster_;
};

TEST_F(RedisClusterTest, EveryOperationWorksWhateverNodeServesTheKey) {
  RedisOptions options = TierOptions();
  options.lease_for = absl::Seconds(1);  // Extended every 500 ms.
  std::shared_ptr<RedisTier> a = ConnectTier(options);
  std::shared_ptr<RedisTier> b = ConnectTier(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ExpectEveryOperationWorks(*a, *b, "v");

  // Records on every master; each put's message reaches b, whichever node
  // its subscription is on.
  const uint64_t heard = b->stats().notifications;
  std::vector<bool> used(cluster_->size(), false);
  for (int i = 0; i < 60; ++i) {
    const std::string key = absl::StrCat("spread", i);
    ASSERT_TRUE(a->Put(key, ValueFill(key), 0).ok());
    absl::StatusOr<SharedLookup> read = b->Lookup(key, "", absl::Seconds(5));
    ASSERT_TRUE(read.ok() && read->record.has_value()) << read.status();
    EXPECT_EQ(read->record->value.value_or(""), key);
    const int master = MasterOfKey(key);
    ASSERT_GE(master, 0);
    used[master] = true;
  }
  EXPECT_EQ(std::count(used.begin(), used.end(), true), 3);
  EXPECT_TRUE(
      Eventually([&] { return b->stats().notifications >= heard + 60; }));
  EXPECT_EQ(a->stats().failures, 0u);
  EXPECT_GE(a->stats().slot_map_refreshes, 1u);
}

// 500 keys across all slots, four pods: each key is loaded once fleet-wide,
// and once more after it expired.
TEST_F(RedisClusterTest, FourPodsLoadEachKeyOncePerExpiry) {
  constexpr int kKeys = 500;
  constexpr absl::Duration kTtl = absl::Seconds(6);
  std::vector<std::atomic<int>> loads(kKeys);
  std::vector<std::unique_ptr<Pod>> pods;
  for (int i = 0; i < 4; ++i) {
    pods.push_back(StartPod(loads, kTtl));
    ASSERT_NE(pods.back(), nullptr);
  }
  const absl::Time first = absl::Now();
  EXPECT_EQ(ReadAll(pods, kKeys), 0);
  const absl::Duration took = absl::Now() - first;
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(loads[k].load(), 1) << "key" << k;
  }
  // Every record and copy has expired (the last loaded after `took`), and
  // the round below ends before the first of them expires again.
  ASSERT_LT(took, kTtl / 2) << "too slow a machine for this ttl";
  absl::SleepFor(first + took + kTtl + absl::Milliseconds(500) - absl::Now());
  EXPECT_EQ(ReadAll(pods, kKeys), 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(loads[k].load(), 2) << "key" << k;
  }
}

// All of one master's slots move to another (redis-cli reshard: MIGRATE
// key by key) while pods read the keys again and again (their copies live
// 200 ms): every answer is the stored value, and a key is loaded at most
// once (a call that met its slot half-moved). A tier whose map predates the
// move follows MOVED.
TEST_F(RedisClusterTest, ASlotMigratedMidRunServesNoWrongValue) {
  constexpr int kKeys = 500;
  std::shared_ptr<RedisTier> late = Connect();
  ASSERT_NE(late, nullptr);
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = absl::StrCat("key", k);
    SharedFill fill = ValueFill(key + "!");
    fill.fresh_for = fill.keep_for = absl::Minutes(5);
    ASSERT_TRUE(late->Put(key, fill, 0).ok());
  }
  std::vector<std::atomic<int>> loads(kKeys);
  std::vector<std::unique_ptr<Pod>> pods;
  for (int i = 0; i < 3; ++i) {
    pods.push_back(StartPod(loads, absl::Milliseconds(200)));
    ASSERT_NE(pods.back(), nullptr);
  }
  const int from = MasterOfKey("key0");
  ASSERT_GE(from, 0);
  int to = -1;
  for (int k = 1; k < kKeys && to < 0; ++k) {
    const int master = MasterOfKey(absl::StrCat("key", k));
    if (master != from) to = master;
  }
  ASSERT_GE(to, 0);

  absl::Status resharded;
  std::atomic<bool> done{false};
  std::thread reshard([&] {
    resharded = cluster_->Reshard(from, to, 5461);
    done = true;
  });
  int wrong = 0;
  int rounds = 0;
  do {
    wrong += ReadAll(pods, kKeys);
    ++rounds;
  } while (!done);
  reshard.join();
  ASSERT_TRUE(resharded.ok()) << resharded;
  EXPECT_EQ(wrong, 0);
  for (int k = 0; k < kKeys; ++k) EXPECT_LE(loads[k].load(), 1) << "key" << k;
  EXPECT_EQ(MasterOfKey("key0"), to);

  for (int k = 0; k < kKeys; ++k) {
    const std::string key = absl::StrCat("key", k);
    absl::StatusOr<SharedLookup> read = late->Lookup(key, "", absl::Seconds(5));
    ASSERT_TRUE(read.ok() && read->record.has_value()) << read.status();
    EXPECT_EQ(read->record->value.value_or(""), key + "!");
  }
  EXPECT_GE(late->stats().redirects, 1u);
  ::testing::Test::RecordProperty("rounds", absl::StrCat(rounds));
}

// A master dies: calls for its slots fail (and their keys load locally),
// calls for other masters' slots go on; its replica is promoted and the
// tier follows; then a cold key on those slots is loaded once fleet-wide.
TEST_F(RedisClusterTest,
       AKilledMasterCostsItsOwnSlotsUntilItsReplicaTakesOver) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  const int dead = MasterOfKey("cold");
  ASSERT_GE(dead, 0);
  const std::string elsewhere = KeyOn((dead + 1) % 3, "other");
  ASSERT_NE(MasterOfKey(elsewhere), dead);
  ASSERT_TRUE(tier->Put("cold-before", ValueFill("v"), 0).ok());

  ASSERT_TRUE(cluster_->node(dead).Kill().ok());
  const absl::Time killed = absl::Now();
  for (int i = 0; i < 10; ++i) {
    const absl::Status other = tier->Put(elsewhere, ValueFill("v"), 0);
    EXPECT_TRUE(other.ok()) << other;
    const absl::Time start = absl::Now();
    (void)tier->Lookup("cold", "", absl::ZeroDuration());
    EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  }
  const int slot = internal::KeySlot(internal::RecordKey(kPrefix, "cold"));
  ASSERT_GE(cluster_->WaitForMasterOtherThan(dead, slot, absl::Seconds(30)), 0);
  const absl::Duration promoted = absl::Now() - killed;
  ASSERT_TRUE(Eventually(
      [&] { return tier->Put("cold-after", ValueFill("v"), 0).ok(); },
      absl::Seconds(10)));
  const absl::Duration recovered = absl::Now() - killed;
  EXPECT_EQ(FleetLoadsOfAColdKey([&] { return Connect(); }), 1);
  RecordFailover(promoted, recovered);
}

// Four pods serve 500 keys while a master is killed: every answer is right,
// a key nobody holds is loaded locally within io_timeout, and once each
// pod's tier has followed the promotion of the master's replica the next
// expiry costs each key one load fleet-wide again: no key is loaded more
// than once beyond its expiries.
TEST_F(RedisClusterTest, AMasterKilledWhilePodsServeCostsNoKeyMoreThanOneLoad) {
  constexpr int kKeys = 500;
  constexpr absl::Duration kTtl = absl::Seconds(10);
  std::vector<std::atomic<int>> loads(kKeys + 1000);
  std::vector<std::shared_ptr<RedisTier>> tiers;
  std::vector<std::unique_ptr<Pod>> pods;
  for (int i = 0; i < 4; ++i) {
    pods.push_back(StartPod(loads, kTtl, &tiers));
    ASSERT_NE(pods.back(), nullptr);
  }
  const absl::Time first = absl::Now();
  EXPECT_EQ(ReadAll(pods, kKeys), 0);
  const absl::Duration took = absl::Now() - first;
  const int dead = MasterOfKey("key0");
  ASSERT_GE(dead, 0);
  // Keys of the dying master's slots beyond the 500: one nobody holds, one
  // to probe the tiers with.
  std::vector<std::string> spare;
  for (int k = kKeys; k < kKeys + 1000 && spare.size() < 2; ++k) {
    if (MasterOfKey(absl::StrCat("key", k)) == dead) {
      spare.push_back(absl::StrCat("key", k));
    }
  }
  ASSERT_EQ(spare.size(), 2u);
  ASSERT_TRUE(cluster_->node(dead).Kill().ok());

  const absl::Time killed = absl::Now();
  EXPECT_EQ(ReadAll(pods, kKeys), 0);  // From the pods' copies.
  EXPECT_EQ(pods[0]->Get(spare[0]).value_or(""), spare[0] + "!");
  EXPECT_LT(absl::Now() - killed, TierOptions().io_timeout + absl::Seconds(2));
  const int slot = internal::KeySlot(internal::RecordKey(kPrefix, "key0"));
  ASSERT_GE(cluster_->WaitForMasterOtherThan(dead, slot, absl::Seconds(30)), 0);
  for (const std::shared_ptr<RedisTier>& tier : tiers) {
    EXPECT_TRUE(
        Eventually([&] { return tier->Put(spare[1], ValueFill("v"), 0).ok(); },
                   absl::Seconds(10)));
  }
  ASSERT_LT(absl::Now() - first, kTtl) << "too slow a machine for this ttl";

  // Every copy and record has expired; the round ends before the first of
  // them expires again.
  absl::SleepFor(first + took + kTtl + absl::Milliseconds(500) - absl::Now());
  EXPECT_EQ(ReadAll(pods, kKeys), 0);
  int extra = 0;
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_GE(loads[k].load(), 2) << "key" << k;
    EXPECT_LE(loads[k].load(), 3) << "key" << k;
    extra += loads[k].load() - 2;
  }
  ::testing::Test::RecordProperty("extra_loads", absl::StrCat(extra));
}

// A hung master: its calls fail within io_timeout, the others' do not.
TEST_F(RedisClusterTest, AHungMasterFailsItsCallsInTimeOnly) {
  RedisOptions options = TierOptions();
  options.breaker_failures = 100;  // Every call goes to Redis.
  std::shared_ptr<RedisTier> tier = ConnectTier(options);
  ASSERT_NE(tier, nullptr);
  const std::string hung_key = KeyOn(MasterOfKey("k"), "k");
  const int hung = MasterOfKey(hung_key);
  const std::string elsewhere = KeyOn((hung + 1) % 3, "other");
  ASSERT_TRUE(cluster_->node(hung).Pause().ok());
  const absl::Time start = absl::Now();
  const absl::Status stuck = tier->Put(hung_key, ValueFill("v"), 0);
  EXPECT_EQ(stuck.code(), absl::StatusCode::kDeadlineExceeded) << stuck;
  EXPECT_LT(absl::Now() - start, options.io_timeout + absl::Seconds(2));
  EXPECT_TRUE(tier->Put(elsewhere, ValueFill("v"), 0).ok());
  ASSERT_TRUE(cluster_->node(hung).Resume().ok());
  // Back, or replaced by its replica meanwhile (node timeout 1 s).
  EXPECT_TRUE(
      Eventually([&] { return tier->Put(hung_key, ValueFill("v"), 0).ok(); },
                 absl::Seconds(20)));
}

// Garbage at a record on each master (another program's key, a hash of
// other fields) is no record, counted, and the next fill replaces it, as on
// one server.
TEST_F(RedisClusterTest, GarbageOnAnyNodeIsNoRecordAndAFillReplacesIt) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  for (int master = 0; master < 3; ++master) {
    const std::string key = KeyOn(master, "g");  // Nodes 0-2 are the masters.
    ASSERT_FALSE(key.empty());
    const std::string record = internal::RecordKey(kPrefix, key);
    ExpectGarbageIsNoRecordAndAFillReplacesIt(*tier, key, [&] {
      return cluster_->node(master)
          .Command(master == 0
                       ? std::vector<std::string>{"SET", record, "x"}
                       : std::vector<std::string>{"HSET", record, "foo", "bar"})
          .status();
    });
  }
}

// AUTH on every node. Each node wants the default user's password (ACLs
// and passwords are each node's own) and knows user "pod" with the ACL of
// docs/fleet.md plus the two cluster commands: a tier of that user works
// whatever node serves the key, so every node's connections sent AUTH; a
// wrong password is Unauthenticated and named nowhere.
TEST_F(RedisClusterTest,
       TheMinimalAclUserWorksOnEveryNodeAndAWrongPasswordIsNot) {
  constexpr char kPassword[] = "s3cret-Pa55";
  for (int i = 0; i < cluster_->size(); ++i) {
    std::vector<std::string> user = absl::StrSplit(
        "ACL SETUSER pod reset on >s3cret-Pa55 resetkeys resetchannels "
        "~cluster:v1:* &cluster:v1:* -@all +evalsha +script|load +subscribe "
        "+ping +time +type +hmget +hexists +hstrlen +hget +hset +pexpire "
        "+pttl +get +set +del +publish +cluster|slots +asking",
        ' ');
    ASSERT_TRUE(cluster_->node(i).Command(user).ok());
    // The node's own test connection stays authenticated.
    ASSERT_TRUE(cluster_->node(i)
                    .Command({"CONFIG", "SET", "masterauth", kPassword})
                    .ok());
    ASSERT_TRUE(cluster_->node(i)
                    .Command({"CONFIG", "SET", "requirepass", kPassword})
                    .ok());
  }
  RedisOptions options = TierOptions();
  options.lease_for = absl::Seconds(1);  // Extended every 500 ms.
  options.username = "pod";
  options.password = kPassword;
  std::shared_ptr<RedisTier> a = ConnectTier(options);
  std::shared_ptr<RedisTier> b = ConnectTier(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ExpectEveryOperationWorks(*a, *b, "v");
  for (int i = 0; i < 30; ++i) {
    const std::string key = absl::StrCat("acl", i);
    ASSERT_TRUE(a->Put(key, ValueFill(key), 0).ok()) << key;
  }

  options.password = "wr0ng-Pa55";
  const absl::Status wrong = RedisTier::Connect(options).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated) << wrong;
  EXPECT_THAT(wrong.message(), Not(HasSubstr("wr0ng")));
  EXPECT_THAT(wrong.message(), Not(HasSubstr("s3cret")));
}

TEST(RedisClusterConnectTest, NoNodeThatGivesAMapIsUnavailable) {
  RedisOptions options;
  const std::string down = absl::StrCat("127.0.0.1:", FreeLoopbackPort());
  options.cluster_nodes = {down};
  options.connect_timeout = absl::Milliseconds(500);
  const absl::Status refused = RedisTier::Connect(options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("CLUSTER SLOTS"));
  EXPECT_THAT(refused.message(), HasSubstr(down));

  // A server that is no cluster node says so.
  const int port = FreeLoopbackPort();
  RedisServer::Options server;
  server.extra_args = {"--port", absl::StrCat(port), "--bind", "127.0.0.1"};
  absl::StatusOr<std::unique_ptr<RedisServer>> plain =
      RedisServer::Start(std::move(server));
  ASSERT_TRUE(plain.ok()) << plain.status();
  options.cluster_nodes = {absl::StrCat("127.0.0.1:", port)};
  const absl::Status not_cluster = RedisTier::Connect(options).status();
  EXPECT_EQ(not_cluster.code(), absl::StatusCode::kUnavailable) << not_cluster;
  EXPECT_THAT(not_cluster.message(), HasSubstr("cluster support disabled"));
}

TEST(RedisClusterOptionsTest, ValidateChecksTheClusterFields) {
  RedisOptions options;
  options.cluster_nodes = {"127.0.0.1:7000", "[::1]:7001"};
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  // `address` is not used in cluster mode: neither empty nor a unix socket
  // (with TLS) is an error there.
  options.address = "";
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  options.address = "unix:/run/redis.sock";
  options.tls.enabled = true;
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  options.tls.enabled = false;
  options.cluster_nodes.emplace_back("unix:/run/redis.sock");
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("cluster_nodes"));
  options.cluster_nodes = {"127.0.0.1:7000"};
  options.sentinels = {"127.0.0.1:26379"};
  options.master_name = "m";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("cluster_nodes"));
}

}  // namespace
}  // namespace paddock::testing
