// Tests of paddock/internal/entry.h: a compact entry (kFixed, kFixedExpiry)
// gives back exactly the times it was given, whether it derives them from
// the cache's fixed lifetime or keeps them in its extras, and stays small.

#include "paddock/internal/entry.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// SoftTtl's offsets for ttl 10 s, stale_for 30 s, stale_if_error 5 s.
constexpr FixedTimes kFixed{.quiet = 10'000'000'000,
                            .expires = 10'000'000'000,
                            .keep = 40'000'000'000,
                            .serve_on_error = 15'000'000'000};

using Compact = Entry<uint64_t, uint64_t, EntryLayout::kFixed>;
using Expiry = Entry<uint64_t, uint64_t, EntryLayout::kFixedExpiry>;
using Full = Entry<uint64_t, uint64_t, EntryLayout::kFull>;

void ExpectTimes(const EntryTimes& want, const EntryTimes& got) {
  EXPECT_EQ(got.loaded_at, want.loaded_at);
  EXPECT_EQ(got.quiet_until, want.quiet_until);
  EXPECT_EQ(got.expires_at, want.expires_at);
  EXPECT_EQ(got.keep_until, want.keep_until);
  EXPECT_EQ(got.stale_if_error_until, want.stale_if_error_until);
  EXPECT_EQ(got.load_duration, want.load_duration);
}

template <typename E>
void ExpectAccessors(const E& e, const EntryTimes& want) {
  ExpectTimes(want, e.times(kFixed));
  EXPECT_EQ(e.loaded_at(kFixed), want.loaded_at);
  EXPECT_EQ(e.expires_at(kFixed), want.expires_at);
  EXPECT_EQ(e.keep_until(kFixed), want.keep_until);
  EXPECT_EQ(e.stale_if_error_until(kFixed), want.stale_if_error_until);
  EXPECT_EQ(e.load_duration(kFixed), want.load_duration);
  EXPECT_EQ(e.quiet_until, want.quiet_until);
}

TEST(EntryTest, ACompactEntryOfAUint64KeyAndValueFitsA64ByteChunk) {
  // 56 bytes: malloc's 8-byte header makes it one 64-byte chunk.
  EXPECT_LE(sizeof(Compact), 56u);
  EXPECT_LE(sizeof(Expiry), 64u);  // An 80-byte chunk.
  EXPECT_LE(sizeof(Full), 96u);
}

TEST(EntryTest, ACompactEntryDerivesTheTimesOfTheFixedLifetime) {
  const EntryTimes t = kFixed.At(/*loaded_at=*/1'000, /*load_duration=*/7);
  Compact e(42, 1);
  e.emplace_value(2);
  e.SetTimes(t, kFixed);
  ExpectAccessors(e, t);
  EXPECT_EQ(e.shared_version(), nullptr);
  EXPECT_TRUE(e.error().ok());
  EXPECT_EQ(e.error_until(), kMin);
  EXPECT_EQ(e.evict_after(kFixed), t.keep_until);
}

// A schedule of the shared tier's, not the fixed one.
constexpr EntryTimes kTierTimes{.loaded_at = 1'000,
                                .quiet_until = 5'000,
                                .expires_at = 6'000,
                                .keep_until = 9'000,
                                .stale_if_error_until = 7'000,
                                .load_duration = 3};

// Either layout gives back a schedule it cannot derive, exactly.
template <typename E>
void ExpectKeepsAnySchedule() {
  E e(42, 1);
  e.emplace_value(2);
  e.SetTimes(kTierTimes, kFixed);
  ExpectAccessors(e, kTierTimes);
}

TEST(EntryTest, ACompactEntryKeepsOtherTimesInItsExtras) {
  ExpectKeepsAnySchedule<Compact>();
}

TEST(EntryTest, AFixedExpiryEntryKeepsOtherTimesInItsExtras) {
  ExpectKeepsAnySchedule<Expiry>();
}

// XFetch's schedule: the quiet window shrinks with the load's duration, the
// other offsets are kFixed's.
EntryTimes XFetchLike(int64_t loaded_at, int64_t load_duration) {
  EntryTimes t = kFixed.At(loaded_at, load_duration);
  t.quiet_until = loaded_at + kFixed.quiet - 21 * load_duration;
  return t;
}

TEST(EntryTest, AFixedExpiryEntryDerivesAllButItsQuietWindow) {
  for (int64_t duration : {int64_t{0}, int64_t{7}, int64_t{300'000'000}}) {
    const EntryTimes t = XFetchLike(/*loaded_at=*/1'000, duration);
    Expiry e(42, 1);
    e.emplace_value(2);
    e.SetTimes(t, kFixed);
    EXPECT_FALSE(e.has_extras()) << duration;
    ExpectAccessors(e, t);
    EXPECT_EQ(e.evict_after(kFixed), t.keep_until);
  }
}

TEST(EntryTest, AFixedExpiryEntryWhoseOtherTimesAreNotFixedKeepsThemExactly) {
  // What a policy that declares kFixedExpiry wrongly gives: an expiry that
  // depends on the load's duration.
  EntryTimes t = XFetchLike(1'000, 7);
  t.expires_at += 7;
  Expiry e(42, 1);
  e.SetTimes(t, kFixed);
  EXPECT_TRUE(e.has_extras());
  ExpectAccessors(e, t);
  // And one that saturated.
  const EntryTimes late = XFetchLike(kMax - 20'000'000'000, 1);
  ASSERT_EQ(late.keep_until, kMax);
  Expiry f(42, 1);
  f.SetTimes(late, kFixed);
  ExpectAccessors(f, late);
}

TEST(EntryTest, AFullEntryStoresEveryTimeInline) {
  ExpectKeepsAnySchedule<Full>();
}

TEST(EntryTest, ACompactEntryWhoseTimesSaturatedKeepsThemExactly) {
  // Near the end of the int64 range the fixed offsets saturate: quiet_until
  // minus the offset is then not the load time.
  const int64_t late = kMax - 20'000'000'000;
  const EntryTimes t = kFixed.At(late, 1);
  ASSERT_EQ(t.keep_until, kMax);
  Compact e(42, 1);
  e.SetTimes(t, kFixed);
  ExpectAccessors(e, t);
}

// SetFixedTimes is SetTimes of the fixed schedule, in either layout, near
// the int64 range's ends too (where it must fall back to the extras).
template <typename E>
void ExpectFixedTimesAsSetTimes(int64_t loaded_at) {
  const EntryTimes t = kFixed.At(loaded_at, 7);
  E fast(42, 1);
  fast.SetFixedTimes(loaded_at, 7, kFixed);
  ExpectAccessors(fast, t);
  E slow(42, 1);
  slow.SetTimes(t, kFixed);
  EXPECT_EQ(fast.has_extras(), slow.has_extras()) << loaded_at;
}

TEST(EntryTest, SetFixedTimesStoresWhatSetTimesOfTheFixedScheduleDoes) {
  for (int64_t loaded_at :
       {int64_t{1'000}, int64_t{0}, int64_t{-5'000}, kMax - 20'000'000'000,
        kMax - 10'000'000'000, kMax, kMin, kMin + 1}) {
    ExpectFixedTimesAsSetTimes<Compact>(loaded_at);
    ExpectFixedTimesAsSetTimes<Full>(loaded_at);
  }
}

// Extras made after derivable times `t` were set keep them.
template <typename E>
void ExpectExtrasKeepTheTimes(const EntryTimes& t) {
  E e(42, 1);
  e.emplace_value(2);
  e.SetTimes(t, kFixed);
  ASSERT_FALSE(e.has_extras());
  e.mutable_extras(kFixed).shared_version = "v1";
  ExpectAccessors(e, t);
  ASSERT_NE(e.shared_version(), nullptr);
  EXPECT_EQ(*e.shared_version(), "v1");
}

TEST(EntryTest, ExtrasMadeAfterTheTimesKeepThem) {
  ExpectExtrasKeepTheTimes<Compact>(kFixed.At(1'000, 7));
  ExpectExtrasKeepTheTimes<Expiry>(XFetchLike(1'000, 7));
}

TEST(EntryTest, TimesSetAfterTheExtrasGoThere) {
  const EntryTimes t = kFixed.At(1'000, 7);
  Compact e(42, 1);
  e.mutable_extras(kFixed).error = absl::UnavailableError("down");
  e.mutable_extras(kFixed).error_until = 50'000'000'000;
  e.SetTimes(t, kFixed);
  ExpectAccessors(e, t);
  EXPECT_EQ(e.error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(e.evict_after(kFixed), 50'000'000'000);
}

TEST(EntryTest, AnErrorEntryKeepsTheValueAndScheduleItReplaces) {
  const EntryTimes t = kFixed.At(1'000, 7);
  Entry<std::string, std::string, EntryLayout::kFixed> current(42, "k");
  current.emplace_value("v");
  current.SetTimes(t, kFixed);
  auto kept = MakeErrorEntry(42, std::string("k"), &current,
                             /*keep_value=*/true, absl::InternalError("x"),
                             /*started=*/2'000, /*finished=*/3'000,
                             absl::Seconds(1), kFixed);
  ASSERT_TRUE(kept->has_value());
  EXPECT_EQ(kept->value(), "v");
  ExpectAccessors(*kept, t);
  EXPECT_EQ(kept->error_until(), 3'000 + 1'000'000'000);

  auto bare = MakeErrorEntry(42, std::string("k"), &current,
                             /*keep_value=*/false, absl::InternalError("x"),
                             2'000, 3'000, absl::Seconds(1), kFixed);
  EXPECT_FALSE(bare->has_value());
  EXPECT_EQ(bare->loaded_at(kFixed), 3'000);
  EXPECT_EQ(bare->expires_at(kFixed), kMin);
  EXPECT_EQ(bare->keep_until(kFixed), 3'000 + 1'000'000'000);
  EXPECT_EQ(bare->load_duration(kFixed), 1'000);
}

}  // namespace
}  // namespace paddock::internal
