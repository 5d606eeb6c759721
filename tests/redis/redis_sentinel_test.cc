// RedisTier in Sentinel mode against real servers on loopback ports the test
// picks: a master, its replica and three sentinels (quorum 2,
// down-after-milliseconds 500). The tier finds the master through the
// sentinels, passes over sentinels that are down or are not sentinels, and
// follows a failover: after the master is killed, or demoted by SENTINEL
// FAILOVER (READONLY replies), its calls reach the promoted replica, and a
// cold key is loaded once across pods again.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/paddock.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_fixture.h"
#include "redis_server.h"

namespace paddock {
namespace {

using ::paddock::testing::Eventually;
using ::paddock::testing::ExpectEveryOperationWorks;
using ::paddock::testing::ExpectGarbageIsNoRecordAndAFillReplacesIt;
using ::paddock::testing::FleetLoadsOfAColdKey;
using ::paddock::testing::FreeLoopbackPort;
using ::paddock::testing::RecordFailover;
using ::paddock::testing::RecoversWithin;
using ::paddock::testing::RedisServer;
using ::paddock::testing::ValueFill;
using ::testing::HasSubstr;

constexpr char kMasterName[] = "paddock-test";

class RedisSentinelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    master_port_ = FreeLoopbackPort();
    replica_port_ = FreeLoopbackPort();
    ASSERT_NE(master_port_, 0);
    ASSERT_NE(replica_port_, 0);
    // Redis 7 waits 5 s for more replicas before a diskless full sync.
    master_ = StartServer(master_port_, {"--repl-diskless-sync-delay", "0"});
    ASSERT_NE(master_, nullptr);
    replica_ = StartServer(replica_port_, {"--replicaof", "127.0.0.1",
                                           absl::StrCat(master_port_)});
    ASSERT_NE(replica_, nullptr);
    ASSERT_TRUE(Eventually(
        [&] {
          return absl::StrContains(
              replica_->Command({"INFO", "replication"}).value_or(""),
              "master_link_status:up");
        },
        absl::Seconds(20)))
        << "the replica did not sync";
    std::vector<int> ports;
    for (int i = 0; i < 3; ++i) {
      ports.push_back(FreeLoopbackPort());
      ASSERT_NE(ports.back(), 0);
    }
    for (int i = 0; i < 3; ++i) {
      RedisServer::Options options;
      options.sentinel = true;
      options.config = SentinelConfig(ports, i);
      options.extra_args = {"--port", absl::StrCat(ports[i]), "--bind",
                            "127.0.0.1"};
      absl::StatusOr<std::unique_ptr<RedisServer>> sentinel =
          RedisServer::Start(std::move(options));
      ASSERT_TRUE(sentinel.ok()) << sentinel.status();
      sentinels_.push_back(*std::move(sentinel));
      sentinel_addresses_.push_back(absl::StrCat("127.0.0.1:", ports[i]));
    }
    // Each sentinel reaches the other two: a failover can be agreed on.
    for (const std::unique_ptr<RedisServer>& sentinel : sentinels_) {
      ASSERT_TRUE(Eventually(
          [&] {
            return absl::StartsWith(
                sentinel->Command({"SENTINEL", "CKQUORUM", kMasterName})
                    .value_or(""),
                "OK 3 usable");
          },
          absl::Seconds(30)))
          << "the sentinels did not find each other";
    }
  }

  // The configuration of sentinel `i` of those on `ports`. It is told what
  // it would otherwise learn late: the replica (from the master's INFO,
  // every 10 s) and the other sentinels (from their hello messages, every
  // 2 s), which takes each test seconds less. Sentinel ids are 40 hex
  // digits, here the sentinel's number.
  std::string SentinelConfig(const std::vector<int>& ports, int i) const {
    auto id = [](int n) { return absl::StrCat(std::string(39, '0'), n + 1); };
    std::string config = absl::StrCat(
        "sentinel myid ", id(i), "\nsentinel monitor ", kMasterName,
        " 127.0.0.1 ", master_port_, " 2\nsentinel down-after-milliseconds ",
        kMasterName, " 500\nsentinel failover-timeout ", kMasterName,
        " 5000\nsentinel known-replica ", kMasterName, " 127.0.0.1 ",
        replica_port_, "\n");
    for (int j = 0; j < static_cast<int>(ports.size()); ++j) {
      if (j == i) continue;
      absl::StrAppend(&config, "sentinel known-sentinel ", kMasterName,
                      " 127.0.0.1 ", ports[j], " ", id(j), "\n");
    }
    return config;
  }

  // A server with TCP on `port` (127.0.0.1), and its control connection on
  // its unix socket; nullptr if it did not start (the test fails).
  static std::unique_ptr<RedisServer> StartServer(
      int port, std::vector<std::string> more) {
    RedisServer::Options options;
    options.extra_args = {"--port", absl::StrCat(port), "--bind", "127.0.0.1"};
    options.extra_args.insert(options.extra_args.end(), more.begin(),
                              more.end());
    absl::StatusOr<std::unique_ptr<RedisServer>> server =
        RedisServer::Start(std::move(options));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // Options of a tier in Sentinel mode: io_timeout 1 s, a breaker that
  // probes every 200 ms.
  RedisOptions TierOptions() const {
    RedisOptions options = testing::FailoverTierOptions("sentinel:v1:");
    options.sentinels = sentinel_addresses_;
    options.master_name = kMasterName;
    return options;
  }

  static std::shared_ptr<RedisTier> Connect(const RedisOptions& options) {
    return testing::ConnectTier(options);
  }

  // Whether every sentinel names the replica's port as the master's within
  // `timeout`.
  bool SentinelsNameTheReplica(absl::Duration timeout) {
    const std::string port = absl::StrCat(replica_port_);
    return Eventually(
        [&] {
          for (const std::unique_ptr<RedisServer>& sentinel : sentinels_) {
            if (!absl::EndsWith(
                    sentinel
                        ->Command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                   kMasterName})
                        .value_or(""),
                    "\n" + port)) {
              return false;
            }
          }
          return true;
        },
        timeout);
  }

  // The value the record of `key` holds on `server`, "" if none.
  static std::string RecordOn(RedisServer& server, const std::string& key) {
    return server
        .Command({"HGET", absl::StrCat("sentinel:v1:{", key, "}:v"), "value"})
        .value_or("");
  }

  int master_port_ = 0;
  int replica_port_ = 0;
  std::unique_ptr<RedisServer> master_;
  std::unique_ptr<RedisServer> replica_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
  std::vector<std::string> sentinel_addresses_;
};

TEST_F(RedisSentinelTest, EveryOperationWorksOnTheMasterTheSentinelsName) {
  RedisOptions options = TierOptions();
  options.lease_for = absl::Seconds(1);  // Extended every 500 ms.
  std::shared_ptr<RedisTier> a = Connect(options);
  std::shared_ptr<RedisTier> b = Connect(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ExpectEveryOperationWorks(*a, *b, "v");
  ASSERT_TRUE(a->Put("k", ValueFill("on the master"), 0).ok());
  EXPECT_EQ(RecordOn(*master_, "k"), "on the master");
}

TEST_F(RedisSentinelTest, ACacheLoadsAColdKeyOnceAcrossPods) {
  EXPECT_EQ(FleetLoadsOfAColdKey([&] { return Connect(TierOptions()); }), 1);
}

// A sentinel that is down, and a server that is no sentinel (its error
// reply), come first: the next sentinel answers.
// Garbage at a record on the master the sentinels name: no record, and a
// fill replaces it.
TEST_F(RedisSentinelTest, GarbageAtARecordIsNoRecordAndAFillReplacesIt) {
  std::shared_ptr<RedisTier> tier = Connect(TierOptions());
  ASSERT_NE(tier, nullptr);
  ExpectGarbageIsNoRecordAndAFillReplacesIt(*tier, "g", [&] {
    return master_->Command({"HSET", "sentinel:v1:{g}:v", "foo", "bar"})
        .status();
  });
}

TEST_F(RedisSentinelTest, SentinelsThatCannotAnswerArePassedOver) {
  RedisOptions options = TierOptions();
  options.sentinels.insert(options.sentinels.begin(),
                           {absl::StrCat("127.0.0.1:", FreeLoopbackPort()),
                            absl::StrCat("127.0.0.1:", replica_port_)});
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
}

TEST_F(RedisSentinelTest, NoSentinelThatNamesTheMasterIsUnavailable) {
  RedisOptions options = TierOptions();
  const std::string down = absl::StrCat("127.0.0.1:", FreeLoopbackPort());
  options.sentinels = {down};
  const absl::Status refused = RedisTier::Connect(options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("no sentinel named"));
  EXPECT_THAT(refused.message(), HasSubstr(down));

  options = TierOptions();
  options.master_name = "unknown";
  const absl::Status unknown = RedisTier::Connect(options).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnavailable) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("monitors no master named"));
}

TEST(RedisSentinelOptionsTest, ValidateChecksTheSentinelFields) {
  RedisOptions options;
  options.sentinels = {"127.0.0.1:26379"};
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("master_name"));
  options.master_name = "mymaster";
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  options.sentinels.emplace_back("unix:/run/sentinel.sock");
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("sentinels"));
  options.sentinels = {};
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("sentinels"));
}

// The master dies while two pods serve: they keep answering (what they hold,
// and new keys loaded locally, each call within its bounds); the sentinels
// promote the replica; the pods' tiers reach it, and a cold key is loaded
// once across pods again.
TEST_F(RedisSentinelTest, AKilledMasterIsReplacedAndTheTierFollows) {
  std::shared_ptr<RedisTier> tier = Connect(TierOptions());
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("before", ValueFill("v"), 0).ok());
  Options cache_options;
  cache_options.ttl = absl::Seconds(30);
  cache_options.wait_timeout = absl::Seconds(5);
  cache_options.shared = tier;
  Cache<std::string, std::string, SingleFlight> pod(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        return key + "!";
      },
      cache_options);
  ASSERT_EQ(pod.Get("warm").value_or(""), "warm!");

  ASSERT_TRUE(master_->Kill().ok());
  const absl::Time killed = absl::Now();
  // Served meanwhile: what the pod holds, and new keys loaded locally, each
  // within about a few io_timeouts.
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    EXPECT_EQ(pod.Get("warm").value_or(""), "warm!");
    const std::string key = absl::StrCat("new", i);
    EXPECT_EQ(pod.Get(key).value_or(""), key + "!");
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  ASSERT_TRUE(SentinelsNameTheReplica(absl::Seconds(30)));
  const absl::Duration promoted = absl::Now() - killed;
  EXPECT_TRUE(RecoversWithin(*tier, absl::Seconds(10)));
  const absl::Duration recovered = absl::Now() - killed;
  ASSERT_TRUE(tier->Put("after", ValueFill("on the new master"), 0).ok());
  EXPECT_EQ(RecordOn(*replica_, "after"), "on the new master");
  EXPECT_TRUE(Eventually([&] { return tier->subscribed(); }));
  EXPECT_EQ(FleetLoadsOfAColdKey([&] { return Connect(TierOptions()); }), 1);
  RecordFailover(promoted, recovered);
}

// A hung master: calls fail within io_timeout, the sentinels promote the
// replica, the tier follows; the old master's return does not draw it back.
TEST_F(RedisSentinelTest, AHungMasterIsReplacedAndItsReturnChangesNothing) {
  RedisOptions options = TierOptions();
  options.breaker_failures = 100;  // Every call goes to Redis.
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(master_->Pause().ok());
  const absl::Time start = absl::Now();
  const absl::Status hung = tier->Put("k", ValueFill("v"), 0);
  EXPECT_EQ(hung.code(), absl::StatusCode::kDeadlineExceeded) << hung;
  EXPECT_LT(absl::Now() - start, options.io_timeout + absl::Seconds(2));
  ASSERT_TRUE(SentinelsNameTheReplica(absl::Seconds(30)));
  ASSERT_TRUE(Eventually(
      [&] {
        return tier->Put("after", ValueFill("new"), 0).ok() &&
               RecordOn(*replica_, "after") == "new";
      },
      absl::Seconds(5)));
  ASSERT_TRUE(master_->Resume().ok());
  ASSERT_TRUE(tier->Put("later", ValueFill("still new"), 0).ok());
  EXPECT_EQ(RecordOn(*replica_, "later"), "still new");
}

// SENTINEL FAILOVER demotes the living master: the tier's pooled
// connections to it get READONLY for writes, and the next connections go to
// the promoted replica.
TEST_F(RedisSentinelTest, ADemotedMasterIsLeftForThePromotedReplica) {
  std::shared_ptr<RedisTier> tier = Connect(TierOptions());
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("before", ValueFill("v"), 0).ok());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(
      sentinels_[0]->Command({"SENTINEL", "FAILOVER", kMasterName}).ok());
  ASSERT_TRUE(SentinelsNameTheReplica(absl::Seconds(30)));
  ::testing::Test::RecordProperty(
      "named_ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start)));
  // The old master lives on and may take writes until the sentinels demote
  // it (seconds later); the tier heard +switch-master and has left it. Its
  // READONLY, once demoted, would send the tier to the sentinels too.
  ASSERT_TRUE(Eventually(
      [&] {
        return tier->Put("after", ValueFill("new"), 0).ok() &&
               RecordOn(*replica_, "after") == "new";
      },
      absl::Seconds(5)));
  ::testing::Test::RecordProperty(
      "followed_ms",
      absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start)));
  EXPECT_TRUE(tier->Lookup("k", "", absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace paddock
