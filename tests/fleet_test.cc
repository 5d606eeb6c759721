// The cache's side of the shared tier (Options::shared), deterministically:
// several caches ("processes") share an in-memory tier that keeps its own
// clock. Each cache has a ManualClock of its own, a ManualExecutor and a
// loader that counts its calls. The real-Redis, multi-process tests are in
// tests/redis/.

#include "paddock/internal/fleet.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fake_shared_tier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/executor.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock {
namespace {

using ::paddock::testing::FakeSharedTier;
using ::testing::HasSubstr;

// One "process": a cache with its own clock, executor and loader.
template <typename P>
struct Pod {
  Pod(const std::shared_ptr<FakeSharedTier>& tier, int* fleet_loads,
      absl::Duration clock_offset = absl::ZeroDuration(), P policy = P{},
      Options options = {})
      : clock(absl::UnixEpoch() + absl::Hours(1) + clock_offset) {
    options.ttl = absl::Seconds(10);
    options.clock = &clock;
    options.executor = &executor;
    options.wait_timeout = absl::Seconds(1);
    options.shared = tier;
    cache = std::make_unique<Cache<std::string, std::string, P>>(
        [this,
         fleet_loads](const std::string& k) -> absl::StatusOr<std::string> {
          ++loads;
          ++*fleet_loads;
          if (loader_hook) loader_hook();
          if (!next_error.ok()) return next_error;
          return absl::StrCat(k, "#", *fleet_loads);
        },
        options, policy);
  }

  ManualClock clock;
  ManualExecutor executor;
  int loads = 0;
  absl::Status next_error;
  std::function<void()> loader_hook;
  std::unique_ptr<Cache<std::string, std::string, P>> cache;
};

class FleetTest : public ::testing::Test {
 protected:
  // Moves the tier's clock and every pod's by `d`.
  template <typename... Pods>
  void Advance(absl::Duration d, Pods&... pods) {
    tier_clock_.Advance(d);
    (pods.clock.Advance(d), ...);
  }

  ManualClock tier_clock_{absl::UnixEpoch() + absl::Hours(5)};
  std::shared_ptr<FakeSharedTier> tier_ =
      std::make_shared<FakeSharedTier>(&tier_clock_);
  int fleet_loads_ = 0;
};

TEST_F(FleetTest, ACacheTakesWhatAnotherLoadedWithoutCallingItsLoader) {
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  EXPECT_EQ(*a.cache->Get("k"), "k#1");
  EXPECT_EQ(*b.cache->Get("k"), "k#1");
  EXPECT_EQ(fleet_loads_, 1);
  EXPECT_EQ(a.cache->stats().leases_acquired, 1u);
  EXPECT_EQ(b.cache->stats().shared_hits, 1u);
  EXPECT_EQ(b.cache->stats().loads, 0u);
  // Then b serves it from its own copy: the hit path never asks the tier.
  const int lookups = tier_->lookups();
  EXPECT_EQ(*b.cache->Get("k"), "k#1");
  EXPECT_EQ(tier_->lookups(), lookups);
}

TEST_F(FleetTest, OneLoadPerExpiryAcrossTheFleet) {
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_),
      c(tier_, &fleet_loads_);
  for (int period = 0; period < 5; ++period) {
    for (auto* pod : {&a, &b, &c}) ASSERT_TRUE(pod->cache->Get("k").ok());
    Advance(absl::Seconds(10), a, b, c);
  }
  EXPECT_EQ(fleet_loads_, 5);
}

TEST_F(FleetTest, PodsWhoseClocksDisagreeLoadAsOften) {
  // Freshness is the tier's to judge: a pod 30 s ahead or behind the others
  // sees the value as old as the tier says, not as its own clock would.
  Pod<SingleFlight> ahead(tier_, &fleet_loads_, absl::Seconds(30)),
      behind(tier_, &fleet_loads_, -absl::Seconds(30));
  for (int period = 0; period < 4; ++period) {
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(ahead.cache->Get("k").ok());
      ASSERT_TRUE(behind.cache->Get("k").ok());
      Advance(absl::Milliseconds(2500), ahead, behind);
    }
  }
  EXPECT_EQ(fleet_loads_, 4);
}

TEST_F(FleetTest, ACacheWaitsForTheLeaseHoldersFill) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  const std::string token = tier_->TakeLease("k");  // Another process loads.
  tier_->set_on_await([&] {
    ASSERT_TRUE(*tier_->Fill("k", token,
                             SharedFill{.value = std::string("theirs"),
                                        .fresh_for = absl::Seconds(10),
                                        .keep_for = absl::Seconds(20)}));
  });
  EXPECT_EQ(*a.cache->Get("k"), "theirs");
  EXPECT_EQ(a.loads, 0);
  EXPECT_EQ(a.cache->stats().lease_waits, 1u);
  EXPECT_EQ(a.cache->stats().shared_hits, 1u);
}

TEST_F(FleetTest, AWaitForAnotherProcessIsBoundedByWaitTimeout) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  a.cache.reset();
  Options options{.wait_timeout = absl::ZeroDuration()};
  Pod<SingleFlight> impatient(tier_, &fleet_loads_, absl::ZeroDuration(),
                              SingleFlight{}, options);
  tier_->TakeLease("k");  // Held, never filled.
  absl::StatusOr<std::string> got = impatient.cache->Get("k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("another process"));
  EXPECT_EQ(impatient.loads, 0);
  EXPECT_EQ(impatient.cache->loads_in_flight(), 0u);
}

// A load the tier answers took a load slot first, as every load does; it
// must give it back, or max_concurrent_loads such answers stop this process
// loading anything until the slots age out (max_load_age).
TEST_F(FleetTest, ALoadTheTierAnsweredGivesBackItsLoadSlot) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  Pod<SingleFlight> b(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, Options{.max_concurrent_loads = 1});
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  ASSERT_EQ(*b.cache->Get("k"), "k#1");  // From the tier.
  ASSERT_EQ(b.cache->stats().shared_hits, 1u);
  const absl::StatusOr<std::string> j = b.cache->Get("j");
  ASSERT_TRUE(j.ok()) << j.status();  // Its one slot is free.
  EXPECT_EQ(*j, "j#2");
  EXPECT_EQ(b.loads, 1);
}

TEST_F(FleetTest, AWaitForAnotherProcessThatTimedOutGivesBackItsLoadSlot) {
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, Options{.max_concurrent_loads = 1});
  tier_->TakeLease("k");  // Held, never filled.
  ASSERT_EQ(a.cache->Get("k").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const absl::StatusOr<std::string> j = a.cache->Get("j");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, "j#1");
  EXPECT_EQ(a.loads, 1);
}

// ~Cache waits for this process's running loads, not for another
// process's: a refresh waiting on a lease held elsewhere (here without end:
// max_load_age is infinite and the lease never lapses) stops at once.
TEST_F(FleetTest, DestroyingTheCacheEndsAWaitForAnotherProcess) {
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), SoftTtl{},
                 Options{.max_load_age = absl::InfiniteDuration()});
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);
  tier_->TakeLease("k");                 // Another process refreshes it.
  ASSERT_EQ(*a.cache->Get("k"), "k#1");  // Stale; a refresh is queued.
  const size_t parked = internal::FleetWaits::Process().parked();
  a.executor.RunAll();  // The refresh parks, its thread given back.
  EXPECT_EQ(internal::FleetWaits::Process().parked(), parked + 1);
  a.cache.reset();
  EXPECT_EQ(internal::FleetWaits::Process().parked(), parked);
  EXPECT_EQ(a.loads, 1);
}

// -- A wait for another process's fill holds no thread and no load slot.

// GetAsync misses of keys other pods are loading park without a thread
// (issue 43: with two pool threads, two such keys made a third, free key
// time out): every one of them leaves the executor at once, and the free
// key's miss loads at once.
TEST_F(FleetTest, AsyncMissesWaitingForOtherPodsHoldNoExecutorThread) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  const size_t parked = internal::FleetWaits::Process().parked();
  std::vector<std::string> tokens;
  std::vector<std::optional<absl::StatusOr<std::string>>> held(4);
  for (int i = 0; i < 4; ++i) {
    const std::string key = absl::StrCat("held", i);
    tokens.push_back(tier_->TakeLease(key));  // Other pods load these.
    a.cache->GetAsync(key, [&held, i](absl::StatusOr<std::string> v) {
      held[i] = std::move(v);
    });
  }
  EXPECT_EQ(a.executor.RunAll(), 4u);  // Each asks once, then parks.
  EXPECT_EQ(tier_->awaits(), 0);       // No task waited on its thread.
  EXPECT_EQ(internal::FleetWaits::Process().parked(), parked + 4);
  std::optional<absl::StatusOr<std::string>> unheld;
  a.cache->GetAsync("free", [&unheld](absl::StatusOr<std::string> v) {
    unheld = std::move(v);
  });
  EXPECT_EQ(a.executor.RunAll(), 1u);
  ASSERT_TRUE(unheld.has_value());
  EXPECT_EQ(**unheld, "free#1");
  // A fill wakes its waiter, which takes the value on the executor.
  ASSERT_TRUE(*tier_->Fill("held2", tokens[2],
                           SharedFill{.value = std::string("theirs"),
                                      .fresh_for = absl::Seconds(10),
                                      .keep_for = absl::Seconds(20)}));
  EXPECT_EQ(internal::FleetWaits::Process().parked(), parked + 3);
  EXPECT_EQ(a.executor.RunAll(), 1u);
  ASSERT_TRUE(held[2].has_value());
  EXPECT_EQ(**held[2], "theirs");
  EXPECT_EQ(a.loads, 1);  // "free" only.
  a.cache.reset();        // The other three end with the cache.
  EXPECT_EQ(internal::FleetWaits::Process().parked(), parked);
}

// Without change announcements, a parked wait asks again on its timer, and
// ends at its wait_timeout as a blocking caller's wait does.
TEST_F(FleetTest, AParkedWaitAsksAgainOnItsTimerAndEndsAtItsTimeout) {
  tier_->set_announces_changes(false);
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{},
                      Options{.wait_timeout = absl::Milliseconds(200)});
  tier_->TakeLease("k");
  // Answered on the cache's timer thread: read under a lock.
  std::mutex mu;
  std::optional<absl::StatusOr<std::string>> got;
  a.cache->GetAsync("k", [&](absl::StatusOr<std::string> v) {
    std::lock_guard<std::mutex> lock(mu);
    got = std::move(v);
  });
  const auto answered = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return got.has_value();
  };
  // Real time (the waits' clock): the timer wakes it within about 50 ms of
  // the lease's end or the timeout; bounded generously.
  for (int i = 0; i < 10000 && !answered(); ++i) {
    a.executor.RunAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(tier_->lookups(), 2);  // Asked again at least at its deadline.
  EXPECT_EQ(tier_->awaits(), 0);
  EXPECT_EQ(a.loads, 0);
}

// SoftTtl in a fleet: a stale hit's refresh that finds another pod
// refreshing does not keep a task waiting (issue 43: it parked an executor
// thread for max_load_age); this pod serves stale and takes the fleet's
// value when it arrives.
TEST_F(FleetTest, ARefreshThatFindsTheLeaseHeldElsewhereParksAndTakesTheFill) {
  Pod<SoftTtl> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);
  const std::string token = tier_->TakeLease("k");  // Another pod refreshes.
  EXPECT_EQ(*a.cache->Get("k"), "k#1");             // Stale, at once.
  EXPECT_EQ(a.executor.RunAll(), 1u);  // The refresh asks, then parks.
  EXPECT_EQ(tier_->awaits(), 0);
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // Still stale, no second refresh.
  EXPECT_EQ(a.executor.pending(), 0u);
  ASSERT_TRUE(*tier_->Fill("k", token,
                           SharedFill{.value = std::string("refreshed"),
                                      .fresh_for = absl::Seconds(10),
                                      .keep_for = absl::Seconds(20)}));
  EXPECT_EQ(a.executor.RunAll(), 1u);  // Woken: takes the fleet's value.
  EXPECT_EQ(a.cache->GetIfPresent("k"), "refreshed");
  EXPECT_EQ(a.loads, 1);
}

// max_concurrent_loads counts this process's loader calls only: a blocking
// Get waiting for another pod's fill leaves the slot to a load of another
// key (issue 43: that load waited 1.8 s for it).
TEST_F(FleetTest, AWaitForAnotherPodHoldsNoLoadSlot) {
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, Options{.max_concurrent_loads = 1});
  const std::string token = tier_->TakeLease("held");
  std::optional<absl::StatusOr<std::string>> unheld;
  tier_->set_on_await([&] {
    if (unheld.has_value()) return;
    unheld = a.cache->Get("free");  // While "held" waits, on this thread.
    ASSERT_TRUE(*tier_->Fill("held", token,
                             SharedFill{.value = std::string("theirs"),
                                        .fresh_for = absl::Seconds(10),
                                        .keep_for = absl::Seconds(20)}));
  });
  EXPECT_EQ(*a.cache->Get("held"), "theirs");
  ASSERT_TRUE(unheld.has_value());
  ASSERT_TRUE(unheld->ok()) << unheld->status();
  EXPECT_EQ(**unheld, "free#1");
}

TEST_F(FleetTest, AParkedAsyncWaitHoldsNoLoadSlot) {
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, Options{.max_concurrent_loads = 1});
  tier_->TakeLease("held");
  a.cache->GetAsync("held", [](const absl::StatusOr<std::string>&) {});
  EXPECT_EQ(a.executor.RunAll(), 1u);  // Parked.
  std::optional<absl::StatusOr<std::string>> unheld;
  a.cache->GetAsync("free", [&unheld](absl::StatusOr<std::string> v) {
    unheld = std::move(v);
  });
  EXPECT_EQ(a.executor.RunAll(), 1u);
  ASSERT_TRUE(unheld.has_value());
  ASSERT_TRUE(unheld->ok()) << unheld->status();
  EXPECT_EQ(**unheld, "free#1");
}

// A lease that lapses (its holder died) is taken by a parked wait when it
// asks again, and this pod loads for the fleet, with a slot of its own.
TEST_F(FleetTest, AParkedWaitWhoseHolderDiedLoadsForTheFleet) {
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, Options{.max_concurrent_loads = 1});
  tier_->TakeLease("k");
  std::optional<absl::StatusOr<std::string>> got;
  a.cache->GetAsync(
      "k", [&got](absl::StatusOr<std::string> v) { got = std::move(v); });
  EXPECT_EQ(a.executor.RunAll(), 1u);     // Parked.
  tier_clock_.Advance(absl::Minutes(1));  // The holder's lease lapses...
  internal::FleetWaits::Process().NotifyAll(tier_.get());  // ...asked again.
  EXPECT_EQ(a.executor.RunAll(), 1u);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, "k#1");
  EXPECT_EQ(*tier_->record("k")->value, "k#1");  // Filled for the fleet.
}

TEST_F(FleetTest, SoftTtlServesStaleEverywhereWhileOnePodRefreshes) {
  Pod<SoftTtl> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  ASSERT_EQ(*b.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a, b);      // Stale, inside the stale window.
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // At once; a refresh is queued.
  EXPECT_EQ(*b.cache->Get("k"), "k#1");
  EXPECT_EQ(a.executor.RunAll(), 1u);  // a takes the lease and reloads.
  EXPECT_EQ(b.executor.RunAll(), 1u);  // b takes a's new value from the tier.
  EXPECT_EQ(fleet_loads_, 2);
  EXPECT_EQ(*a.cache->Get("k"), "k#2");
  EXPECT_EQ(*b.cache->Get("k"), "k#2");
  EXPECT_EQ(b.cache->stats().shared_hits, 2u);
}

TEST_F(FleetTest, AColdPodServesTheTiersStaleValueWhileAnotherRefreshes) {
  Pod<SoftTtl> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);
  tier_->TakeLease("k");  // Another process is refreshing.
  Pod<SoftTtl> cold(tier_, &fleet_loads_);
  cold.clock.Set(a.clock.Now());
  EXPECT_EQ(*cold.cache->Get("k"), "k#1");  // Stale, at once.
  EXPECT_EQ(cold.loads, 0);
  EXPECT_EQ(tier_->awaits(), 0);
  EXPECT_EQ(cold.cache->stats().lease_waits, 1u);
}

// The same with the lease free: the cold pod's caller still gets the stale
// value at once, and the pod refreshes it for the fleet in the background.
TEST_F(FleetTest, AColdPodGrantedTheLeaseServesStaleAndRefreshesBehindIt) {
  Pod<SoftTtl> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);  // Stale, inside the stale window.
  Pod<SoftTtl> cold(tier_, &fleet_loads_);
  cold.clock.Set(a.clock.Now());
  EXPECT_EQ(*cold.cache->Get("k"), "k#1");  // At once: no load here.
  EXPECT_EQ(cold.loads, 0);
  EXPECT_EQ(cold.cache->stats().shared_hits, 1u);
  EXPECT_EQ(tier_->releases(), 1);  // The refresh asks for its own lease.
  EXPECT_EQ(*cold.cache->Get("k"), "k#1");  // No second refresh.
  EXPECT_EQ(cold.executor.RunAll(), 1u);
  EXPECT_EQ(fleet_loads_, 2);
  EXPECT_EQ(*cold.cache->Get("k"), "k#2");
  ASSERT_TRUE(tier_->record("k").has_value());
  EXPECT_EQ(tier_->record("k")->value.value_or(""), "k#2");
}

// A backend that is down when a pod starts: the pod serves the fleet's
// stale value, as a pod with a copy does, and its failed refresh leaves it.
TEST_F(FleetTest, AColdPodWhoseRefreshFailsKeepsServingTheStaleValue) {
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), SoftTtl{},
                 options);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);
  Pod<SoftTtl> cold(tier_, &fleet_loads_, absl::ZeroDuration(), SoftTtl{},
                    options);
  cold.clock.Set(a.clock.Now());
  cold.next_error = absl::UnavailableError("backend down");
  EXPECT_EQ(cold.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(cold.executor.RunAll(), 1u);  // The refresh fails.
  EXPECT_EQ(cold.loads, 1);
  EXPECT_EQ(cold.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(cold.executor.RunAll(), 0u);  // Not again within error_ttl.
  ASSERT_TRUE(tier_->record("k").has_value());
  EXPECT_EQ(tier_->record("k")->value.value_or(""), "k#1");
}

// Past the stale window the policy loads: a cold pod granted the lease loads
// for its caller, as a pod with an expired copy does (the tier keeps the
// record for stale_if_error).
TEST_F(FleetTest, AColdPodGrantedTheLeasePastTheStaleWindowLoads) {
  const SoftTtl policy{.stale_for = absl::Seconds(5),
                       .stale_if_error = absl::Seconds(30)};
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), policy);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(16), a);
  ASSERT_TRUE(tier_->record("k").has_value());
  Pod<SoftTtl> cold(tier_, &fleet_loads_, absl::ZeroDuration(), policy);
  cold.clock.Set(a.clock.Now());
  EXPECT_EQ(*cold.cache->Get("k"), "k#2");
  EXPECT_EQ(cold.loads, 1);
  EXPECT_EQ(tier_->releases(), 0);
}

// A backend that goes down past the stale window but within stale_if_error:
// a pod that starts then (empty, granted the lease) serves the fleet's last
// value on the failure, as the pods with a copy do; and the failure is not
// filled over that value, which the other pods still serve.
TEST_F(FleetTest, AColdPodWhoseLoadFailsWithinStaleIfErrorServesTheTiersValue) {
  const SoftTtl policy{.stale_for = absl::Seconds(5),
                       .stale_if_error = absl::Seconds(30)};
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), policy, options);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(16), a);  // Past ttl + stale_for, within 40 s.
  Pod<SoftTtl> cold(tier_, &fleet_loads_, absl::ZeroDuration(), policy,
                    options),
      later(tier_, &fleet_loads_, absl::ZeroDuration(), policy, options);
  cold.clock.Set(a.clock.Now());
  later.clock.Set(a.clock.Now());
  cold.next_error = absl::UnavailableError("backend down");
  EXPECT_EQ(cold.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(cold.loads, 1);
  EXPECT_EQ(cold.cache->stats().stale_fallbacks, 1u);
  // Remembered here for error_ttl, with the value beside the error.
  EXPECT_EQ(cold.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(cold.loads, 1);
  // The tier keeps the value, and the lease went back.
  ASSERT_TRUE(tier_->record("k").has_value());
  EXPECT_EQ(tier_->record("k")->value.value_or(""), "k#1");
  later.next_error = absl::UnavailableError("backend down");
  EXPECT_EQ(later.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(later.loads, 1);
  // Past stale_if_error the failure is the answer.
  Advance(absl::Seconds(30), cold);
  EXPECT_EQ(cold.cache->Get("k").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(FleetTest, AColdPodsAsyncLoaderThatFailsWithinStaleIfErrorToo) {
  const SoftTtl policy{.stale_for = absl::Seconds(5),
                       .stale_if_error = absl::Seconds(30)};
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), policy, options);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(16), a);
  ManualClock clock(a.clock.Now());
  ManualExecutor executor;
  int loads = 0;
  Cache<std::string, std::string, SoftTtl> cold(
      Cache<std::string, std::string, SoftTtl>::AsyncLoader(
          [&loads](const std::string&, Completion<std::string> done) {
            ++loads;
            std::move(done)(absl::UnavailableError("backend down"));
          }),
      Options{.ttl = absl::Seconds(10),
              .clock = &clock,
              .executor = &executor,
              .error_ttl = absl::Seconds(5),
              .shared = tier_},
      policy);
  std::optional<absl::StatusOr<std::string>> got;
  cold.GetAsync("k",
                [&](absl::StatusOr<std::string> v) { got = std::move(v); });
  EXPECT_EQ(executor.RunAll(), 1u);  // With a tier, the load is a task.
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value_or(""), "k#1");
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(tier_->record("k")->value.value_or(""), "k#1");
}

// The same failure once the fleet's value is past stale_if_error (or without
// one, as here): the error is the key's answer, which the fleet remembers.
TEST_F(FleetTest, AnErrorIsRememberedFleetWide) {
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SingleFlight> a(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, options),
      b(tier_, &fleet_loads_, absl::ZeroDuration(), SingleFlight{}, options);
  a.next_error = absl::UnavailableError("backend down");
  EXPECT_EQ(a.cache->Get("k").status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::string> got = b.cache->Get("k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "backend down");
  EXPECT_EQ(b.loads, 0);
  // Remembered by b too, for what is left of the error's 5 s.
  EXPECT_EQ(b.cache->Get("k").status().code(), absl::StatusCode::kUnavailable);
  Advance(absl::Seconds(6), a, b);
  a.next_error = absl::OkStatus();
  EXPECT_TRUE(b.cache->Get("k").ok());
  EXPECT_EQ(fleet_loads_, 2);
}

// An asynchronous loader that drops its completion (shedding work, or its
// event loop stopping as the pod shuts down) fails that pod's callers, but
// is not the key's answer: the fleet does not remember it, and the lease goes
// back so that another pod loads the key at once.
TEST_F(FleetTest, ADroppedCompletionIsNotRememberedFleetWide) {
  ManualClock clock(absl::UnixEpoch() + absl::Hours(1));
  ManualExecutor executor;
  Cache<std::string, std::string, SingleFlight> dropping(
      Cache<std::string, std::string, SingleFlight>::AsyncLoader(
          [](const std::string&, Completion<std::string>) {}),
      Options{.ttl = absl::Seconds(10),
              .clock = &clock,
              .executor = &executor,
              .error_ttl = absl::Seconds(5),
              .shared = tier_});
  absl::StatusOr<std::string> got = dropping.Get("k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(dropping.stats().leases_acquired, 1u);
  EXPECT_EQ(tier_->record("k"), std::nullopt);
  EXPECT_EQ(tier_->releases(), 1);
  // Remembered here, as any failure of this pod's loads is.
  EXPECT_EQ(dropping.Get("k").status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(dropping.stats().negative_hits, 1u);
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SingleFlight> b(tier_, &fleet_loads_, absl::ZeroDuration(),
                      SingleFlight{}, options);
  EXPECT_EQ(b.cache->Get("k").value_or(""), "k#1");
  EXPECT_EQ(b.loads, 1);
}

// A failed refresh leaves the tier's record, the fleet's last good value:
// locally a failed refresh keeps what it refreshed, and so does the tier.
TEST_F(FleetTest, AFailedRefreshLeavesTheTiersValue) {
  Options options{.error_ttl = absl::Seconds(5)};
  Pod<SoftTtl> a(tier_, &fleet_loads_, absl::ZeroDuration(), SoftTtl{},
                 options),
      b(tier_, &fleet_loads_, absl::ZeroDuration(), SoftTtl{}, options);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a, b);  // Stale, inside the stale window.
  a.next_error = absl::UnavailableError("backend down");
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // At once; a refresh is queued.
  EXPECT_EQ(a.executor.RunAll(), 1u);    // It fails.
  ASSERT_TRUE(tier_->record("k").has_value());
  EXPECT_EQ(tier_->record("k")->value.value_or(""), "k#1");
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // Kept here too,
  EXPECT_EQ(a.executor.RunAll(), 0u);    // and not refreshed within 5 s.
  // A pod without a copy is not answered with a's error.
  EXPECT_TRUE(b.cache->Get("k").ok());
}

TEST_F(FleetTest, InvalidateReachesTheOtherCachesAndTheTier) {
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  ASSERT_EQ(*b.cache->Get("k"), "k#1");
  b.cache->Invalidate("k");
  EXPECT_EQ(a.cache->GetIfPresent("k"), std::nullopt);
  EXPECT_FALSE(tier_->record("k").has_value());
  EXPECT_EQ(*a.cache->Get("k"), "k#2");
}

TEST_F(FleetTest, PutWritesThroughAndOtherCachesTakeTheNewValue) {
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  ASSERT_EQ(*b.cache->Get("k"), "k#1");
  a.cache->Put("k", "put");
  EXPECT_EQ(a.cache->GetIfPresent("k"), "put");
  EXPECT_EQ(b.cache->GetIfPresent("k"), std::nullopt);  // Dropped.
  EXPECT_EQ(*b.cache->Get("k"), "put");                 // From the tier.
  EXPECT_EQ(fleet_loads_, 1);
}

// The tier tells every cache of a write but the one that made it. A `Get`
// of that cache between its local removal and the tier's takes the record
// the tier still holds: the value must not outlive the `Invalidate`.
TEST_F(FleetTest, AGetDuringInvalidateDoesNotKeepTheInvalidatedValue) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  tier_->set_before_write([&] { EXPECT_EQ(*a.cache->Get("k"), "k#1"); });
  a.cache->Invalidate("k");
  tier_->set_before_write(nullptr);
  EXPECT_EQ(a.cache->GetIfPresent("k"), std::nullopt);
  EXPECT_FALSE(tier_->record("k").has_value());
  EXPECT_EQ(*a.cache->Get("k"), "k#2");
}

// The same for `Put`: here the `Put`'s own entry is evicted while its write
// is on the way, and a `Get` takes the record the write replaces.
TEST_F(FleetTest, AGetDuringPutDoesNotKeepTheReplacedValue) {
  Pod<SingleFlight> a(tier_, &fleet_loads_, {}, {},
                      {.max_entries = 1, .shards = 1});
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  tier_->set_before_write([&] {
    ASSERT_TRUE(a.cache->Get("other").ok());  // Evicts the Put's entry.
    EXPECT_EQ(*a.cache->Get("k"), "k#1");     // The tier's, not yet replaced.
  });
  a.cache->Put("k", "put");
  tier_->set_before_write(nullptr);
  EXPECT_NE(a.cache->GetIfPresent("k"), "k#1");
  EXPECT_EQ(*a.cache->Get("k"), "put");  // From the tier.
  EXPECT_EQ(fleet_loads_, 2);            // "k" once, "other" once.
}

// 0.0 and -0.0 are one key to the default Hash and Eq, so they must be one
// key to the tier too: a Put of 0.0 in one process replaces what another
// loaded for -0.0, which then takes the new value, not its old record.
TEST_F(FleetTest, APutOfZeroReplacesWhatAnotherProcessLoadedForMinusZero) {
  ManualClock clock(absl::UnixEpoch() + absl::Hours(1));
  ManualExecutor executor;
  int loads = 0;
  Options options{.ttl = absl::Seconds(10), .clock = &clock};
  options.executor = &executor;
  options.shared = tier_;
  const auto loader = [&](double key) -> absl::StatusOr<std::string> {
    return absl::StrCat("loaded ", key, " #", ++loads);
  };
  Cache<double, std::string, SingleFlight> a(loader, options);
  Cache<double, std::string, SingleFlight> b(loader, options);
  ASSERT_EQ(*b.Get(-0.0), "loaded -0 #1");
  a.Put(0.0, "put");
  EXPECT_EQ(b.GetIfPresent(-0.0), std::nullopt);  // Told of the write.
  EXPECT_EQ(*b.Get(-0.0), "put");                 // The tier's new record.
  EXPECT_EQ(loads, 1);
}

TEST_F(FleetTest, AFillThatLostItsLeaseStoresNothingAnywhere) {
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  // While a loads under the lease, b invalidates the key (fleet-wide).
  a.loader_hook = [&] {
    a.loader_hook = nullptr;
    b.cache->Invalidate("k");
  };
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // Its own caller gets the value...
  EXPECT_EQ(a.cache->GetIfPresent("k"), std::nullopt);  // ...stored nowhere.
  EXPECT_FALSE(tier_->record("k").has_value());
}

TEST_F(FleetTest, ARefreshWhoseFillLostItsLeaseLeavesTheEntryRefreshable) {
  Pod<SoftTtl> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(11), a);
  // While a refreshes, its lease lapses and another process takes the key's:
  // a's fill loses, and stores nothing, but its stale entry stays.
  a.loader_hook = [&] {
    a.loader_hook = nullptr;
    tier_clock_.Advance(absl::Minutes(10));
    tier_->TakeLease("k");
  };
  EXPECT_EQ(*a.cache->Get("k"), "k#1");
  EXPECT_EQ(a.executor.RunAll(), 1u);
  EXPECT_EQ(a.loads, 2);
  EXPECT_EQ(*a.cache->GetIfPresent("k"), "k#1");
  // The next stale hit asks for a refresh again: the key is not left marked
  // as refreshing by the one that lost.
  EXPECT_EQ(*a.cache->Get("k"), "k#1");
  EXPECT_EQ(a.executor.pending(), 1u);
  // Not run: it would wait max_load_age for the other process's fill. The
  // cache drops it when destroyed.
}

TEST_F(FleetTest, AnUndecodableRecordIsAMissThatTheNextLoadReplaces) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  a.cache.reset();
  Cache<std::string, int, SingleFlight> numbers(
      [](const std::string&) -> absl::StatusOr<int> { return 42; },
      Options{.clock = &a.clock, .shared = tier_});
  tier_->StoreRaw("k", SharedFill{.value = std::string("not a number"),
                                  .fresh_for = absl::Seconds(10),
                                  .keep_for = absl::Seconds(10)});
  EXPECT_EQ(*numbers.Get("k"), 42);
  EXPECT_EQ(numbers.stats().shared_errors, 1u);
  EXPECT_EQ(numbers.stats().loads, 1u);
  EXPECT_EQ(*tier_->record("k")->value, "42");  // Replaced.
}

TEST_F(FleetTest, AValueOverTheTiersLimitIsServedAndKeptLocally) {
  tier_->set_max_value_bytes(2);  // "k#1" is 3 bytes.
  Pod<SingleFlight> a(tier_, &fleet_loads_), b(tier_, &fleet_loads_);
  EXPECT_EQ(*a.cache->Get("k"), "k#1");
  EXPECT_FALSE(tier_->record("k").has_value());
  EXPECT_EQ(tier_->releases(), 1);       // The lease went back at once.
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // Kept locally.
  EXPECT_EQ(*b.cache->Get("k"), "k#2");  // b loads its own.
}

TEST_F(FleetTest, AFailingTierIsCountedAndTheCacheLoadsOnItsOwn) {
  Pod<SingleFlight> a(tier_, &fleet_loads_);
  tier_->set_failure(absl::UnavailableError("connection refused"));
  EXPECT_EQ(*a.cache->Get("k"), "k#1");
  EXPECT_EQ(a.cache->stats().shared_errors, 1u);
  a.cache->Put("p", "v");  // Write-through fails: counted, Put still holds.
  EXPECT_EQ(a.cache->GetIfPresent("p"), "v");
  EXPECT_EQ(a.cache->stats().shared_errors, 2u);
  tier_->set_failure(absl::OkStatus());
  Advance(absl::Seconds(10), a);
  EXPECT_EQ(*a.cache->Get("k"), "k#2");
  EXPECT_EQ(a.cache->stats().leases_acquired, 1u);
}

// SharedTier's methods never throw, but a tier's own allocation can fail: a
// cache takes the exception as a tier error, on a refresh too (which runs
// where an exception would end the process), and a Fill that throws leaves
// the value stored locally.
TEST_F(FleetTest, ATierThatThrowsIsATierErrorAndTheCacheLoadsOnItsOwn) {
  Pod<SoftTtl> a(tier_, &fleet_loads_);
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  tier_->set_throws(true);
  EXPECT_EQ(*a.cache->Get("cold"), "cold#2");  // Lookup throws.
  Advance(absl::Seconds(11), a);
  EXPECT_EQ(*a.cache->Get("k"), "k#1");  // Stale; a refresh is queued.
  EXPECT_EQ(a.executor.RunAll(), 1u);
  EXPECT_EQ(*a.cache->Get("k"), "k#3");
  EXPECT_EQ(a.cache->stats().shared_errors, 2u);
  tier_->set_throws(false);

  // Fill throws: the lease was granted, the value is stored here.
  a.loader_hook = [&] { tier_->set_throws(true); };
  EXPECT_EQ(*a.cache->Get("fill"), "fill#4");
  EXPECT_EQ(a.cache->GetIfPresent("fill"), "fill#4");
  EXPECT_EQ(a.cache->stats().shared_errors, 3u);
  a.loader_hook = nullptr;
  tier_->set_throws(false);

  // AwaitChange throws while another process holds the lease: this one
  // loads on its own rather than wait.
  tier_->TakeLease("held");
  tier_->set_await_throws(true);
  Pod<SingleFlight> b(tier_, &fleet_loads_);
  EXPECT_EQ(*b.cache->Get("held"), "held#5");
  EXPECT_EQ(b.loads, 1);
  EXPECT_EQ(tier_->awaits(), 1);
  EXPECT_EQ(b.cache->stats().shared_errors, 1u);
}

TEST_F(FleetTest, AnEarlyRefreshAsksForANewerValueThanItHas) {
  // XFetch refreshes before expiry; the tier still holds the value it has.
  // It must not be handed its own value back as "fresh".
  Pod<XFetch> a(
      tier_, &fleet_loads_, absl::ZeroDuration(),
      XFetch{.beta = 1000});  // Refreshes at once past the quiet window.
  a.loader_hook = [&] { a.clock.Advance(absl::Milliseconds(100)); };
  tier_clock_.Advance(absl::Milliseconds(100));
  ASSERT_EQ(*a.cache->Get("k"), "k#1");
  Advance(absl::Seconds(5), a);
  // Early: each hit refreshes with probability e^(-5s/100s); until one does.
  for (int i = 0; i < 100 && a.executor.pending() == 0; ++i) {
    ASSERT_EQ(*a.cache->Get("k"), "k#1");
  }
  EXPECT_EQ(a.executor.RunAll(), 1u);
  EXPECT_EQ(fleet_loads_, 2);
  EXPECT_EQ(*a.cache->Get("k"), "k#2");
}

struct NoCodec {
  int x = 0;
};

TEST(FleetConstruction, ASharedTierNeedsACodecForTheValueType) {
  ManualClock clock;
  auto tier = std::make_shared<FakeSharedTier>(&clock);
  try {
    Cache<std::string, NoCodec, SingleFlight> cache(
        [](const std::string&) -> absl::StatusOr<NoCodec> { return NoCodec{}; },
        Options{.shared = tier});
    FAIL() << "constructed";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("paddock::Codec<V>"));
  }
  // Without a shared tier the same types are fine.
  Cache<std::string, NoCodec, SingleFlight> local(
      [](const std::string&) -> absl::StatusOr<NoCodec> { return NoCodec{}; });
  EXPECT_TRUE(local.Get("k").ok());
}

// A pre-forking server makes versions in the parent, then forks workers:
// each must write versions of its own, or a pod would take another's newer
// record for the copy it has (docs/fleet.md, the record's `version`).
TEST(SharedVersion, AForkedChildWritesVersionsOfItsOwn) {
  const std::string before = internal::NewSharedVersion();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string v = internal::NewSharedVersion();
    const bool written =
        write(fds[1], v.data(), v.size()) == static_cast<ssize_t>(v.size());
    _exit(written ? 0 : 1);
  }
  close(fds[1]);
  std::string in_child;
  char buf[128];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) {
    in_child.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string in_parent = internal::NewSharedVersion();
  EXPECT_NE(in_child, in_parent);
  EXPECT_NE(in_child, before);
  EXPECT_THAT(in_child, ::testing::StartsWith(absl::StrCat(
                            absl::Hex(static_cast<uint64_t>(child)), ".")));
}

}  // namespace
}  // namespace paddock
