// RedisTier against a real redis-server that wants a password or an ACL
// user: every connection authenticates (the pool's, the subscription's,
// reconnects), a wrong or missing password and an ACL that forbids what the
// tier needs fail Connect with a clear status, and the password never shows
// in a status. The tier works with exactly the ACL docs/fleet.md lists.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/paddock.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_fixture.h"

namespace paddock {
namespace {

using ::paddock::testing::Eventually;
using ::paddock::testing::ExpectEveryOperationWorks;
using ::paddock::testing::FleetLoadsOfAColdKey;
using ::paddock::testing::RedisTest;
using ::testing::HasSubstr;
using ::testing::Not;
using Lease = SharedLookup::Lease;

constexpr char kPassword[] = "s3cret-Pa55";

// The ACL of docs/fleet.md ("Deploying"), for the key prefix "test:v1:",
// rule by rule (ACL SETUSER's arguments).
std::vector<std::string> MinimalAcl() {
  return absl::StrSplit(
      "resetkeys resetchannels ~test:v1:* &test:v1:* -@all +evalsha "
      "+script|load +subscribe +ping +time +type +hmget +hexists +hstrlen "
      "+hget +hset +pexpire +pttl +get +set +del +publish",
      ' ');
}

// The minimal ACL without `rule`.
std::vector<std::string> MinimalAclWithout(std::string_view rule) {
  std::vector<std::string> acl = MinimalAcl();
  std::erase(acl, std::string(rule));
  return acl;
}

class RedisAuthTest : public RedisTest {
 protected:
  // Makes user `name` with password kPassword and `rules`.
  void AddUser(const std::string& name, const std::vector<std::string>& rules) {
    std::vector<std::string> args = {
        "ACL", "SETUSER", name, "reset", "on", absl::StrCat(">", kPassword)};
    args.insert(args.end(), rules.begin(), rules.end());
    absl::StatusOr<std::string> set = server_->Command(args);
    ASSERT_TRUE(set.ok()) << set.status();
  }

  // The default user needs kPassword from now on (the server's own test
  // connection stays authenticated).
  void RequirePassword() {
    ASSERT_TRUE(
        server_
            ->Command({"CONFIG", "SET", "requirepass", std::string(kPassword)})
            .ok());
  }

  RedisOptions AsUser(const std::string& name) const {
    RedisOptions options = TierOptions();
    options.username = name;
    options.password = std::string(kPassword);
    return options;
  }

  // Connect's status for `options`.
  static absl::Status ConnectStatus(const RedisOptions& options) {
    return RedisTier::Connect(options).status();
  }

  // Whether `tier`'s change subscription is `up` within 10 s.
  static bool WaitSubscribed(const RedisTier& tier, bool up) {
    return Eventually([&] { return tier.subscribed() == up; });
  }
};

TEST_F(RedisAuthTest, ThePasswordOfTheDefaultUserIsSentOnEveryConnection) {
  RequirePassword();
  RedisOptions options = TierOptions();
  options.password = std::string(kPassword);
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->subscribed());
  ASSERT_TRUE(tier->Lookup("k", "", absl::Seconds(5)).ok());

  // Every connection dropped: the pool's new ones and the subscription's
  // return authenticate too.
  ASSERT_TRUE(server_->Command({"CLIENT", "KILL", "TYPE", "pubsub"}).ok());
  ASSERT_TRUE(
      server_->Command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"})
          .ok());
  // Subscribed again after the loss (right after the kill, the tier may not
  // have noticed it yet).
  ASSERT_TRUE(Eventually([&] {
    return tier->stats().subscription_losses >= 1 && tier->subscribed();
  }));
  absl::StatusOr<SharedLookup> again = tier->Lookup("k", "", absl::Seconds(5));
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST_F(RedisAuthTest, AWrongPasswordIsUnauthenticatedAndNeverNamed) {
  AddUser("paddock", MinimalAcl());
  RedisOptions options = AsUser("paddock");
  options.password = "wrong-Pa55word";
  const absl::Status status = ConnectStatus(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(status.message(), HasSubstr("WRONGPASS"));
  EXPECT_THAT(status.message(), HasSubstr("user \"paddock\""));
  EXPECT_THAT(status.message(), Not(HasSubstr("wrong-Pa55word")));
  EXPECT_THAT(status.ToString(), Not(HasSubstr("Pa55")));

  // The default user likewise.
  RequirePassword();
  RedisOptions as_default = TierOptions();
  as_default.password = "wrong-Pa55word";
  const absl::Status refused = ConnectStatus(as_default);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_THAT(refused.ToString(), Not(HasSubstr("Pa55")));
}

TEST_F(RedisAuthTest, NoPasswordWhereOneIsWantedIsUnauthenticated) {
  RequirePassword();
  const absl::Status status = ConnectStatus(TierOptions());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(status.message(), HasSubstr("NOAUTH"));
}

TEST_F(RedisAuthTest, APasswordForAServerThatWantsNoneIsUnauthenticated) {
  RedisOptions options = TierOptions();
  options.password = std::string(kPassword);
  const absl::Status status = ConnectStatus(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(status.ToString(), Not(HasSubstr("Pa55")));
}

TEST_F(RedisAuthTest, AUsernameWithoutAPasswordIsInvalid) {
  RedisOptions options = TierOptions();
  options.username = "paddock";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("password"));
}

// Every operation of the tier, and a cache on it, under exactly the
// documented ACL.
TEST_F(RedisAuthTest, TheMinimalAclIsEnoughForEveryOperation) {
  AddUser("paddock", MinimalAcl());
  RedisOptions options = AsUser("paddock");
  options.lease_for = absl::Seconds(1);  // Extended every 500 ms.
  options.poll_interval = absl::Milliseconds(20);
  std::shared_ptr<RedisTier> a = Connect(options);
  std::shared_ptr<RedisTier> b = Connect(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ExpectEveryOperationWorks(*a, *b, "v");

  // AwaitChange's poll (GET) while b's subscription is down.
  absl::StatusOr<SharedLookup> lease = a->Lookup("q", "", absl::Seconds(5));
  ASSERT_TRUE(lease.ok() && lease->lease == Lease::kGranted);
  ASSERT_TRUE(
      server_->Command({"ACL", "SETUSER", "paddock", "-subscribe"}).ok());
  ASSERT_TRUE(server_->Command({"CLIENT", "KILL", "TYPE", "pubsub"}).ok());
  ASSERT_TRUE(WaitSubscribed(*b, false));
  std::atomic<bool> asked{false};
  std::atomic<bool> woke{false};
  std::atomic<bool> polled_past_delete{false};
  std::atomic<bool> deleted{false};
  std::thread poller([&] {
    absl::StatusOr<SharedLookup> waits = b->Lookup("q", "", absl::Seconds(5));
    asked = waits.ok() && waits->lease == Lease::kHeldElsewhere;
    if (!asked) return;
    woke = b->AwaitChange("q", absl::Seconds(10));
    polled_past_delete = deleted.load();
  });
  ASSERT_TRUE(Eventually([&] { return asked.load(); })) << "b did not ask";
  absl::SleepFor(absl::Milliseconds(100));  // A few polls of the lease.
  deleted = true;
  ASSERT_TRUE(server_->Command({"DEL", "test:v1:{q}:l"}).ok());
  poller.join();
  EXPECT_TRUE(woke);
  EXPECT_TRUE(polled_past_delete);  // Woken by the poll's GET, not before.
}

TEST_F(RedisAuthTest, ACacheOnTheMinimalAclLoadsAColdKeyOnceAcrossPods) {
  AddUser("paddock", MinimalAcl());
  EXPECT_EQ(FleetLoadsOfAColdKey([&] { return Connect(AsUser("paddock")); }),
            1);
}

TEST_F(RedisAuthTest, AnAclWithoutACommandTheTierNeedsIsPermissionDenied) {
  for (const char* rule : {"+hset", "+publish", "+time", "+pexpire"}) {
    SCOPED_TRACE(rule);
    AddUser("paddock", MinimalAclWithout(rule));
    const absl::Status status = ConnectStatus(AsUser("paddock"));
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::AsciiStrToUpper(rule + 1)));
    EXPECT_THAT(status.ToString(), Not(HasSubstr("Pa55")));
  }
}

TEST_F(RedisAuthTest, AnAclWithoutScriptsOrTheSubscriptionIsPermissionDenied) {
  for (const char* rule : {"+evalsha", "+script|load", "+subscribe"}) {
    SCOPED_TRACE(rule);
    AddUser("paddock", MinimalAclWithout(rule));
    const absl::Status status = ConnectStatus(AsUser("paddock"));
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  }
}

TEST_F(RedisAuthTest, AnAclWithoutTheKeysOrTheChannelIsPermissionDenied) {
  std::vector<std::string> other_keys = MinimalAclWithout("~test:v1:*");
  other_keys.emplace_back("~other:*");
  AddUser("paddock", other_keys);
  const absl::Status keys = ConnectStatus(AsUser("paddock"));
  EXPECT_EQ(keys.code(), absl::StatusCode::kPermissionDenied) << keys;

  std::vector<std::string> other_channel = MinimalAclWithout("&test:v1:*");
  other_channel.emplace_back("&other:*");
  AddUser("paddock", other_channel);
  const absl::Status channel = ConnectStatus(AsUser("paddock"));
  EXPECT_EQ(channel.code(), absl::StatusCode::kPermissionDenied) << channel;
  EXPECT_THAT(channel.message(), HasSubstr("PUBLISH"));
  EXPECT_THAT(channel.message(), HasSubstr("SUBSCRIBE"));
}

// An ACL narrowed after Connect: the calls say so, as PermissionDenied.
TEST_F(RedisAuthTest, ACommandRefusedAfterConnectIsPermissionDenied) {
  AddUser("paddock", MinimalAcl());
  std::shared_ptr<RedisTier> tier = Connect(AsUser("paddock"));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(server_->Command({"ACL", "SETUSER", "paddock", "-hset"}).ok());
  SharedFill fill;
  fill.value = "v";
  fill.fresh_for = absl::Seconds(10);
  fill.keep_for = absl::Seconds(20);
  const absl::Status put = tier->Put("k", fill, 1);
  EXPECT_EQ(put.code(), absl::StatusCode::kPermissionDenied) << put;
  ASSERT_TRUE(server_->Command({"ACL", "SETUSER", "paddock", "-evalsha"}).ok());
  const absl::Status lookup = tier->Lookup("k", "", absl::Seconds(5)).status();
  EXPECT_EQ(lookup.code(), absl::StatusCode::kPermissionDenied) << lookup;
}

}  // namespace
}  // namespace paddock
