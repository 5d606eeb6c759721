// The Redis tier's moving parts without a server: the circuit breaker (on a
// ManualClock), the change log behind AwaitChange, the lease keeper (with a
// fake Redis), the change feed (with a fake subscribed Redis) and the
// subscriber hub.

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/splitmix.h"
#include "paddock/shared_tier.h"
#include "redis/address.h"
#include "redis/change_feed.h"
#include "redis/change_log.h"
#include "redis/circuit_breaker.h"
#include "redis/connection.h"
#include "redis/lease_keeper.h"
#include "redis/protocol.h"
#include "redis/subscriber_hub.h"

namespace paddock::internal {
namespace {

using ::testing::ElementsAre;
using Outcome = CircuitBreaker::Outcome;

// ---- CircuitBreaker ---------------------------------------------------------

TEST(CircuitBreakerTest, OpensAfterConsecutiveFailuresOnly) {
  ManualClock clock;
  CircuitBreaker breaker(3, absl::Seconds(1), &clock);
  for (int i = 0; i < 10; ++i) {
    // Two failures, then a success: never three in a row.
    for (Outcome o :
         {Outcome::kFailure, Outcome::kFailure, Outcome::kSuccess}) {
      const CircuitBreaker::Ticket t = breaker.Admit();
      ASSERT_TRUE(t.admitted);
      EXPECT_FALSE(t.probe);
      breaker.Report(t, o);
    }
  }
  EXPECT_FALSE(breaker.open());
  for (int i = 0; i < 3; ++i)
    breaker.Report(breaker.Admit(), Outcome::kFailure);
  EXPECT_TRUE(breaker.open());
  EXPECT_EQ(breaker.opens(), 1u);
  EXPECT_FALSE(breaker.Admit().admitted);
  EXPECT_FALSE(breaker.Admit().admitted);
  EXPECT_EQ(breaker.rejections(), 2u);
}

TEST(CircuitBreakerTest, ProbesOnceAfterTheCooldownAndCloses) {
  ManualClock clock;
  CircuitBreaker breaker(1, absl::Seconds(1), &clock);
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  ASSERT_TRUE(breaker.open());
  clock.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(breaker.Admit().admitted);
  clock.Advance(absl::Milliseconds(1));
  const CircuitBreaker::Ticket probe = breaker.Admit();
  ASSERT_TRUE(probe.admitted);
  EXPECT_TRUE(probe.probe);
  // One probe at a time.
  EXPECT_FALSE(breaker.Admit().admitted);
  breaker.Report(probe, Outcome::kSuccess);
  EXPECT_FALSE(breaker.open());
  EXPECT_TRUE(breaker.Admit().admitted);
}

TEST(CircuitBreakerTest, AFailedProbeReopensForAnotherCooldown) {
  ManualClock clock;
  CircuitBreaker breaker(2, absl::Seconds(1), &clock);
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  clock.Advance(absl::Seconds(1));
  const CircuitBreaker::Ticket probe = breaker.Admit();
  ASSERT_TRUE(probe.probe);
  breaker.Report(probe, Outcome::kFailure);
  EXPECT_EQ(breaker.opens(), 2u);
  clock.Advance(absl::Milliseconds(500));
  EXPECT_FALSE(breaker.Admit().admitted);
  clock.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(breaker.Admit().probe);
}

TEST(CircuitBreakerTest, ANeutralProbeLetsTheNextCallProbe) {
  ManualClock clock;
  CircuitBreaker breaker(1, absl::Seconds(1), &clock);
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  clock.Advance(absl::Seconds(1));
  const CircuitBreaker::Ticket probe = breaker.Admit();
  ASSERT_TRUE(probe.probe);
  breaker.Report(probe, Outcome::kNeutral);
  EXPECT_TRUE(breaker.Admit().probe);
}

TEST(CircuitBreakerTest, AProbeThatNeverReportsIsReplacedAfterACooldown) {
  ManualClock clock;
  CircuitBreaker breaker(1, absl::Seconds(1), &clock);
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(breaker.Admit().probe);  // Lost: never reports.
  EXPECT_FALSE(breaker.Admit().admitted);
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(breaker.Admit().probe);
}

TEST(CircuitBreakerTest, ALateSuccessOfAnOldCallCloses) {
  ManualClock clock;
  CircuitBreaker breaker(1, absl::Seconds(1), &clock);
  const CircuitBreaker::Ticket slow = breaker.Admit();
  breaker.Report(breaker.Admit(), Outcome::kFailure);
  ASSERT_TRUE(breaker.open());
  breaker.Report(slow, Outcome::kSuccess);  // The server answered after all.
  EXPECT_FALSE(breaker.open());
}

// A probe replaced after a cooldown may still report, late: once a later
// probe has closed the breaker, its failure is one failure among others,
// not a reason to open again.
TEST(CircuitBreakerTest, ALateFailureOfAReplacedProbeDoesNotReopen) {
  ManualClock clock;
  CircuitBreaker breaker(3, absl::Seconds(1), &clock);
  for (int i = 0; i < 3; ++i)
    breaker.Report(breaker.Admit(), Outcome::kFailure);
  ASSERT_TRUE(breaker.open());
  clock.Advance(absl::Seconds(1));
  const CircuitBreaker::Ticket slow = breaker.Admit();
  ASSERT_TRUE(slow.probe);
  clock.Advance(absl::Seconds(1));
  const CircuitBreaker::Ticket replacement = breaker.Admit();
  ASSERT_TRUE(replacement.probe);
  breaker.Report(replacement, Outcome::kSuccess);
  ASSERT_FALSE(breaker.open());
  breaker.Report(slow, Outcome::kFailure);
  EXPECT_FALSE(breaker.open());
  EXPECT_EQ(breaker.opens(), 1u);
}

// ---- ChangeLog --------------------------------------------------------------

absl::Time In(absl::Duration d) { return MonotonicNow() + d; }

TEST(ChangeLogTest, SeesChangesOfItsKeySinceTheGivenSequence) {
  ChangeLog log;
  log.SetConnected(true);
  const uint64_t since = log.sequence();
  log.Record("other");
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::ZeroDuration()), true),
            ChangeLog::Wait::kTimedOut);
  log.Record("k");
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::ZeroDuration()), true),
            ChangeLog::Wait::kChanged);
  EXPECT_EQ(
      log.WaitForChange("k", log.sequence(), In(absl::ZeroDuration()), true),
      ChangeLog::Wait::kTimedOut);
}

TEST(ChangeLogTest, WakesAWaiter) {
  ChangeLog log;
  log.SetConnected(true);
  const uint64_t since = log.sequence();
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    log.Record("k");
  });
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::Seconds(30)), true),
            ChangeLog::Wait::kChanged);
  writer.join();
}

TEST(ChangeLogTest, AWaiterTooFarBehindIsToldChanged) {
  ChangeLog log;
  log.SetConnected(true);
  const uint64_t since = log.sequence();
  for (int i = 0; i < 5000; ++i) log.Record("other");
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::ZeroDuration()), true),
            ChangeLog::Wait::kChanged);
}

TEST(ChangeLogTest, DisconnectionIsReportedAndReconnectionIsAChange) {
  ChangeLog log;
  EXPECT_FALSE(log.connected());
  EXPECT_EQ(log.WaitForChange("k", log.sequence(), In(absl::Seconds(30)), true),
            ChangeLog::Wait::kDisconnected);
  const uint64_t since = log.sequence();
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::Milliseconds(10)), false),
            ChangeLog::Wait::kTimedOut);
  log.SetConnected(true);  // Messages may have been lost meanwhile.
  EXPECT_EQ(log.WaitForChange("k", since, In(absl::ZeroDuration()), true),
            ChangeLog::Wait::kChanged);
}

// ---- LeaseKeeper ------------------------------------------------------------

// A fake Redis for the keeper: counts extensions, answers as told.
struct FakeLeases {
  std::mutex mu;
  std::vector<absl::Duration> periods;
  absl::StatusOr<bool> answer = true;

  LeaseKeeper::Extend Extend() {
    return [this](const std::string& key, const std::string& token,
                  absl::Duration period) -> absl::StatusOr<bool> {
      EXPECT_EQ(key, "k");
      EXPECT_EQ(token, "t");
      std::lock_guard<std::mutex> lock(mu);
      periods.push_back(period);
      return answer;
    };
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu);
    return periods.size();
  }

  // Releases answer from `release_answers` in turn, then the last again.
  std::vector<absl::StatusOr<bool>> release_answers = {true};
  size_t releases = 0;
  LeaseKeeper::Release Release() {
    return [this](const std::string& key,
                  const std::string& token) -> absl::StatusOr<bool> {
      EXPECT_EQ(key, "k");
      EXPECT_EQ(token.substr(0, 1), "t");
      std::lock_guard<std::mutex> lock(mu);
      const size_t i = std::min(releases++, release_answers.size() - 1);
      return release_answers[i];
    };
  }
  size_t release_calls() {
    std::lock_guard<std::mutex> lock(mu);
    return releases;
  }
};

bool Eventually(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

TEST(LeaseKeeperTest, ExtendsUntilForgotten) {
  FakeLeases fake;
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::Seconds(60));
  EXPECT_EQ(keeper.size(), 1u);
  ASSERT_TRUE(Eventually([&] { return fake.calls() >= 3; }));
  EXPECT_GE(keeper.extensions(), 2u);
  keeper.Forget("t");
  EXPECT_EQ(keeper.size(), 0u);
  const size_t calls = fake.calls();
  absl::SleepFor(absl::Milliseconds(200));
  // At most one extension was already under way when Forget ran.
  EXPECT_LE(fake.calls(), calls + 1);
  std::lock_guard<std::mutex> lock(fake.mu);
  for (absl::Duration period : fake.periods) {
    EXPECT_EQ(period, absl::Milliseconds(40));
  }
}

TEST(LeaseKeeperTest, StopsAtHoldForAndNeverExtendsPastIt) {
  FakeLeases fake;
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  const absl::Time held_at = MonotonicNow();
  keeper.Hold("k", "t", absl::Milliseconds(150));
  ASSERT_TRUE(Eventually([&] { return keeper.size() == 0; }));
  EXPECT_GE(MonotonicNow() - held_at, absl::Milliseconds(150));
  std::lock_guard<std::mutex> lock(fake.mu);
  for (absl::Duration period : fake.periods) {
    EXPECT_LE(period, absl::Milliseconds(40));
  }
}

// The grant lasts a period already: a shorter hold is left alone, since an
// extension ending at hold_until would cut the lease short.
TEST(LeaseKeeperTest, AHoldWithinThePeriodIsNotExtended) {
  FakeLeases fake;
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::Milliseconds(30));
  keeper.Hold("k", "t", absl::Milliseconds(40));
  EXPECT_EQ(keeper.size(), 0u);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(fake.calls(), 0u);
}

// Every extension reaches at least as far as the lease may already last: the
// grant's period first, then each extension's.
TEST(LeaseKeeperTest, AnExtensionNeverEndsBeforeTheLeaseMayExpire) {
  struct Sent {
    absl::Time at;
    absl::Duration period;
  };
  std::mutex mu;
  std::vector<Sent> sent;
  // In hundreds of milliseconds: the test needs the keeper to run at least
  // once before the hold ends, and with 40 ms and 110 ms it did not in 20
  // runs of 120 under ThreadSanitizer, two at a time on two cores (the
  // keeper first ran after the hold had ended).
  const absl::Duration lease_for = absl::Milliseconds(400);
  LeaseKeeper keeper(
      lease_for,
      [&](const std::string&, const std::string&, absl::Duration period) {
        std::lock_guard<std::mutex> lock(mu);
        sent.push_back({MonotonicNow(), period});
        return absl::StatusOr<bool>(true);
      },
      [](const std::string&, const std::string&) {
        return absl::StatusOr<bool>(true);
      });
  const absl::Time held_at = MonotonicNow();
  // Past a period by less than half of one: the last extension's period is
  // what is left of the hold, shorter than the period, but not shorter than
  // what the previous extension granted.
  keeper.Hold("k", "t", absl::Milliseconds(1100));
  ASSERT_TRUE(Eventually([&] { return keeper.size() == 0; }));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(sent.size(), 1u);
  // Redis's expiry after each answer, as late as it may be (each answer
  // arrives after its request was sent).
  absl::Time expiry = held_at + lease_for;
  for (const Sent& s : sent) {
    EXPECT_GE(s.at + s.period, expiry) << s.period;
    EXPECT_LE(s.period, lease_for);
    expiry = std::max(expiry, s.at + s.period);
  }
}

TEST(LeaseKeeperTest, DropsALostLease) {
  FakeLeases fake;
  fake.answer = false;
  LeaseKeeper keeper(absl::Milliseconds(20), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return keeper.size() == 0; }));
  EXPECT_EQ(fake.calls(), 1u);
  EXPECT_EQ(keeper.extensions(), 0u);
}

TEST(LeaseKeeperTest, RetriesAfterAnError) {
  FakeLeases fake;
  fake.answer = absl::UnavailableError("down");
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return fake.calls() >= 3; }));
  EXPECT_EQ(keeper.size(), 1u);
}

TEST(LeaseKeeperTest, HoldsNothingForAZeroHold) {
  FakeLeases fake;
  LeaseKeeper keeper(absl::Milliseconds(20), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::ZeroDuration());
  EXPECT_EQ(keeper.size(), 0u);
}

// A lease a failed call may have left held is given back in the background:
// retried while Redis does not answer, done once it deletes the lease.
TEST(LeaseKeeperTest, GivesALeaseBackOnceRedisAnswers) {
  FakeLeases fake;
  fake.release_answers = {absl::UnavailableError("down"),
                          absl::DeadlineExceededError("hung"), true};
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  keeper.Hold("k", "t", absl::Seconds(60));
  keeper.ReleaseSoon("k", "t");
  EXPECT_EQ(keeper.size(), 0u);  // No longer extended.
  EXPECT_EQ(keeper.releasing(), 1u);
  ASSERT_TRUE(Eventually([&] { return keeper.releasing() == 0; }));
  EXPECT_EQ(fake.release_calls(), 3u);
  EXPECT_EQ(keeper.released(), 1u);
  EXPECT_EQ(fake.calls(), 0u);
}

// "Not held" once may mean the lost call has not reached Redis yet; twice,
// an eighth of a period apart, it was never granted (or was filled).
TEST(LeaseKeeperTest, StopsGivingBackALeaseNotHeldTwice) {
  FakeLeases fake;
  fake.release_answers = {false};
  LeaseKeeper keeper(absl::Milliseconds(40), fake.Extend(), fake.Release());
  keeper.ReleaseSoon("k", "t");
  ASSERT_TRUE(Eventually([&] { return keeper.releasing() == 0; }));
  EXPECT_EQ(fake.release_calls(), 2u);
  EXPECT_EQ(keeper.released(), 0u);
}

TEST(LeaseKeeperTest, GivesBackAtMostABoundedNumberAtOnce) {
  FakeLeases fake;
  fake.release_answers = {absl::UnavailableError("down")};
  LeaseKeeper keeper(absl::Hours(1), fake.Extend(), fake.Release());
  for (size_t i = 0; i <= LeaseKeeper::kMaxReleases; ++i) {
    keeper.ReleaseSoon("k", absl::StrCat("t", i));
  }
  EXPECT_EQ(keeper.releasing(), LeaseKeeper::kMaxReleases);
}

// ---- ChangeFeed -------------------------------------------------------------

// A listening Unix socket in a temporary directory, where a test thread plays
// Redis. Closed and removed on destruction, after the test has joined that
// thread.
class FakeRedisSocket {
 public:
  FakeRedisSocket() = default;
  FakeRedisSocket(const FakeRedisSocket&) = delete;
  FakeRedisSocket& operator=(const FakeRedisSocket&) = delete;
  ~FakeRedisSocket() {
    if (listener_ >= 0) close(listener_);
    if (!path_.empty()) unlink(path_.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
  }

  // Creates the directory and the socket; a fatal test failure if it cannot.
  void Listen(int backlog) {
    char dir[] = "/tmp/paddock-feed-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    const std::string path = dir_ + "/fake.sock";
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
              0);
    path_ = path;
    ASSERT_EQ(listen(listener_, backlog), 0);
  }

  int listener() const { return listener_; }

  // A feed of channel "ch" on this socket, with timeouts far longer than a
  // test and health checks a minute apart, so that only the fake's replies
  // and drops move it.
  ChangeFeedConfig FeedConfig() const {
    absl::StatusOr<RedisAddress> address = ParseRedisAddress("unix:" + path_);
    EXPECT_TRUE(address.ok()) << address.status();
    return {.endpoint = {.address = address.value_or(RedisAddress{})},
            .channel = "ch",
            .connect_timeout = absl::Seconds(10),
            .io_timeout = absl::Seconds(10),
            .health_check_interval = absl::Seconds(60),
            .seed = 1};  // The same reconnect waits in every run.
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
  int listener_ = -1;
};

// A message that reached the feed in the same read as the SUBSCRIBE
// confirmation sits in hiredis's buffer, where poll() does not see it: it is
// delivered at once, not with the next pong (a health check later, or
// never if that ping goes unanswered).
TEST(ChangeFeedTest,
     AMessageReadWithTheSubscribeConfirmationIsDeliveredAtOnce) {
  FakeRedisSocket fake_redis;
  ASSERT_NO_FATAL_FAILURE(fake_redis.Listen(/*backlog=*/4));
  const int listener = fake_redis.listener();

  // A fake subscribed Redis: the confirmation and a message in one write,
  // then a pong for every ping.
  std::atomic<bool> done{false};
  std::thread fake([&] {
    const int c = accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    if (read(c, buf, sizeof(buf)) > 0) {
      const std::string payload =
          EncodeChangeMessage(ChangeKind::kInvalidate, /*origin=*/1, "k");
      const std::string both =
          absl::StrCat("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n",
                       "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$", payload.size(),
                       "\r\n", payload, "\r\n");
      EXPECT_EQ(write(c, both.data(), both.size()),
                static_cast<ssize_t>(both.size()));
    }
    while (!done.load()) {
      pollfd p = {.fd = c, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 20) != 1) continue;
      if (read(c, buf, sizeof(buf)) <= 0) break;
      const std::string pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
      if (write(c, pong.data(), pong.size()) < 0) break;
    }
    close(c);
  });

  struct Keys : SharedTier::Subscriber {
    std::atomic<int> invalidated{0};
    void OnInvalidate(std::string_view key) override {
      EXPECT_EQ(key, "k");
      ++invalidated;
    }
    void OnMissedInvalidations() override {}
  } subscriber;
  auto log = std::make_shared<ChangeLog>();
  auto hub = std::make_shared<SubscriberHub>();
  std::unique_ptr<SharedTier::Subscription> subscription =
      hub->Subscribe(&subscriber);
  {
    // Health checks are far apart: a delivery with the next pong would come
    // a minute later.
    ChangeFeed feed(fake_redis.FeedConfig(), log, hub);
    ASSERT_TRUE(feed.Start().ok());
    EXPECT_TRUE(Eventually([&] { return subscriber.invalidated.load() > 0; }));
    EXPECT_EQ(feed.losses(), 0u);
    done.store(true);
  }
  fake.join();
}

// A subscription dropped as soon as it is confirmed (a proxy, a server that
// refuses us) is retried with a growing backoff: each reconnection makes
// every cache drop its entries, so it must not come every 20 ms.
TEST(ChangeFeedTest, ASubscriptionDroppedAtOnceIsRetriedLessAndLessOften) {
  FakeRedisSocket fake_redis;
  ASSERT_NO_FATAL_FAILURE(fake_redis.Listen(/*backlog=*/16));
  const int listener = fake_redis.listener();

  std::atomic<bool> done{false};
  std::atomic<int> subscribes{0};
  std::thread fake([&] {
    while (!done.load()) {
      pollfd p = {.fd = listener, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 20) != 1) continue;
      const int c = accept(listener, nullptr, nullptr);
      if (c < 0) continue;
      char buf[4096];
      if (read(c, buf, sizeof(buf)) > 0) {
        const std::string confirm =
            "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
        if (write(c, confirm.data(), confirm.size()) > 0) ++subscribes;
      }
      close(c);  // Dropped at once.
    }
  });

  struct Missed : SharedTier::Subscriber {
    void OnInvalidate(std::string_view) override {}
    void OnMissedInvalidations() override {}
  } subscriber;
  auto log = std::make_shared<ChangeLog>();
  auto hub = std::make_shared<SubscriberHub>();
  std::unique_ptr<SharedTier::Subscription> subscription =
      hub->Subscribe(&subscriber);
  {
    ChangeFeed feed(fake_redis.FeedConfig(), log, hub);
    ASSERT_TRUE(feed.Start().ok());
    ASSERT_TRUE(Eventually([&] { return subscribes.load() >= 1; }));
    absl::SleepFor(absl::Seconds(1));
    // Backoff from 20 ms doubling: at most 6 in the first 1.26 s (50 if it
    // went back to 20 ms after each confirmation).
    EXPECT_LE(subscribes.load(), 8);
    EXPECT_GE(feed.losses(), 1u);
  }
  done.store(true);
  fake.join();
}

// The message of a write that may have landed late reaches its origin too,
// for unsettled_for: the writer must drop its copy as every other process
// does. If a message of its key was passed over its origin while the call
// was out (perhaps its own, handled before the failure was known), the feed
// delivers an invalidation at once, on its own thread.
TEST(ChangeFeedTest, AWriteThatMayLandLateReachesItsOriginForAWhile) {
  FakeRedisSocket fake_redis;
  ASSERT_NO_FATAL_FAILURE(fake_redis.Listen(/*backlog=*/4));
  const int listener = fake_redis.listener();

  // A fake subscribed Redis that publishes what the test gives it and
  // answers pings.
  std::mutex outbox_mu;
  std::vector<std::string> outbox;
  const auto publish = [&](ChangeKind kind, uint64_t origin,
                           std::string_view key) {
    const std::string payload = EncodeChangeMessage(kind, origin, key);
    std::lock_guard<std::mutex> lock(outbox_mu);
    outbox.push_back(absl::StrCat("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$",
                                  payload.size(), "\r\n", payload, "\r\n"));
  };
  std::atomic<bool> done{false};
  std::thread fake([&] {
    const int c = accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    if (read(c, buf, sizeof(buf)) > 0) {
      const std::string confirm = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
      EXPECT_EQ(write(c, confirm.data(), confirm.size()),
                static_cast<ssize_t>(confirm.size()));
    }
    while (!done.load()) {
      std::vector<std::string> sending;
      {
        std::lock_guard<std::mutex> lock(outbox_mu);
        sending.swap(outbox);
      }
      for (const std::string& m : sending) {
        EXPECT_EQ(write(c, m.data(), m.size()), static_cast<ssize_t>(m.size()));
      }
      pollfd p = {.fd = c, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 5) != 1) continue;
      if (read(c, buf, sizeof(buf)) <= 0) break;
      const std::string pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
      if (write(c, pong.data(), pong.size()) < 0) break;
    }
    close(c);
  });

  struct Keys : SharedTier::Subscriber {
    std::mutex mu;
    std::vector<std::string> keys;
    std::thread::id last_thread;
    void OnInvalidate(std::string_view key) override {
      std::lock_guard<std::mutex> lock(mu);
      keys.emplace_back(key);
      last_thread = std::this_thread::get_id();
    }
    void OnMissedInvalidations() override {}
    std::vector<std::string> Seen() {
      std::lock_guard<std::mutex> lock(mu);
      return keys;
    }
  } subscriber;
  auto log = std::make_shared<ChangeLog>();
  auto hub = std::make_shared<SubscriberHub>();
  std::unique_ptr<SharedTier::Subscription> subscription =
      hub->Subscribe(&subscriber);
  const uint64_t self = subscription->id();
  const uint64_t other = self + 1;
  ChangeFeedConfig config = fake_redis.FeedConfig();
  config.unsettled_for = absl::Milliseconds(500);
  {
    ChangeFeed feed(config, log, hub);
    ASSERT_TRUE(feed.Start().ok());
    const auto keys_are = [&](std::vector<std::string> expected) {
      return Eventually([&] { return subscriber.Seen() == expected; });
    };
    // Messages are handled in order: the one after shows the one before
    // was passed over. Only those passed over a subscription of this tier
    // are counted.
    publish(ChangeKind::kPut, self, "k");
    publish(ChangeKind::kPut, other, "a");
    EXPECT_TRUE(keys_are({"a"}));
    EXPECT_EQ(feed.passed_over(), 1u);

    // Nothing passed over since the write was sent: nothing delivered now.
    feed.WriteMayLandLate("k", feed.passed_over());
    publish(ChangeKind::kInvalidate, self, "k");
    publish(ChangeKind::kPut, self, "unrelated");
    publish(ChangeKind::kPut, other, "b");
    EXPECT_TRUE(keys_are({"a", "k", "b"}));
    EXPECT_EQ(feed.passed_over(), 2u);  // "unrelated".

    // The write's own message handled before its failure was known.
    const uint64_t sent = feed.passed_over();
    publish(ChangeKind::kPut, self, "j");
    publish(ChangeKind::kPut, other, "c");
    EXPECT_TRUE(keys_are({"a", "k", "b", "c"}));
    feed.WriteMayLandLate("j", sent);
    EXPECT_TRUE(keys_are({"a", "k", "b", "c", "j"}));
    {
      std::lock_guard<std::mutex> lock(subscriber.mu);
      EXPECT_NE(subscriber.last_thread, std::this_thread::get_id());
    }

    // Forgotten after unsettled_for.
    absl::SleepFor(config.unsettled_for + absl::Milliseconds(100));
    publish(ChangeKind::kPut, self, "k");
    publish(ChangeKind::kPut, self, "j");
    publish(ChangeKind::kPut, other, "d");
    EXPECT_TRUE(keys_are({"a", "k", "b", "c", "j", "d"}));
    EXPECT_EQ(feed.losses(), 0u);
    done.store(true);
  }
  fake.join();
}

// The reconnect wait is the backoff stretched by [0, 50 %): never shorter
// (the bound above holds), and spread, so that pods whose Redis restarted
// do not reconnect in step.
TEST(ChangeFeedTest, ReconnectWaitsAreStretchedByUpToHalfTheBackoff) {
  const absl::Duration backoff = absl::Milliseconds(80);
  EXPECT_EQ(JitteredBackoff(backoff, 0), backoff);
  EXPECT_LT(JitteredBackoff(backoff, ~uint64_t{0}), backoff * 1.5);
  EXPECT_GT(JitteredBackoff(backoff, ~uint64_t{0}), backoff * 1.49);
  uint64_t state = 42;
  absl::Duration least = absl::InfiniteDuration();
  absl::Duration most = absl::ZeroDuration();
  for (int i = 0; i < 1000; ++i) {
    const absl::Duration wait = JitteredBackoff(backoff, SplitMixNext(&state));
    ASSERT_GE(wait, backoff);
    ASSERT_LT(wait, backoff * 1.5);
    least = std::min(least, wait);
    most = std::max(most, wait);
  }
  // 1000 draws cover the range: pods drawing them do not move together.
  EXPECT_LT(least, backoff * 1.05);
  EXPECT_GT(most, backoff * 1.45);
}

// ---- SubscriberHub ----------------------------------------------------------

struct Recorder : SharedTier::Subscriber {
  std::vector<std::string> keys;
  int missed = 0;
  void OnInvalidate(std::string_view key) override { keys.emplace_back(key); }
  void OnMissedInvalidations() override { ++missed; }
};

TEST(SubscriberHubTest, DeliversToAllButTheOrigin) {
  auto hub = std::make_shared<SubscriberHub>();
  Recorder a, b;
  auto sub_a = hub->Subscribe(&a);
  auto sub_b = hub->Subscribe(&b);
  EXPECT_EQ(hub->size(), 2u);
  hub->DeliverInvalidate("k1", sub_a->id());
  hub->DeliverInvalidate("k2", 0);
  hub->DeliverMissed();
  EXPECT_THAT(a.keys, ElementsAre("k2"));
  EXPECT_THAT(b.keys, ElementsAre("k1", "k2"));
  EXPECT_EQ(a.missed, 1);
  EXPECT_EQ(b.missed, 1);
  sub_a.reset();
  EXPECT_EQ(hub->size(), 1u);
  hub->DeliverInvalidate("k3", 0);
  EXPECT_THAT(a.keys, ElementsAre("k2"));
  EXPECT_THAT(b.keys, ElementsAre("k1", "k2", "k3"));
}

// Delivery runs on the tier's thread, where an exception would end the
// process: a subscriber that throws is told to drop everything instead, and
// the others still get the notice.
TEST(SubscriberHubTest,
     ASubscriberThatThrowsDropsEverythingAndOthersGetTheNotice) {
  struct Throwing : Recorder {
    bool throw_on_missed = false;
    void OnInvalidate(std::string_view) override {
      throw std::runtime_error("out of memory");
    }
    void OnMissedInvalidations() override {
      ++missed;
      if (throw_on_missed) throw std::runtime_error("still out of memory");
    }
  };
  auto hub = std::make_shared<SubscriberHub>();
  Throwing throwing;
  Recorder other;
  auto sub_throwing = hub->Subscribe(&throwing);
  auto sub_other = hub->Subscribe(&other);
  hub->DeliverInvalidate("k1", 0);
  EXPECT_EQ(throwing.missed, 1);
  throwing.throw_on_missed = true;
  hub->DeliverInvalidate("k2", 0);
  hub->DeliverMissed();
  EXPECT_EQ(throwing.missed, 3);
  EXPECT_THAT(other.keys, ElementsAre("k1", "k2"));
  EXPECT_EQ(other.missed, 1);
}

// A callback may end its own subscription; if it then throws, the fallback
// notice must not reach a subscriber that may be gone with its subscription.
TEST(SubscriberHubTest, ACallbackThatEndsItsSubscriptionThenThrowsGetsNoMore) {
  struct EndsThenThrows : Recorder {
    std::unique_ptr<SharedTier::Subscription> subscription;
    int after_end = 0;
    void OnInvalidate(std::string_view) override {
      subscription.reset();
      throw std::runtime_error("failed after unsubscribing");
    }
    void OnMissedInvalidations() override {
      if (subscription == nullptr) ++after_end;
    }
  };
  auto hub = std::make_shared<SubscriberHub>();
  EndsThenThrows ends;
  Recorder other;
  ends.subscription = hub->Subscribe(&ends);
  auto sub_other = hub->Subscribe(&other);
  hub->DeliverInvalidate("k1", 0);
  EXPECT_EQ(ends.after_end, 0);
  EXPECT_EQ(hub->size(), 1u);
  EXPECT_THAT(other.keys, ElementsAre("k1"));
  hub->DeliverMissed();
  EXPECT_EQ(ends.after_end, 0);
  EXPECT_EQ(other.missed, 1);
}

// The tier's destructor closes its hub, possibly from a callback (one that
// dropped the last reference to the tier): the subscriptions that outlive
// the tier get nothing more, not even the rest of that delivery or the
// fallback notice of a callback that then throws.
TEST(SubscriberHubTest, NothingIsDeliveredOnceClosedEvenFromACallback) {
  struct Closing : Recorder {
    SubscriberHub* hub = nullptr;
    void OnInvalidate(std::string_view key) override {
      Recorder::OnInvalidate(key);
      hub->Close();
      throw std::runtime_error("failed after closing");
    }
  };
  auto hub = std::make_shared<SubscriberHub>();
  Closing closing;
  closing.hub = hub.get();
  Recorder after;
  auto sub_closing = hub->Subscribe(&closing);
  auto sub_after = hub->Subscribe(&after);
  hub->DeliverInvalidate("k1", 0);
  hub->DeliverInvalidate("k2", 0);
  hub->DeliverMissed();
  EXPECT_THAT(closing.keys, ElementsAre("k1"));
  EXPECT_EQ(closing.missed, 0);
  EXPECT_THAT(after.keys, ElementsAre());
  EXPECT_EQ(after.missed, 0);
  EXPECT_EQ(hub->size(), 2u);
}

TEST(SubscriberHubTest, IdsAreNonZeroAndDistinct) {
  auto hub = std::make_shared<SubscriberHub>();
  Recorder r;
  std::vector<std::unique_ptr<SharedTier::Subscription>> subs;
  for (int i = 0; i < 100; ++i) subs.push_back(hub->Subscribe(&r));
  for (size_t i = 0; i < subs.size(); ++i) {
    EXPECT_NE(subs[i]->id(), 0u);
    for (size_t j = i + 1; j < subs.size(); ++j) {
      EXPECT_NE(subs[i]->id(), subs[j]->id());
    }
  }
}

TEST(SubscriberHubTest, SubscribeAndUnsubscribeRaceWithDelivery) {
  auto hub = std::make_shared<SubscriberHub>();
  std::atomic<bool> stop{false};
  std::thread deliverer([&] {
    while (!stop) hub->DeliverInvalidate("k", 0);
  });
  for (int i = 0; i < 200; ++i) {
    Recorder r;
    auto sub = hub->Subscribe(&r);
    sub.reset();  // After this, r may go: nothing calls it any more.
  }
  stop = true;
  deliverer.join();
  EXPECT_EQ(hub->size(), 0u);
}

}  // namespace
}  // namespace paddock::internal
