// Tests of paddock/internal/admission.h on a bare shard: what each entry
// point (a Get with a blocking or an asynchronous loader, a GetAsync that
// queues its load or starts it at once) does when its key has nothing
// registered, a live load, a queued one, a queued refresh, one too old to
// wait for, or one hung on an executor thread; coalescing and not.

#include "paddock/internal/admission.h"

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "paddock/internal/flight.h"
#include "paddock/internal/shard.h"

namespace paddock::internal {
namespace {

using TestFlight = KeyedFlight<int, int>;
using TestShard =
    Shard<int, int, TestFlight, absl::Hash<int>, std::equal_to<int>>;
using As = AdmitAs<TestFlight>;
using State = TestFlight::State;

constexpr int kKey = 7;
constexpr size_t kHash = 0x1234;
constexpr int64_t kMaxAge = 1000;

class AdmissionTest : public ::testing::Test {
 protected:
  template <bool kCoalesce>
  Joined<TestFlight> Admit(const As& as, int64_t now,
                           TestShard::Pending* pending = nullptr) {
    TestShard::Writer w(shard_);
    return RegisterOrJoin<kCoalesce>(w, shard_, kKey, kHash, now, kMaxAge, as,
                                     pending);
  }
  std::shared_ptr<TestFlight> RegisterFlight(int64_t started_at, State state,
                                             LoadSlots::Ticket slot = 0) {
    auto flight =
        std::make_shared<TestFlight>(kKey, kHash, started_at, state, slot);
    TestShard::Writer w(shard_);
    shard_.Register(w, kKey, kHash, flight);
    return flight;
  }
  bool Registered(const TestFlight* flight) {
    TestShard::Writer w(shard_);
    return shard_.IsRegistered(w, kKey, kHash, flight, /*drop=*/false);
  }

  TestShard shard_;
};

// -- Coalescing --

TEST_F(AdmissionTest, BlockingGetPendsWhenNothingIsRegisteredAndIsJoined) {
  TestShard::Pending pending;
  const Joined<TestFlight> lead = Admit<true>(As::Get(true), 5, &pending);
  EXPECT_EQ(lead.role, Role::kLeadPending);
  EXPECT_EQ(lead.flight, nullptr);
  EXPECT_EQ(pending.started_at, 5);

  // The first joiner makes the pending load's flight and waits on it.
  TestShard::Pending unused;
  const Joined<TestFlight> join = Admit<true>(As::Get(true), 6, &unused);
  EXPECT_EQ(join.role, Role::kJoin);
  ASSERT_NE(join.flight, nullptr);
  EXPECT_EQ(join.flight, pending.flight);
  EXPECT_EQ(join.flight->joined(), 1);
  // So does a GetAsync.
  EXPECT_EQ(Admit<true>(As::GetAsync(false), 7).role, Role::kJoin);
  EXPECT_EQ(pending.flight->joined(), 2);
}

TEST_F(AdmissionTest, GetWithAnAsyncLoaderRegistersARunningFlightUnjoined) {
  const Joined<TestFlight> lead = Admit<true>(As::Get(false), 5);
  EXPECT_EQ(lead.role, Role::kLead);
  ASSERT_NE(lead.flight, nullptr);
  EXPECT_FALSE(lead.flight->queued());
  EXPECT_EQ(lead.flight->joined(), 0);
  EXPECT_TRUE(Registered(lead.flight.get()));

  const Joined<TestFlight> join = Admit<true>(As::Get(false), 6);
  EXPECT_EQ(join.role, Role::kJoin);
  EXPECT_EQ(join.flight, lead.flight);
  EXPECT_EQ(lead.flight->joined(), 1);
}

TEST_F(AdmissionTest, GetAsyncQueuesItsLoadJoinedAndAGetClaimsIt) {
  const Joined<TestFlight> lead = Admit<true>(As::GetAsync(false), 5);
  EXPECT_EQ(lead.role, Role::kLead);
  ASSERT_NE(lead.flight, nullptr);
  EXPECT_TRUE(lead.flight->queued());
  EXPECT_EQ(lead.flight->joined(), 1);  // Its leader waits on it.

  // Another GetAsync joins the queued load; it never claims it.
  const Joined<TestFlight> join = Admit<true>(As::GetAsync(false), 6);
  EXPECT_EQ(join.role, Role::kJoin);
  EXPECT_EQ(join.flight, lead.flight);
  EXPECT_TRUE(lead.flight->queued());

  // A blocking Get runs it itself, from its own `now`.
  TestShard::Pending pending;
  const Joined<TestFlight> claim = Admit<true>(As::Get(true), 9, &pending);
  EXPECT_EQ(claim.role, Role::kLead);
  EXPECT_EQ(claim.flight, lead.flight);
  EXPECT_FALSE(claim.claimed_refresh);
  EXPECT_FALSE(lead.flight->queued());
  EXPECT_EQ(lead.flight->started_at(), 9);
  EXPECT_EQ(lead.flight->joined(), 2);  // The claimer does not join.
}

TEST_F(AdmissionTest, GetAsyncThatStartsItsLoadRegistersItRunning) {
  const Joined<TestFlight> lead = Admit<true>(As::GetAsync(true), 5);
  EXPECT_EQ(lead.role, Role::kLead);
  EXPECT_FALSE(lead.flight->queued());
  EXPECT_EQ(lead.flight->joined(), 1);
  // Running, so a Get joins rather than claims.
  EXPECT_EQ(Admit<true>(As::Get(false), 6).role, Role::kJoin);
}

TEST_F(AdmissionTest, GetClaimsAQueuedRefreshAsARefresh) {
  const auto refresh = RegisterFlight(0, State::kQueued, /*slot=*/3);
  const Joined<TestFlight> claim = Admit<true>(As::Get(false), 5 * kMaxAge);
  EXPECT_EQ(claim.role, Role::kLead);  // Queued: never too old.
  EXPECT_EQ(claim.flight, refresh);
  EXPECT_TRUE(claim.claimed_refresh);
}

TEST_F(AdmissionTest, ALoadTooOldToWaitForIsReplaced) {
  const auto old = RegisterFlight(0, State::kRunning);
  const Joined<TestFlight> lead = Admit<true>(As::Get(false), kMaxAge + 1);
  EXPECT_EQ(lead.role, Role::kLead);
  EXPECT_NE(lead.flight, old);
  EXPECT_TRUE(Registered(lead.flight.get()));
  EXPECT_FALSE(Registered(old.get()));

  // A blocking Get pends in its place the same way.
  RegisterFlight(0, State::kRunning);
  TestShard::Pending pending;
  EXPECT_EQ(Admit<true>(As::Get(true), kMaxAge + 1, &pending).role,
            Role::kLeadPending);
}

TEST_F(AdmissionTest, OnlyGetAsyncWaitsForALoadHungOnAnExecutorThread) {
  const auto hung = RegisterFlight(0, State::kRunning);
  hung->MarkOnExecutor();
  const Joined<TestFlight> join =
      Admit<true>(As::GetAsync(false), 10 * kMaxAge);
  EXPECT_EQ(join.role, Role::kJoin);
  EXPECT_EQ(join.flight, hung);
  EXPECT_EQ(hung->joined(), 1);

  // A blocking Get starts a fresh load on its own thread.
  const Joined<TestFlight> lead = Admit<true>(As::Get(false), 10 * kMaxAge);
  EXPECT_EQ(lead.role, Role::kLead);
  EXPECT_NE(lead.flight, hung);
}

TEST_F(AdmissionTest, AbandoningAJoinedPendingLoadUnregistersItForItsJoiners) {
  TestShard::Pending pending;
  ASSERT_EQ(Admit<true>(As::Get(true), 5, &pending).role, Role::kLeadPending);
  TestShard::Pending unused;
  const Joined<TestFlight> join = Admit<true>(As::Get(true), 6, &unused);
  ASSERT_EQ(join.role, Role::kJoin);

  EXPECT_EQ(AbandonPending<true>(shard_, &pending), join.flight);
  // Nothing registered any more: the next caller leads.
  TestShard::Pending next;
  EXPECT_EQ(Admit<true>(As::Get(true), 7, &next).role, Role::kLeadPending);
}

TEST_F(AdmissionTest, AbandoningAnUnjoinedPendingLoadLeavesNobodyToAnswer) {
  TestShard::Pending pending;
  ASSERT_EQ(Admit<true>(As::Get(true), 5, &pending).role, Role::kLeadPending);
  EXPECT_EQ(AbandonPending<true>(shard_, &pending), nullptr);
  TestShard::Pending next;
  EXPECT_EQ(Admit<true>(As::Get(true), 7, &next).role, Role::kLeadPending);
}

// -- Not coalescing: every caller leads --

TEST_F(AdmissionTest, UncoalescedCallersAllLeadAndShareTheRegistration) {
  TestShard::Pending first;
  EXPECT_EQ(Admit<false>(As::Get(true), 5, &first).role, Role::kLeadPending);
  EXPECT_EQ(first.started_at, 5);

  TestShard::Pending second;
  const Joined<TestFlight> runner = Admit<false>(As::Get(true), 6, &second);
  EXPECT_EQ(runner.role, Role::kLead);  // Beside the first, not waiting.
  ASSERT_NE(runner.flight, nullptr);
  EXPECT_EQ(runner.flight, first.flight);
  EXPECT_EQ(runner.flight->joined(), 0);

  const Joined<TestFlight> async = Admit<false>(As::GetAsync(false), 7);
  EXPECT_EQ(async.role, Role::kLead);
  EXPECT_EQ(async.flight, first.flight);
  EXPECT_FALSE(async.flight->queued());  // Runs at once, never queued.
}

TEST_F(AdmissionTest, UncoalescedGetAsyncRegistersARunningFlight) {
  const Joined<TestFlight> lead = Admit<false>(As::GetAsync(false), 5);
  EXPECT_EQ(lead.role, Role::kLead);
  ASSERT_NE(lead.flight, nullptr);
  EXPECT_FALSE(lead.flight->queued());
  EXPECT_EQ(lead.flight->joined(), 0);
  EXPECT_TRUE(Registered(lead.flight.get()));
}

TEST_F(AdmissionTest, AbandonedUncoalescedRunnerLeavesNobodyToAnswer) {
  TestShard::Pending first;
  ASSERT_EQ(Admit<false>(As::Get(true), 5, &first).role, Role::kLeadPending);
  TestShard::Pending second;
  ASSERT_EQ(Admit<false>(As::Get(true), 6, &second).role, Role::kLead);
  EXPECT_EQ(AbandonPending<false>(shard_, &first), nullptr);
  EXPECT_TRUE(first.left_runners);
}

}  // namespace
}  // namespace paddock::internal
