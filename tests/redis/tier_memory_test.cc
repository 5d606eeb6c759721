// RedisTier out of memory: every method but Subscribe promises never to
// throw (SharedTier). This binary replaces operator new to fail the calling
// thread's k-th allocation inside one call, for every k up to the call's
// last, and checks that the call returns a status instead of throwing, and
// that a lease Redis may have granted before the failure is given back
// rather than held until it lapses. Its own binary: the replacement is
// process-wide. Not under ThreadSanitizer, whose runtime defines operator
// new itself.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_fixture.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PADDOCK_TEST_NO_FAILING_NEW 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PADDOCK_TEST_NO_FAILING_NEW 1
#endif

namespace {
// Allocations of this thread left before one fails; -1: none fails; -2:
// one failed.
thread_local int allocations_before_failure = -1;
#ifdef PADDOCK_TEST_NO_FAILING_NEW
constexpr bool kFailsAllocations = false;
#else
constexpr bool kFailsAllocations = true;
#endif
}  // namespace

#ifndef PADDOCK_TEST_NO_FAILING_NEW
// Out of line, so the compiler does not pair malloc/free with new/delete.
__attribute__((noinline)) void* operator new(size_t size) {
  if (allocations_before_failure == 0) {
    allocations_before_failure = -2;  // Failed; the next ones succeed.
    throw std::bad_alloc();
  }
  if (allocations_before_failure > 0) --allocations_before_failure;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept {
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#endif

namespace paddock {
namespace {

using ::paddock::testing::RedisTest;
using Lease = SharedLookup::Lease;

// Fails the calling thread's `k`-th allocation (from 0) while it lives.
class FailAllocation {
 public:
  explicit FailAllocation(int k) { allocations_before_failure = k; }
  ~FailAllocation() { allocations_before_failure = -1; }
  FailAllocation(const FailAllocation&) = delete;
  FailAllocation& operator=(const FailAllocation&) = delete;
  // Whether the failure happened (the countdown ran out).
  static bool Happened() { return allocations_before_failure == -2; }
};

SharedFill ValueFill(std::string value) {
  SharedFill fill;
  fill.value = std::move(value);
  fill.fresh_for = absl::Seconds(10);
  fill.keep_for = absl::Seconds(20);
  fill.serve_on_error_for = absl::Seconds(5);
  fill.load_duration = absl::Milliseconds(1);
  return fill;
}

class RedisTierMemoryTest : public RedisTest {
 protected:
  void SetUp() override {
    if (!kFailsAllocations) {
      GTEST_SKIP() << "ThreadSanitizer owns operator new";
    }
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    RedisOptions options = TierOptions();
    // Long: a lease left held would block the other tier for the whole test.
    options.lease_for = absl::Seconds(30);
    absl::StatusOr<std::shared_ptr<RedisTier>> a = RedisTier::Connect(options);
    absl::StatusOr<std::shared_ptr<RedisTier>> b = RedisTier::Connect(options);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *std::move(a);
    b_ = *std::move(b);
    // Once per process and thread, before any allocation fails: absl's
    // random pool (a failure inside its call_once would leave it locked
    // for good) and this thread's generator of lease tokens.
    absl::StatusOr<SharedLookup> warm =
        a_->Lookup("warm", "", absl::Seconds(1));
    ASSERT_TRUE(warm.ok()) << warm.status();
    ASSERT_TRUE(a_->Release("warm", warm->lease_token).ok());
  }

  // Whether no lease on `key` holds `b_` back within a few seconds (a lease
  // given back in the background goes soon; a leaked one not for a minute).
  bool NoLeaseHoldsTheOtherTierBack(const std::string& key) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      absl::StatusOr<SharedLookup> other =
          b_->Lookup(key, "", absl::Seconds(1));
      if (other.ok() && other->lease != Lease::kHeldElsewhere) {
        if (other->lease == Lease::kGranted) {
          (void)b_->Release(key, other->lease_token);
        }
        return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  std::shared_ptr<RedisTier> a_;
  std::shared_ptr<RedisTier> b_;
};

TEST_F(RedisTierMemoryTest,
       LookupOutOfMemoryReturnsAStatusAndGivesTheLeaseBack) {
  int failures = 0;
  for (int k = 0;; ++k) {
    const std::string key = absl::StrCat("lookup", k);
    absl::StatusOr<SharedLookup> lookup = absl::UnknownError("not run");
    bool failed;
    {
      FailAllocation fail(k);
      lookup = a_->Lookup(key, "", absl::Seconds(60));
      failed = FailAllocation::Happened();
    }
    if (!failed) {
      // Past the call's last allocation: it succeeded as usual.
      ASSERT_TRUE(lookup.ok()) << lookup.status();
      EXPECT_EQ(lookup->lease, Lease::kGranted);
      break;
    }
    ++failures;
    if (lookup.ok()) {
      // The failure was absorbed (a retry, say): a granted lease is held.
      if (lookup->lease == Lease::kGranted) {
        ASSERT_TRUE(a_->Release(key, lookup->lease_token).ok());
      }
    }
    EXPECT_TRUE(NoLeaseHoldsTheOtherTierBack(key)) << "allocation " << k;
  }
  EXPECT_GT(failures, 3);
}

TEST_F(RedisTierMemoryTest, WritesOutOfMemoryReturnAStatus) {
  for (int k = 0;; ++k) {
    const std::string key = absl::StrCat("write", k);
    absl::StatusOr<SharedLookup> lookup =
        a_->Lookup(key, "", absl::Seconds(60));
    ASSERT_TRUE(lookup.ok()) << lookup.status();
    ASSERT_EQ(lookup->lease, Lease::kGranted);
    std::string trace;
    const SharedFill v = ValueFill("v");
    const SharedFill w = ValueFill("w");
    bool failed;
    {
      FailAllocation fail(k);
      absl::StatusOr<bool> filled = a_->Fill(key, lookup->lease_token, v);
      absl::Status put = a_->Put(key, w, 0);
      absl::Status invalidated = a_->Invalidate(key, 0);
      absl::Status released = a_->Release(key, lookup->lease_token);
      (void)a_->AwaitChange(key, absl::Milliseconds(1));
      failed = FailAllocation::Happened();
      allocations_before_failure = -1;
      trace =
          absl::StrCat(filled.status().ToString(), " / ", put.ToString(), " / ",
                       invalidated.ToString(), " / ", released.ToString());
    }
    if (!failed) break;
    EXPECT_TRUE(NoLeaseHoldsTheOtherTierBack(key))
        << "allocation " << k << ": " << trace;
  }
}

}  // namespace
}  // namespace paddock
