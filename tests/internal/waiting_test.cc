// Tests of paddock/internal/waiting.h on a bare CacheCore: a blocking wait on
// a flight, and an asynchronous waiter enlisted on one, answered once by the
// outcome, by its timeout, at once (zero wait_timeout, a flight published
// meanwhile) or by the cache's destructor.

#include "paddock/internal/waiting.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/clock.h"
#include "paddock/internal/cache_core.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SingleFlight,
                       absl::Hash<std::string>, std::equal_to<>>;
using Waiting = Engine<Core>::Waiting;

class WaitingTest : public ::testing::Test {
 protected:
  void Make(absl::Duration wait_timeout) {
    Options options;
    options.clock = &clock_;
    options.wait_timeout = wait_timeout;
    core_ = std::make_unique<Core>(
        [](const std::string& key) -> absl::StatusOr<std::string> {
          return key;
        },
        Core::AsyncLoader(), options, SingleFlight(), absl::Hash<std::string>(),
        std::equal_to<>());
    flight_ = std::make_shared<Core::Flight>(key_, hash_, 0);
  }
  // Enlists a waiter whose answers land in `answers_`.
  std::shared_ptr<AsyncWaiter<Core>> Enlist(bool joined = true) {
    std::shared_ptr<AsyncWaiter<Core>> waiter;
    Waiting(*core_).Enlist(
        *flight_, key_, hash_,
        [this](absl::StatusOr<std::string> v) {
          answers_.push_back(std::move(v));
        },
        joined, waiter);
    return waiter;
  }
  void Publish(Core::Outcome outcome) {
    Waiting waiting(*core_);
    for (const auto& w : flight_->Publish(std::move(outcome))) {
      waiting.Deliver(w, *flight_->published());
    }
  }

  ManualClock clock_;
  const std::string key_ = "k";
  const size_t hash_ = 42;
  std::unique_ptr<Core> core_;
  std::shared_ptr<Core::Flight> flight_;
  std::vector<absl::StatusOr<std::string>> answers_;
};

TEST_F(WaitingTest, ABlockingWaitGetsThePublishedOutcome) {
  Make(absl::Seconds(10));
  flight_->Publish({std::string("loaded")});
  EXPECT_EQ(Waiting(*core_).Wait(flight_, key_, hash_).value(), "loaded");
}

TEST_F(WaitingTest, ABlockingWaitThatTimesOutGetsDeadlineExceededCounted) {
  Make(absl::Milliseconds(1));
  const absl::StatusOr<std::string> got =
      Waiting(*core_).Wait(flight_, key_, hash_, /*counted=*/true);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(core_->recorder.Snapshot().wait_timeouts, 1u);
}

TEST_F(WaitingTest, AnEnlistedWaiterIsAnsweredOnceByTheOutcome) {
  Make(absl::Hours(1));
  std::shared_ptr<AsyncWaiter<Core>> waiter = Enlist();
  EXPECT_EQ(waiter->key(), key_);
  EXPECT_TRUE(answers_.empty());
  EXPECT_EQ(core_->async_waiters.pending(), 1u);
  Publish({std::string("loaded")});
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].value(), "loaded");
  EXPECT_EQ(core_->async_waiters.pending(), 0u);
  // A second delivery (its timer, say) finds it claimed.
  Waiting(*core_).Deliver(waiter, Core::Outcome{std::string("again")});
  EXPECT_EQ(answers_.size(), 1u);
}

TEST_F(WaitingTest, AZeroWaitTimeoutAnswersAtOnce) {
  Make(absl::ZeroDuration());
  Enlist(/*joined=*/true);
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(core_->recorder.Snapshot().wait_timeouts, 1u);
  // The outcome, when it comes, answers nobody twice.
  Publish({std::string("loaded")});
  EXPECT_EQ(answers_.size(), 1u);
}

TEST_F(WaitingTest, AWaiterOnAFlightPublishedMeanwhileIsAnsweredAtOnce) {
  Make(absl::Hours(1));
  flight_->Publish({std::string("early")});
  Enlist();
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].value(), "early");
  EXPECT_EQ(core_->async_waiters.pending(), 0u);
}

TEST_F(WaitingTest, AnExpiredWaiterGetsTheTimeoutsAnswer) {
  Make(absl::Hours(1));
  std::shared_ptr<AsyncWaiter<Core>> waiter = Enlist(/*joined=*/false);
  ASSERT_TRUE(waiter->Claim());
  EXPECT_TRUE(waiter->Expire());
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  // Not joined: its leader's timeout is not a coalesced wait's.
  EXPECT_EQ(core_->recorder.Snapshot().wait_timeouts, 0u);
  core_->async_waiters.Remove(waiter.get());
}

TEST_F(WaitingTest, TheCachesDestructorCancelsWhatStillWaits) {
  Make(absl::Hours(1));
  Enlist();
  core_.reset();
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace paddock::internal
