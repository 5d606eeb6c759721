// RedisTier against a real redis-server: connecting, the lease protocol,
// records, change notifications across tiers and processes, and records
// that someone else wrote badly. Faults (a hung, killed or restarted server)
// are in redis_tier_fault_test.cc.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "child_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_fixture.h"
#include "redis_server.h"

namespace paddock {
namespace {

using ::paddock::testing::ChildProcess;
using ::paddock::testing::RedisServer;
using ::paddock::testing::RedisTest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Lease = SharedLookup::Lease;

constexpr std::string_view kPrefix = "test:v1:";

// A subscriber that records what it receives; tests wait on it.
class RecordingSubscriber : public SharedTier::Subscriber {
 public:
  void OnInvalidate(std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    keys_.emplace_back(key);
    cv_.notify_all();
  }
  void OnMissedInvalidations() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++missed_;
    cv_.notify_all();
  }
  // Waits (up to `timeout`) until `n` invalidations arrived.
  bool WaitForKeys(size_t n, absl::Duration timeout = absl::Seconds(2)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return keys_.size() >= n; });
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }
  int missed() {
    std::lock_guard<std::mutex> lock(mu_);
    return missed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> keys_;
  int missed_ = 0;
};

SharedFill ValueFill(std::string value,
                     absl::Duration fresh_for = absl::Seconds(10),
                     absl::Duration keep_for = absl::Seconds(20)) {
  SharedFill fill;
  fill.value = std::move(value);
  fill.fresh_for = fresh_for;
  fill.keep_for = keep_for;
  fill.serve_on_error_for = absl::Seconds(5);
  fill.load_duration = absl::Milliseconds(123);
  return fill;
}

class RedisTierTest : public RedisTest {
 protected:
  RedisTierTest() : RedisTest(std::string(kPrefix)) {}
  RedisOptions Options() const { return TierOptions(); }
};

// ---- Connect ----------------------------------------------------------------

TEST(RedisTierConnectTest, MalformedAddressesAreInvalidArguments) {
  for (const char* address :
       {"", "localhost", "localhost:", "localhost:0", "localhost:65536",
        "localhost:12x", "unix:", "[::1", "[::1]6379", "::1:6379", ":6379"}) {
    RedisOptions options;
    options.address = address;
    absl::StatusOr<std::shared_ptr<RedisTier>> tier =
        RedisTier::Connect(options);
    EXPECT_EQ(tier.status().code(), absl::StatusCode::kInvalidArgument)
        << address;
    EXPECT_THAT(tier.status().message(),
                HasSubstr(absl::StrCat("\"", address, "\"")));
  }
}

TEST(RedisTierConnectTest, BadOptionsAreInvalidArguments) {
  const auto check = [](const char* field, auto change) {
    RedisOptions options;
    change(options);
    const absl::Status status = options.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(status.message(), HasSubstr(field));
    EXPECT_EQ(RedisTier::Connect(options).status(), status);
  };
  check("key_prefix", [](RedisOptions& o) { o.key_prefix = "svc:{v1}:"; });
  check("key_prefix", [](RedisOptions& o) { o.key_prefix = "a}"; });
  check("io_timeout",
        [](RedisOptions& o) { o.io_timeout = absl::ZeroDuration(); });
  check("connect_timeout",
        [](RedisOptions& o) { o.connect_timeout = -absl::Seconds(1); });
  check("lease_for",
        [](RedisOptions& o) { o.lease_for = absl::InfiniteDuration(); });
  // Finite, but past what a PX in milliseconds holds.
  check("lease_for", [](RedisOptions& o) { o.lease_for = absl::Hours(1e13); });
  check("lease_for", [](RedisOptions& o) { o.lease_for = absl::Hours(25); });
  check("breaker_cooldown",
        [](RedisOptions& o) { o.breaker_cooldown = absl::ZeroDuration(); });
  check("poll_interval",
        [](RedisOptions& o) { o.poll_interval = absl::ZeroDuration(); });
  check("health_check_interval", [](RedisOptions& o) {
    o.health_check_interval = absl::ZeroDuration();
  });
  check("max_value_bytes", [](RedisOptions& o) { o.max_value_bytes = 0; });
  check("pool_size", [](RedisOptions& o) { o.pool_size = 0; });
  check("breaker_failures", [](RedisOptions& o) { o.breaker_failures = 0; });
  EXPECT_TRUE(RedisOptions().Validate().ok());
}

TEST(RedisTierConnectTest, MissingSocketIsUnavailableNamingAddressAndReason) {
  RedisOptions options;
  options.address = "unix:/nonexistent-paddock-dir/redis.sock";
  absl::StatusOr<std::shared_ptr<RedisTier>> tier = RedisTier::Connect(options);
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(tier.status().message(), HasSubstr(options.address));
  EXPECT_THAT(tier.status().message(), HasSubstr("No such file"));
}

// A unix socket bound in a temporary directory of its own, with nobody
// accepting on it; removed with the directory when destroyed.
class BoundUnixSocket {
 public:
  BoundUnixSocket() {
    char dir[] = "/tmp/paddock-sock-XXXXXX";
    if (mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    path_ = dir_ + "/redis.sock";
    addr_.sun_family = AF_UNIX;
    path_.copy(addr_.sun_path, sizeof(addr_.sun_path) - 1);
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd_ >= 0 && bind(fd_, address(), address_size()) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  BoundUnixSocket(const BoundUnixSocket&) = delete;
  BoundUnixSocket& operator=(const BoundUnixSocket&) = delete;
  ~BoundUnixSocket() {
    if (fd_ >= 0) close(fd_);
    if (!path_.empty()) unlink(path_.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
  }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  std::string redis_address() const { return "unix:" + path_; }
  const sockaddr* address() const {
    return reinterpret_cast<const sockaddr*>(&addr_);
  }
  socklen_t address_size() const { return sizeof(addr_); }

 private:
  std::string dir_;
  std::string path_;
  sockaddr_un addr_ = {};
  int fd_ = -1;
};

TEST(RedisTierConnectTest, RefusedUnixSocketIsUnavailable) {
  // A bound socket nobody listens on refuses connections.
  const BoundUnixSocket server;
  ASSERT_TRUE(server.ok());
  RedisOptions options;
  options.address = server.redis_address();
  absl::StatusOr<std::shared_ptr<RedisTier>> tier = RedisTier::Connect(options);
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(tier.status().message(), HasSubstr(options.address));
  EXPECT_THAT(tier.status().message(), HasSubstr("refused"));
}

TEST(RedisTierConnectTest, AUnixSocketWithAFullListenQueueIsUnavailable) {
  // A server that never accepts: once its queue is full, a connect fails at
  // once, which is no timeout.
  const BoundUnixSocket server;
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(listen(server.fd(), 0), 0);
  std::vector<int> queued;
  for (int i = 0; i < 64; ++i) {
    const int client = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(client, 0);
    queued.push_back(client);
    if (connect(client, server.address(), server.address_size()) != 0) {
      break;  // Full.
    }
  }

  RedisOptions options;
  options.address = server.redis_address();
  absl::StatusOr<std::shared_ptr<RedisTier>> tier = RedisTier::Connect(options);
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(tier.status().message(), HasSubstr(options.address));
  EXPECT_THAT(tier.status().message(), HasSubstr("listen queue is full"));
  for (int client : queued) close(client);
}

TEST(RedisTierConnectTest, RefusedTcpPortIsUnavailable) {
  // An ephemeral port bound (so nobody else takes it) but not listening.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  RedisOptions options;
  options.address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  absl::StatusOr<std::shared_ptr<RedisTier>> tier = RedisTier::Connect(options);
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(tier.status().message(), HasSubstr(options.address));
  EXPECT_THAT(tier.status().message(), HasSubstr("refused"));
  close(fd);
}

TEST_F(RedisTierTest, ConnectsAndSubscribes) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->subscribed());
  EXPECT_EQ(tier->max_value_bytes(), size_t{1} << 20);
  EXPECT_EQ(tier->options().key_prefix, kPrefix);
}

// ---- The lease --------------------------------------------------------------

TEST_F(RedisTierTest, ExactlyOneOfManyConcurrentAskersIsGranted) {
  constexpr int kTiers = 4;
  constexpr int kThreadsPerTier = 8;
  std::vector<std::shared_ptr<RedisTier>> tiers;
  for (int i = 0; i < kTiers; ++i) {
    tiers.push_back(Connect());
    ASSERT_NE(tiers.back(), nullptr);
  }
  constexpr std::ptrdiff_t kAskers = std::ptrdiff_t{kTiers} * kThreadsPerTier;
  std::barrier start(kAskers);
  std::vector<absl::StatusOr<SharedLookup>> results(kAskers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kTiers * kThreadsPerTier; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = tiers[i % kTiers]->Lookup("hot", "", absl::ZeroDuration());
    });
  }
  for (std::thread& t : threads) t.join();

  int granted = 0;
  for (const absl::StatusOr<SharedLookup>& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->record.has_value());
    if (r->lease == Lease::kGranted) {
      ++granted;
      EXPECT_FALSE(r->lease_token.empty());
    } else {
      EXPECT_EQ(r->lease, Lease::kHeldElsewhere);
      EXPECT_GT(r->lease_remaining, absl::ZeroDuration());
      EXPECT_LE(r->lease_remaining, absl::Seconds(10));
      EXPECT_TRUE(r->lease_token.empty());
    }
  }
  EXPECT_EQ(granted, 1);
}

TEST_F(RedisTierTest, AFilledRecordRoundTrips) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> first =
      tier->Lookup("user:42", "", absl::Seconds(30));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->lease, Lease::kGranted);

  SharedFill fill = ValueFill("profile of 42");
  fill.load_duration = absl::Microseconds(123456);
  absl::StatusOr<bool> stored = tier->Fill("user:42", first->lease_token, fill);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(*stored);

  absl::StatusOr<SharedLookup> second =
      tier->Lookup("user:42", "", absl::Seconds(30));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->lease, Lease::kNotNeeded);
  EXPECT_TRUE(second->lease_token.empty());
  ASSERT_TRUE(second->record.has_value());
  const SharedRecord& record = *second->record;
  ASSERT_TRUE(record.value.ok());
  EXPECT_EQ(*record.value, "profile of 42");
  EXPECT_FALSE(record.version.empty());
  EXPECT_GE(record.age, absl::ZeroDuration());
  EXPECT_LT(record.age, absl::Seconds(10));
  EXPECT_EQ(record.fresh_for, fill.fresh_for);
  EXPECT_EQ(record.keep_for, fill.keep_for);
  EXPECT_EQ(record.serve_on_error_for, fill.serve_on_error_for);
  EXPECT_EQ(record.load_duration, fill.load_duration);

  // The record expires with its keep_for (PX), on Redis's clock.
  const absl::StatusOr<std::string> pttl =
      server_->Command({"PTTL", "test:v1:{user:42}:v"});
  ASSERT_TRUE(pttl.ok()) << pttl.status();
  EXPECT_GT(std::stoll(*pttl), 0);
  EXPECT_LE(std::stoll(*pttl), 20000);
  // The lease is gone.
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{user:42}:l"}).value_or(""),
            "0");
}

TEST_F(RedisTierTest, BinaryValuesAndKeysRoundTrip) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  const std::string key("k\0{x}%\n", 7);
  const std::string value("\0\xff\r\n{}", 6);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup(key, "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  ASSERT_EQ(lookup->lease, Lease::kGranted);
  ASSERT_TRUE(
      tier->Fill(key, lookup->lease_token, ValueFill(value)).value_or(false));
  lookup = tier->Lookup(key, "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  ASSERT_TRUE(lookup->record.has_value());
  EXPECT_EQ(lookup->record->value.value_or(""), value);
  // And the empty key is a key like any other.
  lookup = tier->Lookup("", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->lease, Lease::kGranted);
}

TEST_F(RedisTierTest, EveryFillAndPutGetsANewVersion) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  std::vector<std::string> versions;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(tier->Put("k", ValueFill("same"), 0).ok());
    absl::StatusOr<SharedLookup> lookup =
        tier->Lookup("k", "", absl::ZeroDuration());
    ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
    versions.push_back(lookup->record->version);
    // Refresh: pass the version we have, take the lease, fill.
    lookup = tier->Lookup("k", versions.back(), absl::ZeroDuration());
    ASSERT_TRUE(lookup.ok());
    ASSERT_EQ(lookup->lease, Lease::kGranted);
    ASSERT_TRUE(tier->Fill("k", lookup->lease_token, ValueFill("same"))
                    .value_or(false));
    lookup = tier->Lookup("k", "", absl::ZeroDuration());
    ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
    versions.push_back(lookup->record->version);
  }
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(std::unique(versions.begin(), versions.end()), versions.end());
}

TEST_F(RedisTierTest, FillAfterInvalidateStoresNothing) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  ASSERT_TRUE(tier->Invalidate("k", 0).ok());
  absl::StatusOr<bool> stored =
      tier->Fill("k", lookup->lease_token, ValueFill("old"));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_FALSE(*stored);
  absl::StatusOr<SharedLookup> after =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->record.has_value());
  EXPECT_EQ(after->lease, Lease::kGranted);
}

TEST_F(RedisTierTest, FillAfterPutStoresNothingAndThePutWins) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  ASSERT_TRUE(tier->Put("k", ValueFill("written"), 0).ok());
  EXPECT_EQ(
      tier->Fill("k", lookup->lease_token, ValueFill("loaded")).value_or(true),
      false);
  absl::StatusOr<SharedLookup> after =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(after.ok() && after->record.has_value());
  EXPECT_EQ(after->lease, Lease::kNotNeeded);
  EXPECT_EQ(after->record->value.value_or(""), "written");
}

TEST_F(RedisTierTest, FillWithAnotherTokenStoresNothing) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  EXPECT_EQ(tier->Fill("k", "not-the-token", ValueFill("v")).value_or(true),
            false);
  EXPECT_EQ(
      tier->Fill("other", lookup->lease_token, ValueFill("v")).value_or(true),
      false);
  // The real holder still fills.
  EXPECT_EQ(
      tier->Fill("k", lookup->lease_token, ValueFill("v")).value_or(false),
      true);
  // A token fills once.
  EXPECT_EQ(
      tier->Fill("k", lookup->lease_token, ValueFill("v2")).value_or(true),
      false);
}

TEST_F(RedisTierTest, ReleaseGrantsTheNextAskerAtOnce) {
  std::shared_ptr<RedisTier> a = Connect();
  std::shared_ptr<RedisTier> b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<SharedLookup> held = a->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);
  absl::StatusOr<SharedLookup> waiting = b->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->lease, Lease::kHeldElsewhere);

  ASSERT_TRUE(a->Release("k", held->lease_token).ok());
  absl::StatusOr<SharedLookup> next = b->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->lease, Lease::kGranted);
  // Releasing a lost lease is not an error, and does not touch the new one.
  EXPECT_TRUE(a->Release("k", held->lease_token).ok());
  EXPECT_EQ(a->Lookup("k", "", absl::ZeroDuration())->lease,
            Lease::kHeldElsewhere);
}

TEST_F(RedisTierTest, HavingTheStoredVersionOffersTheLeaseThoughFresh) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
  absl::StatusOr<SharedLookup> plain =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(plain.ok() && plain->record.has_value());
  EXPECT_EQ(plain->lease, Lease::kNotNeeded);

  absl::StatusOr<SharedLookup> other =
      tier->Lookup("k", "some-other-version", absl::ZeroDuration());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->lease, Lease::kNotNeeded);

  absl::StatusOr<SharedLookup> same =
      tier->Lookup("k", plain->record->version, absl::ZeroDuration());
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->lease, Lease::kGranted);
  ASSERT_TRUE(same->record.has_value());
  EXPECT_EQ(same->record->version, plain->record->version);
}

TEST_F(RedisTierTest, AStaleValueOffersTheLeaseAndIsStillReturned) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("k", ValueFill("v", absl::Milliseconds(1)), 0).ok());
  absl::SleepFor(absl::Milliseconds(20));
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->lease, Lease::kGranted);
  ASSERT_TRUE(lookup->record.has_value());
  EXPECT_GE(lookup->record->age, absl::Milliseconds(1));
  EXPECT_EQ(lookup->record->value.value_or(""), "v");
}

TEST_F(RedisTierTest, ErrorFillsRoundTripAndAreServedWhileKept) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  SharedFill fill;
  fill.value = absl::NotFoundError("no such user: 42");
  fill.keep_for = absl::Seconds(30);
  ASSERT_TRUE(tier->Fill("k", lookup->lease_token, fill).value_or(false));

  // Fresh for zero, yet served (not re-leased) while younger than keep_for,
  // whatever version the asker has.
  for (std::string_view have : {"", "x"}) {
    absl::StatusOr<SharedLookup> again =
        tier->Lookup("k", have, absl::ZeroDuration());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->lease, Lease::kNotNeeded);
    ASSERT_TRUE(again->record.has_value());
    EXPECT_EQ(again->record->value.status(),
              absl::NotFoundError("no such user: 42"));
    EXPECT_EQ(again->record->keep_for, absl::Seconds(30));
    EXPECT_EQ(again->record->fresh_for, absl::ZeroDuration());
  }
}

TEST_F(RedisTierTest, ARecordIsGoneOnceOlderThanKeepFor) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(
      tier->Put("k",
                ValueFill("v", absl::Milliseconds(50), absl::Milliseconds(200)),
                0)
          .ok());
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok());
  // Generous: the point is that it goes, not how fast.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (lookup.ok() && lookup->record.has_value() && absl::Now() < give_up) {
    EXPECT_LT(lookup->record->age, absl::Milliseconds(200));
    absl::SleepFor(absl::Milliseconds(20));
    lookup = tier->Lookup("k", "", absl::ZeroDuration());
  }
  ASSERT_TRUE(lookup.ok());
  EXPECT_FALSE(lookup->record.has_value());
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{k}:v"}).value_or(""), "0");
}

TEST_F(RedisTierTest, ARecordWithoutKeepForIsAcceptedButNotStored) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("k", ValueFill("old"), 0).ok());
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "x", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok());
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kNotNeeded);
  ASSERT_TRUE(tier->Invalidate("k", 0).ok());
  lookup = tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  EXPECT_TRUE(
      tier->Fill("k", lookup->lease_token,
                 ValueFill("v", absl::ZeroDuration(), absl::ZeroDuration()))
          .value_or(false));
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{k}:v"}).value_or(""), "0");
}

TEST_F(RedisTierTest, AForeverRecordHasNoExpiry) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put("k",
                        ValueFill("v", absl::InfiniteDuration(),
                                  absl::InfiniteDuration()),
                        0)
                  .ok());
  EXPECT_EQ(server_->Command({"PTTL", "test:v1:{k}:v"}).value_or(""), "-1");
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
  EXPECT_EQ(lookup->lease, Lease::kNotNeeded);
  EXPECT_EQ(lookup->record->fresh_for, absl::InfiniteDuration());
  EXPECT_EQ(lookup->record->keep_for, absl::InfiniteDuration());
}

TEST_F(RedisTierTest, OversizedValuesAreRefusedAndTheLeaseIsGivenUp) {
  RedisOptions options = Options();
  options.max_value_bytes = 1000;
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->max_value_bytes(), 1000u);
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  absl::StatusOr<bool> stored =
      tier->Fill("k", lookup->lease_token, ValueFill(std::string(1001, 'x')));
  EXPECT_EQ(stored.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stored.status().message(), HasSubstr("max_value_bytes"));
  EXPECT_EQ(tier->Put("k", ValueFill(std::string(1001, 'x')), 0).code(),
            absl::StatusCode::kInvalidArgument);
  SharedFill long_error;
  long_error.value = absl::InternalError(std::string(1001, 'e'));
  long_error.keep_for = absl::Seconds(1);
  EXPECT_EQ(tier->Put("k", long_error, 0).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing stored, and the lease is free again.
  absl::StatusOr<SharedLookup> after =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->record.has_value());
  EXPECT_EQ(after->lease, Lease::kGranted);
  // The limit is inclusive.
  EXPECT_TRUE(
      tier->Fill("k", after->lease_token, ValueFill(std::string(1000, 'x')))
          .value_or(false));
}

// A process with a larger max_value_bytes wrote a value this one may not
// take: its Lookup measures it on the server and transfers none of it (Redis
// allows values of up to 512 MB), takes no lease and returns DataLoss, which
// a cache takes as a miss (as for a value it cannot decode).
TEST_F(RedisTierTest, ALookupNeverTransfersAValueOverItsMaxValueBytes) {
  RedisOptions large = Options();
  large.max_value_bytes = size_t{4} << 20;
  std::shared_ptr<RedisTier> writer = Connect(large);
  std::shared_ptr<RedisTier> reader = Connect();  // 1 MiB.
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  constexpr size_t kBig = size_t{2} << 20;
  ASSERT_TRUE(writer->Put("big", ValueFill(std::string(kBig, 'x')), 0).ok());
  const std::string version =
      server_->Command({"HGET", "test:v1:{big}:v", "version"}).value_or("");
  ASSERT_FALSE(version.empty());

  const uint64_t before = server_->NetOutputBytes().value_or(0);
  absl::StatusOr<SharedLookup> lookup =
      reader->Lookup("big", "", absl::Seconds(30));
  const uint64_t after = server_->NetOutputBytes().value_or(0);
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(lookup.status().message(),
              HasSubstr(absl::StrCat(kBig, " bytes, over max_value_bytes")));
  // The reply (and the INFO replies around it) is a few hundred bytes, not
  // 2 MiB.
  EXPECT_GT(after, before);
  EXPECT_LT(after - before, 64u << 10);
  RedisTierStats stats = reader->stats();
  EXPECT_EQ(stats.oversized_records, 1u);
  EXPECT_EQ(stats.bad_records, 0u);
  EXPECT_EQ(stats.bad_replies, 0u);
  // No lease taken: this process could not fill over the value anyway, and
  // the processes that can read it are not kept waiting.
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{big}:l"}).value_or(""), "0");
  EXPECT_EQ(
      server_->Command({"HGET", "test:v1:{big}:v", "version"}).value_or(""),
      version);

  // The measure sees a transferred value: the writer's Lookup reads it.
  const uint64_t writer_before = server_->NetOutputBytes().value_or(0);
  lookup = writer->Lookup("big", "", absl::Seconds(30));
  const uint64_t writer_after = server_->NetOutputBytes().value_or(0);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  ASSERT_TRUE(lookup->record.has_value());
  EXPECT_EQ(lookup->lease, Lease::kNotNeeded);
  EXPECT_EQ(lookup->record->value.value_or("").size(), kBig);
  EXPECT_GT(writer_after - writer_before, kBig);
  EXPECT_EQ(writer->stats().oversized_records, 0u);

  // The limit is inclusive, and a stale value is measured too.
  RedisOptions exact = Options();
  exact.max_value_bytes = kBig;
  std::shared_ptr<RedisTier> exact_reader = Connect(exact);
  ASSERT_NE(exact_reader, nullptr);
  lookup = exact_reader->Lookup("big", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->record->value.value_or("").size(), kBig);
  ASSERT_TRUE(writer
                  ->Put("stale",
                        ValueFill(std::string(kBig, 's'), absl::ZeroDuration(),
                                  absl::Seconds(20)),
                        0)
                  .ok());
  lookup = reader->Lookup("stale", "", absl::Seconds(30));
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{stale}:l"}).value_or(""),
            "0");
  EXPECT_EQ(reader->stats().oversized_records, 2u);
}

// A remembered error is served whatever the length of its message (its code
// is what counts), but a message over max_value_bytes is not transferred.
TEST_F(RedisTierTest, ARememberedErrorWithAMessageOverTheLimitKeepsItsCode) {
  RedisOptions large = Options();
  large.max_value_bytes = size_t{1} << 20;
  std::shared_ptr<RedisTier> writer = Connect(large);
  RedisOptions small = Options();
  small.max_value_bytes = 1000;
  std::shared_ptr<RedisTier> reader = Connect(small);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  constexpr size_t kLong = 256 << 10;
  SharedFill error;
  error.value = absl::UnavailableError(std::string(kLong, 'e'));
  error.keep_for = absl::Seconds(20);
  ASSERT_TRUE(writer->Put("err", error, 0).ok());

  const uint64_t before = server_->NetOutputBytes().value_or(0);
  absl::StatusOr<SharedLookup> lookup =
      reader->Lookup("err", "", absl::Seconds(30));
  const uint64_t after = server_->NetOutputBytes().value_or(0);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->lease, Lease::kNotNeeded);
  ASSERT_TRUE(lookup->record.has_value());
  EXPECT_EQ(lookup->record->value.status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_THAT(lookup->record->value.status().message(),
              HasSubstr(absl::StrCat(kLong, " bytes is over max_value_bytes")));
  EXPECT_LT(after - before, 64u << 10);
  EXPECT_EQ(reader->stats().oversized_records, 0u);
  // Within the limit, the message is the one stored.
  lookup = writer->Lookup("err", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
  EXPECT_EQ(lookup->record->value.status().message().size(), kLong);
}

TEST_F(RedisTierTest, KeysAndLeaseShareAHashTag) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Lookup("a{b}c", "", absl::Seconds(30)).ok());
  ASSERT_TRUE(tier->Put("user:1", ValueFill("v"), 0).ok());
  ASSERT_TRUE(tier->Lookup("", "", absl::Seconds(30)).ok());
  absl::StatusOr<std::string> keys = server_->Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  std::vector<std::string> sorted = absl::StrSplit(*keys, '\n');
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAre("test:v1:{%}:l", "test:v1:{a%7Bb%7Dc}:l",
                                  "test:v1:{user:1}:v"));
}

// ---- Keeping a lease alive, and losing a holder -----------------------------

TEST_F(RedisTierTest, ALivingHolderKeepsItsLeaseUpToHoldFor) {
  // Extended every 500 ms: a busy machine may delay an extension a little.
  RedisOptions options = Options();
  options.lease_for = absl::Seconds(1);
  std::shared_ptr<RedisTier> holder = Connect(options);
  std::shared_ptr<RedisTier> other = Connect(options);
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(other, nullptr);
  const absl::Time granted_at = absl::Now();
  absl::StatusOr<SharedLookup> held = holder->Lookup("k", "", absl::Seconds(3));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);

  // Well past one lease period, the lease is still held (extended).
  std::optional<absl::Time> regranted_at;
  while (absl::Now() - granted_at < absl::Seconds(10)) {
    absl::StatusOr<SharedLookup> ask =
        other->Lookup("k", "", absl::ZeroDuration());
    ASSERT_TRUE(ask.ok()) << ask.status();
    if (ask->lease == Lease::kGranted) {
      regranted_at = absl::Now();
      break;
    }
    EXPECT_LE(ask->lease_remaining, options.lease_for);
    absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_TRUE(regranted_at.has_value()) << "the hold never ended";
  // Not before hold_for (3 s): the holder lived throughout.
  EXPECT_GE(*regranted_at - granted_at, absl::Seconds(3));
  EXPECT_GE(holder->stats().leases_extended, 2u);
}

TEST_F(RedisTierTest, FillEndsTheExtensions) {
  RedisOptions options = Options();
  options.lease_for = absl::Seconds(1);
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<SharedLookup> held = tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);
  ASSERT_TRUE(
      tier->Fill("k", held->lease_token, ValueFill("v")).value_or(false));
  const uint64_t extended = tier->stats().leases_extended;
  // Three half periods: three extensions, had the fill not ended them.
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(tier->stats().leases_extended, extended);
  EXPECT_EQ(server_->Command({"EXISTS", "test:v1:{k}:l"}).value_or(""), "0");
}

TEST_F(RedisTierTest, AKilledHolderCostsAtMostOneLeasePeriod) {
  const absl::Duration lease_for = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start({PADDOCK_TIER_CHILD, "hold-lease", server_->address(),
                           std::string(kPrefix), "k", "60000",
                           absl::StrCat(absl::ToInt64Milliseconds(lease_for))});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_EQ(*line, "granted");

  RedisOptions options = Options();
  options.lease_for = lease_for;
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  // The child holds (and extends) it past a lease period.
  absl::SleepFor(lease_for * 1.5);
  absl::StatusOr<SharedLookup> ask =
      tier->Lookup("k", "", absl::ZeroDuration());
  ASSERT_TRUE(ask.ok());
  ASSERT_EQ(ask->lease, Lease::kHeldElsewhere)
      << "the child's lease lapsed while it lived: its extensions (every "
      << lease_for / 2 << ") were late";

  (*child)->Kill();
  const absl::Time killed_at = absl::Now();
  while (absl::Now() - killed_at < absl::Seconds(10)) {
    ask = tier->Lookup("k", "", absl::ZeroDuration());
    ASSERT_TRUE(ask.ok());
    if (ask->lease == Lease::kGranted) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(ask->lease, Lease::kGranted);
  // One lease period, plus a generous margin for a busy machine.
  EXPECT_LE(absl::Now() - killed_at, lease_for + absl::Seconds(3));
}

// ---- Change notifications ---------------------------------------------------

TEST_F(RedisTierTest, PutAndInvalidateNotifyEveryOtherSubscription) {
  std::shared_ptr<RedisTier> a = Connect();
  std::shared_ptr<RedisTier> b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  RecordingSubscriber a1, a2, b1;
  auto sub_a1 = a->Subscribe(&a1);
  auto sub_a2 = a->Subscribe(&a2);
  auto sub_b1 = b->Subscribe(&b1);
  EXPECT_NE(sub_a1->id(), 0u);
  EXPECT_NE(sub_a1->id(), sub_a2->id());
  EXPECT_NE(sub_a1->id(), sub_b1->id());

  const absl::Time put_at = absl::Now();
  ASSERT_TRUE(a->Put("k1", ValueFill("v"), sub_a1->id()).ok());
  ASSERT_TRUE(a2.WaitForKeys(1));
  ASSERT_TRUE(b1.WaitForKeys(1));
  // Typically well under 100 ms; bounded generously.
  EXPECT_LT(absl::Now() - put_at, absl::Seconds(2));

  ASSERT_TRUE(b->Invalidate("k2", sub_b1->id()).ok());
  ASSERT_TRUE(a1.WaitForKeys(1));
  ASSERT_TRUE(a2.WaitForKeys(2));
  // Messages arrive in order: had a1 been told of its own put, "k1" would
  // come before "k2".
  EXPECT_THAT(a1.keys(), ElementsAre("k2"));
  EXPECT_THAT(a2.keys(), ElementsAre("k1", "k2"));
  EXPECT_THAT(b1.keys(), ElementsAre("k1"));

  // Fills and releases are not invalidations; origin 0 tells everyone.
  absl::StatusOr<SharedLookup> lookup = a->Lookup("k3", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->lease == Lease::kGranted);
  ASSERT_TRUE(
      a->Fill("k3", lookup->lease_token, ValueFill("v")).value_or(false));
  ASSERT_TRUE(a->Invalidate("k4", 0).ok());
  ASSERT_TRUE(a1.WaitForKeys(2));
  ASSERT_TRUE(b1.WaitForKeys(2));
  EXPECT_THAT(a1.keys(), ElementsAre("k2", "k4"));
  EXPECT_THAT(b1.keys(), ElementsAre("k1", "k4"));
  EXPECT_EQ(a1.missed() + a2.missed() + b1.missed(), 0);
}

TEST_F(RedisTierTest, AnotherProcessIsNotified) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start({PADDOCK_TIER_CHILD, "subscribe", server_->address(),
                           std::string(kPrefix)});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<std::string> ready = (*child)->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_TRUE(absl::StartsWith(*ready, "ready ")) << *ready;
  const uint64_t child_id = std::stoull(ready->substr(6));

  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  RecordingSubscriber mine;
  auto subscription = tier->Subscribe(&mine);
  EXPECT_NE(subscription->id(), child_id);

  ASSERT_TRUE(
      tier->Put("from parent", ValueFill("v"), subscription->id()).ok());
  absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Seconds(2));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "invalidate from parent");
  ASSERT_TRUE(tier->Invalidate("again", subscription->id()).ok());
  line = (*child)->ReadLine(absl::Seconds(2));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "invalidate again");
  EXPECT_TRUE(mine.keys().empty());
}

TEST_F(RedisTierTest, SubscriptionIdsDifferAcrossProcesses) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start({PADDOCK_TIER_CHILD, "subscribe",
                             server_->address(), std::string(kPrefix)});
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<std::string> ready = (*child)->ReadLine(absl::Seconds(10));
    ASSERT_TRUE(ready.ok() && absl::StartsWith(*ready, "ready "));
    ids.push_back(std::stoull(ready->substr(6)));
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_NE(ids[0], ids[2]);
}

TEST_F(RedisTierTest, AwaitChangeWakesOnAFillInAnotherTier) {
  std::shared_ptr<RedisTier> holder = Connect();
  std::shared_ptr<RedisTier> waiter = Connect();
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(waiter, nullptr);
  absl::StatusOr<SharedLookup> held =
      holder->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);

  std::atomic<bool> woke{false};
  absl::Duration waited;
  std::thread waiting([&] {
    absl::StatusOr<SharedLookup> ask =
        waiter->Lookup("k", "", absl::Seconds(30));
    ASSERT_TRUE(ask.ok() && ask->lease == Lease::kHeldElsewhere);
    const absl::Time start = absl::Now();
    woke = waiter->AwaitChange("k", absl::Seconds(30));
    waited = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(
      holder->Fill("k", held->lease_token, ValueFill("v")).value_or(false));
  waiting.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(waited, absl::Seconds(10));
  absl::StatusOr<SharedLookup> after =
      waiter->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->lease, Lease::kNotNeeded);
}

TEST_F(RedisTierTest, AwaitChangeSeesAFillBetweenLookupAndWait) {
  std::shared_ptr<RedisTier> holder = Connect();
  std::shared_ptr<RedisTier> waiter = Connect();
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(waiter, nullptr);
  absl::StatusOr<SharedLookup> held =
      holder->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);
  absl::StatusOr<SharedLookup> ask = waiter->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(ask.ok() && ask->lease == Lease::kHeldElsewhere);
  // The fill lands before the waiter starts waiting.
  ASSERT_TRUE(
      holder->Fill("k", held->lease_token, ValueFill("v")).value_or(false));
  EXPECT_TRUE(waiter->AwaitChange("k", absl::Seconds(30)));
}

TEST_F(RedisTierTest, AwaitChangeWakesOnARelease) {
  std::shared_ptr<RedisTier> holder = Connect();
  std::shared_ptr<RedisTier> waiter = Connect();
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(waiter, nullptr);
  absl::StatusOr<SharedLookup> held =
      holder->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(held.ok() && held->lease == Lease::kGranted);
  std::atomic<bool> woke{false};
  std::thread waiting([&] {
    absl::StatusOr<SharedLookup> ask =
        waiter->Lookup("k", "", absl::Seconds(30));
    ASSERT_TRUE(ask.ok() && ask->lease == Lease::kHeldElsewhere);
    woke = waiter->AwaitChange("k", absl::Seconds(30));
  });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(holder->Release("k", held->lease_token).ok());
  waiting.join();
  EXPECT_TRUE(woke);
}

TEST_F(RedisTierTest, AwaitChangeIgnoresOtherKeysAndTimesOut) {
  std::shared_ptr<RedisTier> tier = Connect();
  std::shared_ptr<RedisTier> other = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->Lookup("k", "", absl::Seconds(30)).ok());
  absl::StatusOr<SharedLookup> ask = tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(ask.ok() && ask->lease == Lease::kHeldElsewhere);
  ASSERT_TRUE(other->Put("unrelated", ValueFill("v"), 0).ok());
  const absl::Time start = absl::Now();
  EXPECT_FALSE(tier->AwaitChange("k", absl::Milliseconds(300)));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(300));
  EXPECT_LT(waited, absl::Seconds(5));
  EXPECT_FALSE(tier->AwaitChange("k", absl::ZeroDuration()));
}

// ---- Subscriptions ----------------------------------------------------------

TEST_F(RedisTierTest, DestroyingASubscriptionWaitsForItsCallback) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  struct Slow : SharedTier::Subscriber {
    std::atomic<bool> entered{false};
    std::atomic<bool> finished{false};
    void OnInvalidate(std::string_view) override {
      entered = true;
      absl::SleepFor(absl::Milliseconds(300));
      finished = true;
    }
    void OnMissedInvalidations() override {}
  } slow;
  auto subscription = tier->Subscribe(&slow);
  ASSERT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!slow.entered && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(slow.entered);
  subscription.reset();
  EXPECT_TRUE(slow.finished);
}

TEST_F(RedisTierTest, ASubscriptionMayEndInItsOwnCallback) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  struct SelfEnding : SharedTier::Subscriber {
    std::unique_ptr<SharedTier::Subscription> subscription;
    std::atomic<int> calls{0};
    void OnInvalidate(std::string_view) override {
      ++calls;
      subscription.reset();
    }
    void OnMissedInvalidations() override {}
  } self_ending;
  RecordingSubscriber witness;
  self_ending.subscription = tier->Subscribe(&self_ending);
  auto witness_subscription = tier->Subscribe(&witness);
  ASSERT_TRUE(tier->Put("k1", ValueFill("v"), 0).ok());
  ASSERT_TRUE(tier->Put("k2", ValueFill("v"), 0).ok());
  ASSERT_TRUE(witness.WaitForKeys(2));
  EXPECT_EQ(self_ending.calls, 1);
}

TEST_F(RedisTierTest, ASubscriptionMayOutliveItsTier) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  RecordingSubscriber subscriber;
  auto subscription = tier->Subscribe(&subscriber);
  tier.reset();
  EXPECT_NE(subscription->id(), 0u);
  subscription.reset();
}

// The connections subscribed to a channel on `server`.
int SubscribedConnections(RedisServer& server) {
  absl::StatusOr<std::string> list =
      server.Command({"CLIENT", "LIST", "TYPE", "pubsub"});
  EXPECT_TRUE(list.ok()) << list.status();
  int n = 0;
  for (absl::string_view line : absl::StrSplit(list.value_or(""), '\n')) {
    if (!line.empty()) ++n;
  }
  return n;
}

// Waits (up to `timeout`) until `n` connections are subscribed on `server`.
bool WaitForSubscribedConnections(RedisServer& server, int n,
                                  absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (SubscribedConnections(server) != n) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// What a callback ends, and in which order, when it drops its tier.
enum class DropOrder {
  kSubscriptionThenTier,
  kTierThenSubscription,
  kTierOnly,  // The subscription outlives the tier.
};

// Holds the only reference to a tier, and its own subscription to it, and
// drops them from its first callback of the chosen kind, as a user's
// subscriber may do to rebuild its connection: the tier is then destroyed
// on its own subscription thread, inside the callback.
class TierDroppingSubscriber : public SharedTier::Subscriber {
 public:
  TierDroppingSubscriber(DropOrder order, bool on_missed)
      : order_(order), on_missed_(on_missed) {}

  void OnInvalidate(std::string_view) override {
    if (!on_missed_) Drop();
  }
  void OnMissedInvalidations() override {
    if (on_missed_) Drop();
  }

  // Takes the only reference to `tier` and subscribes to it.
  void Hold(std::shared_ptr<RedisTier> tier) {
    std::unique_ptr<SharedTier::Subscription> subscription =
        tier->Subscribe(this);
    std::lock_guard<std::mutex> lock(mu_);
    tier_ = std::move(tier);
    subscription_ = std::move(subscription);
  }
  // Waits (up to `timeout`) until the tier's destructor has returned.
  bool WaitForDropped(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return dropped_; });
  }
  // Ends the subscription if the callback left it (kTierOnly).
  void EndSubscription() {
    std::unique_ptr<SharedTier::Subscription> subscription;
    {
      std::lock_guard<std::mutex> lock(mu_);
      subscription = std::move(subscription_);
    }
  }
  // Callbacks of the chosen kind after the drop.
  int late_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return late_calls_;
  }

 private:
  void Drop() {
    std::shared_ptr<RedisTier> tier;
    std::unique_ptr<SharedTier::Subscription> subscription;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (dropped_) {
        ++late_calls_;
        return;
      }
      tier = std::move(tier_);
      if (order_ != DropOrder::kTierOnly) {
        subscription = std::move(subscription_);
      }
    }
    // Without the lock: the tier's destructor may wait for its threads.
    if (order_ == DropOrder::kSubscriptionThenTier) subscription.reset();
    tier.reset();  // The last reference: ~RedisTier runs here.
    subscription.reset();
    std::lock_guard<std::mutex> lock(mu_);
    dropped_ = true;
    cv_.notify_all();
  }

  const DropOrder order_;
  const bool on_missed_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<RedisTier> tier_;
  std::unique_ptr<SharedTier::Subscription> subscription_;
  bool dropped_ = false;
  int late_calls_ = 0;
};

class RedisTierDroppedByCallbackTest
    : public RedisTierTest,
      public ::testing::WithParamInterface<DropOrder> {
 protected:
  // Checks that the dropped tier's subscription thread has ended (its
  // connection is closed, leaving `a`'s only) and that `a` works on:
  // another tier hears its invalidations.
  void ExpectTheRestCarriesOn(RedisTier& a) {
    // `a` resubscribes after a CLIENT KILL; only then does one connection
    // mean that the dropped tier's is closed.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!a.subscribed() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(a.subscribed());
    EXPECT_TRUE(WaitForSubscribedConnections(*server_, 1, absl::Seconds(10)));
    std::shared_ptr<RedisTier> c = Connect();
    ASSERT_NE(c, nullptr);
    RecordingSubscriber witness;
    auto witness_subscription = c->Subscribe(&witness);
    ASSERT_TRUE(a.Invalidate("after", 0).ok());
    ASSERT_TRUE(witness.WaitForKeys(1, absl::Seconds(10)));
    EXPECT_THAT(witness.keys(), ElementsAre("after"));
  }
};

TEST_P(RedisTierDroppedByCallbackTest, OnInvalidateMayDropTheLastReference) {
  std::shared_ptr<RedisTier> a = Connect();
  ASSERT_NE(a, nullptr);
  TierDroppingSubscriber owner(GetParam(), /*on_missed=*/false);
  std::shared_ptr<RedisTier> b = Connect();
  ASSERT_NE(b, nullptr);
  owner.Hold(std::move(b));
  ASSERT_EQ(SubscribedConnections(*server_), 2);

  ASSERT_TRUE(a->Invalidate("k1", 0).ok());
  ASSERT_TRUE(a->Put("k2", ValueFill("v"), 0).ok());
  ASSERT_TRUE(owner.WaitForDropped(absl::Seconds(10)));
  owner.EndSubscription();
  ExpectTheRestCarriesOn(*a);
  // The second message, if read with the first, reached nobody: the
  // subscription thread stops once the callback that destroyed it returns.
  EXPECT_EQ(owner.late_calls(), 0);
}

TEST_P(RedisTierDroppedByCallbackTest,
       OnMissedInvalidationsMayDropTheLastReference) {
  std::shared_ptr<RedisTier> a = Connect();
  ASSERT_NE(a, nullptr);
  TierDroppingSubscriber owner(GetParam(), /*on_missed=*/true);
  std::shared_ptr<RedisTier> b = Connect();
  ASSERT_NE(b, nullptr);
  owner.Hold(std::move(b));
  ASSERT_EQ(SubscribedConnections(*server_), 2);

  // Both tiers lose their subscription, resubscribe and call
  // OnMissedInvalidations.
  ASSERT_TRUE(server_->Command({"CLIENT", "KILL", "TYPE", "pubsub"}).ok());
  ASSERT_TRUE(owner.WaitForDropped(absl::Seconds(10)));
  owner.EndSubscription();
  ExpectTheRestCarriesOn(*a);
  EXPECT_EQ(owner.late_calls(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Orders, RedisTierDroppedByCallbackTest,
    ::testing::Values(DropOrder::kSubscriptionThenTier,
                      DropOrder::kTierThenSubscription, DropOrder::kTierOnly),
    [](const ::testing::TestParamInfo<DropOrder>& info) -> std::string {
      switch (info.param) {
        case DropOrder::kSubscriptionThenTier:
          return "SubscriptionThenTier";
        case DropOrder::kTierThenSubscription:
          return "TierThenSubscription";
        case DropOrder::kTierOnly:
          return "TierOnly";
      }
      return "Unknown";
    });

// ---- Records written by someone else ----------------------------------------

struct Garbage {
  const char* name;
  std::vector<std::string> command;  // Written at the record key "k".
};

class RedisTierGarbageTest : public RedisTierTest,
                             public ::testing::WithParamInterface<Garbage> {};

TEST_P(RedisTierGarbageTest, IsNoRecordAndTheNextFillReplacesIt) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(server_->Command(GetParam().command).ok());

  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->record.has_value());
  ASSERT_EQ(lookup->lease, Lease::kGranted);
  EXPECT_EQ(tier->stats().bad_records, 1u);
  ASSERT_TRUE(
      tier->Fill("k", lookup->lease_token, ValueFill("v")).value_or(false));
  lookup = tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok() && lookup->record.has_value());
  EXPECT_EQ(lookup->record->value.value_or(""), "v");
}

std::vector<std::string> Hash(std::vector<std::string> fields) {
  std::vector<std::string> command = {"HSET", "test:v1:{k}:v"};
  command.insert(command.end(), fields.begin(), fields.end());
  return command;
}

const std::vector<std::string> kGoodFields = {
    "version",           "v1",         "stored_at_us", "1",
    "fresh_us",          "1000000000", "keep_us",      "1000000000000000",
    "serve_on_error_us", "0",          "load_us",      "0"};

std::vector<std::string> GoodHashWith(std::vector<std::string> changes) {
  std::vector<std::string> fields = kGoodFields;
  for (size_t i = 0; i + 1 < changes.size(); i += 2) {
    bool replaced = false;
    for (size_t j = 0; j + 1 < fields.size(); j += 2) {
      if (fields[j] == changes[i]) {
        fields[j + 1] = changes[i + 1];
        replaced = true;
      }
    }
    if (!replaced) {
      fields.push_back(changes[i]);
      fields.push_back(changes[i + 1]);
    }
  }
  return Hash(fields);
}

INSTANTIATE_TEST_SUITE_P(
    Garbage, RedisTierGarbageTest,
    ::testing::Values(
        Garbage{"AString", {"SET", "test:v1:{k}:v", "garbage"}},
        Garbage{"AList", {"RPUSH", "test:v1:{k}:v", "a", "b"}},
        Garbage{"ASet", {"SADD", "test:v1:{k}:v", "a"}},
        Garbage{"AHashOfOtherFields", Hash({"foo", "bar"})},
        Garbage{"NoVersion", GoodHashWith({"version", "", "value", "v"})},
        Garbage{"NoValueNorError", GoodHashWith({})},
        Garbage{"ValueAndError", GoodHashWith({"value", "v", "error_code", "5",
                                               "error_message", "m"})},
        Garbage{"ErrorCodeZero",
                GoodHashWith({"error_code", "0", "error_message", "m"})},
        Garbage{"ErrorCodeTooBig",
                GoodHashWith({"error_code", "17", "error_message", "m"})},
        Garbage{"ErrorWithoutMessage", GoodHashWith({"error_code", "5"})},
        Garbage{"NonNumericTime",
                GoodHashWith({"stored_at_us", "yesterday", "value", "v"})},
        Garbage{"NegativeFresh",
                GoodHashWith({"fresh_us", "-5", "value", "v"})},
        Garbage{"FractionalKeep",
                GoodHashWith({"keep_us", "1.5", "value", "v"})},
        Garbage{"InfiniteKeep", GoodHashWith({"keep_us", "inf", "value", "v"})},
        Garbage{"HexLoad", GoodHashWith({"load_us", "0x10", "value", "v"})},
        Garbage{"HugeNumber",
                GoodHashWith({"fresh_us", "123456789012345678901234567890",
                              "value", "v"})}),
    [](const ::testing::TestParamInfo<Garbage>& info) {
      return std::string(info.param.name);
    });

TEST_F(RedisTierTest, AHandWrittenGoodRecordIsRead) {
  // The same shape as the garbage cases, well formed: the test data is right.
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<std::string> time = server_->Command({"TIME"});
  ASSERT_TRUE(time.ok());
  const std::vector<std::string> parts = absl::StrSplit(*time, '\n');
  const std::string now_us =
      absl::StrCat(parts[0], std::string(6 - parts[1].size(), '0'), parts[1]);
  ASSERT_TRUE(
      server_->Command(GoodHashWith({"stored_at_us", now_us, "value", "hand"}))
          .ok());
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  ASSERT_TRUE(lookup->record.has_value());
  EXPECT_EQ(lookup->lease, Lease::kNotNeeded);
  EXPECT_EQ(lookup->record->value.value_or(""), "hand");
  EXPECT_EQ(lookup->record->version, "v1");
  EXPECT_EQ(tier->stats().bad_records, 0u);
}

TEST_F(RedisTierTest, ALeaseKeyOfTheWrongTypeLapsesAndIsNeverFilled) {
  RedisOptions options = Options();
  options.lease_for = absl::Milliseconds(300);
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(server_->Command({"HSET", "test:v1:{k}:l", "a", "b"}).ok());
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->lease, Lease::kHeldElsewhere);
  EXPECT_LE(lookup->lease_remaining, options.lease_for);
  EXPECT_EQ(tier->Fill("k", "", ValueFill("v")).value_or(true), false);
  EXPECT_TRUE(tier->Release("k", "").ok());
  // It was given an expiry, so it cannot block the key for good.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (lookup.ok() && lookup->lease != Lease::kGranted &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    lookup = tier->Lookup("k", "", absl::Seconds(30));
  }
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->lease, Lease::kGranted);
}

// ---- Scripts ----------------------------------------------------------------

TEST_F(RedisTierTest, ScriptsAreReloadedAfterTheServerForgetsThem) {
  std::shared_ptr<RedisTier> tier = Connect();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(server_->Command({"SCRIPT", "FLUSH"}).ok());
  absl::StatusOr<SharedLookup> lookup =
      tier->Lookup("k", "", absl::Seconds(30));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->lease, Lease::kGranted);
  EXPECT_EQ(tier->stats().script_loads, 1u);
  ASSERT_TRUE(server_->Command({"SCRIPT", "FLUSH"}).ok());
  EXPECT_TRUE(
      tier->Fill("k", lookup->lease_token, ValueFill("v")).value_or(false));
  EXPECT_EQ(tier->stats().script_loads, 2u);
}

// ---- Many threads -----------------------------------------------------------

TEST_F(RedisTierTest, ManyThreadsOnAFewKeysKeepTheInvariants) {
  RedisOptions options = Options();
  options.pool_size = 3;  // Fewer connections than threads: they queue.
  options.lease_for = absl::Milliseconds(500);
  std::shared_ptr<RedisTier> a = Connect(options);
  std::shared_ptr<RedisTier> b = Connect(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  RecordingSubscriber subscriber;
  auto subscription = b->Subscribe(&subscriber);

  constexpr int kThreads = 8;
  constexpr int kRounds = 60;
  std::atomic<int> errors{0};
  std::atomic<int> fills{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RedisTier& tier = t % 2 == 0 ? *a : *b;
      for (int i = 0; i < kRounds; ++i) {
        const std::string key = absl::StrCat("key", (t + i) % 3);
        absl::StatusOr<SharedLookup> lookup =
            tier.Lookup(key, "", absl::Seconds(1));
        if (!lookup.ok()) {
          ++errors;
          continue;
        }
        switch (lookup->lease) {
          case Lease::kGranted:
            if (i % 4 == 0) {
              if (!tier.Release(key, lookup->lease_token).ok()) ++errors;
            } else {
              absl::StatusOr<bool> stored = tier.Fill(
                  key, lookup->lease_token,
                  ValueFill("v", absl::Milliseconds(5), absl::Seconds(1)));
              if (!stored.ok()) ++errors;
              if (stored.value_or(false)) ++fills;
            }
            break;
          case Lease::kHeldElsewhere:
            tier.AwaitChange(key, absl::Milliseconds(5));
            break;
          case Lease::kNotNeeded:
            if (!lookup->record.has_value()) ++errors;
            break;
        }
        if (i % 10 == 0 && !tier.Invalidate(key, 0).ok()) ++errors;
        if (i % 15 == 0 && !tier.Put(key, ValueFill("p"), 0).ok()) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors, 0);
  EXPECT_GT(fills, 0);
  EXPECT_EQ(a->stats().failures + b->stats().failures, 0u);
}

}  // namespace
}  // namespace paddock
