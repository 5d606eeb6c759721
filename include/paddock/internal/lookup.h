// File: paddock/internal/lookup.h
// -----------------------------------------------------------------------------
// What a stored entry answers, without a load: the hit path (an entry in its
// quiet window), the policy's answer past it (fresh, stale and refresh, a
// remembered error, a stale value standing in for one), what a caller gets
// from a load's outcome, and what a waiter gets when its wait_timeout passes.
// Reads entries under the caller's epoch guard; takes no lock.
//
// `Engine<Core>::Lookup` is made on the spot over a cache's internal::CacheCore
// and holds nothing else; thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_LOOKUP_H_
#define PADDOCK_INTERNAL_LOOKUP_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/clock.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/policy.h"

namespace paddock::internal {

// What a stored entry answers a lookup at some instant.
template <typename Entry>
struct Answer {
  enum class Served { kNothing, kFresh, kStale, kNegative, kStaleFallback };
  Served served = Served::kNothing;  // kNothing: a load is needed.
  // Readable only under the epoch guard the answer was made under.
  const Entry* entry = nullptr;
  bool refresh = false;   // Start a background refresh of `entry`.
  int64_t loaded_at = 0;  // `entry`'s, for what outlives the guard.
};

template <typename Core>
class Engine<Core>::Lookup {
 public:
  using Answer = internal::Answer<Entry>;

  explicit Lookup(const Core& core) : core_(core) {}

  // The hit path with a prepared `record` and coarse `now`: if `key`'s entry
  // is in its quiet window, marks it visited, counts the hit and copies its
  // value into `out`. Returns whether the key has an entry at all. Throws
  // what V's copy or the key's Eq throws.
  template <typename Q>
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool TakeHit(
      Shard& shard, const Q& key, size_t hash, ThreadRecord* record,
      int64_t now, std::optional<absl::StatusOr<V>>& out) const {
    EpochGuard guard(record);
    const Entry* n = shard.Find(hash, key, core_.lookup_eq());
    if (n != nullptr && now < n->quiet_until) [[likely]] {
      core_.MarkVisited(n);
      core_.recorder.Hit(record);
      out.emplace(n->value());
    }
    return n != nullptr;
  }
  // TakeHit where the prepared hit path could not look (no epoch record on
  // the thread yet, a clock of the cache's own, the coarse clock not
  // ticking): acquires the record and reads the cache's clock first.
  template <typename Q>
  ABSL_ATTRIBUTE_NOINLINE bool TakeHitUnprepared(
      Shard& shard, const Q& key, size_t hash,
      std::optional<absl::StatusOr<V>>& out) const {
    return TakeHit(shard, key, hash, CurrentThreadRecord(), core_.HitNowNanos(),
                   out);
  }

  // TakeHit on the prepared path when it can be taken (the thread has an
  // epoch record and the coarse clock ticks), else TakeHitUnprepared.
  template <typename Q>
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool TakeHitAnyway(
      Shard& shard, const Q& key, size_t hash,
      std::optional<absl::StatusOr<V>>& out) const {
    ThreadRecord* const record = ThreadRecordIfAny();
    const int64_t now = core_.system_clock ? CoarseNowNanosIfTicking() : 0;
    if (record == nullptr || now == 0) [[unlikely]] {
      return TakeHitUnprepared(shard, key, hash, out);
    }
    return TakeHit(shard, key, hash, record, now, out);
  }

  // Decides what `n` answers at `now`; marks it visited when it serves, and
  // for a refresh when the policy asks for one (one-way flags only).
  Answer Examine(Entry* n, int64_t now) const;
  // The value or error `answer` serves; call inside the guard it was made
  // under, without a lock (copies V). If the copy throws, a refresh mark
  // the answer set goes too.
  static absl::StatusOr<V> ResultOf(const Answer& answer);
  // Counts what `answer` served at `now`; call without a lock.
  void Record(const Answer& answer, int64_t now) const;
  // A caller's result from a load's outcome; counts a stale fallback.
  absl::StatusOr<V> Serve(const Outcome& outcome) const;
  // What a waiter gets when its wait_timeout passes: a value the policy
  // still keeps (counted as a stale fallback), else DeadlineExceeded;
  // `counted` as a wait timeout. Throws what V's copy throws.
  absl::StatusOr<V> TimedOut(const K& key, size_t hash,
                             bool counted = true) const;
  // GetIfPresent: what `key`'s entry serves now without a load or a
  // refresh, or nullopt.
  template <typename Q>
  std::optional<V> IfPresent(const Q& key) const;

 private:
  const Core& core_;
};

template <typename Core>
typename Engine<Core>::Lookup::Answer Engine<Core>::Lookup::Examine(
    Entry* n, int64_t now) const {
  using Served = typename Answer::Served;
  const EntryTimes t = n->times(core_.fixed_times);
  if (n->has_value() && now < t.keep_until) {
    const Decision d =
        now < t.quiet_until
            ? Decision::kServe
            : core_.policy.Decide(core_.StateOf(n, t), absl::FromUnixNanos(now),
                                  core_.rng);
    if (d != Decision::kLoad) {
      core_.MarkVisited(n);
      const bool refresh = d == Decision::kServeAndRefresh &&
                           now >= n->error_until() &&
                           !n->refreshing.load(std::memory_order_relaxed) &&
                           !n->refreshing.exchange(true);
      return {now < t.expires_at ? Served::kFresh : Served::kStale, n, refresh,
              t.loaded_at};
    }
  }
  if (now < n->error_until()) {
    // A recent failure is remembered: no loader call until it passes.
    if (n->has_value() && now < t.stale_if_error_until) {
      return {Served::kStaleFallback, n, false, t.loaded_at};
    }
    return {Served::kNegative, n, false, t.loaded_at};
  }
  return {};
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Lookup::ResultOf(
    const Answer& answer) {
  if (answer.served == Answer::Served::kNegative) return answer.entry->error();
  if (!answer.refresh) return answer.entry->value();
  // Examine marked the entry for the refresh this caller was to start: if
  // the copy throws, no refresh comes, so the mark must go too (else the
  // key is served stale, never refreshed, until keep_for runs out).
  try {
    return answer.entry->value();
  } catch (...) {
    const_cast<Entry*>(answer.entry)
        ->refreshing.store(false, std::memory_order_relaxed);
    throw;
  }
}

template <typename Core>
void Engine<Core>::Lookup::Record(const Answer& answer, int64_t now) const {
  // `answer.entry` may be retired by now: only the answer's own copy of
  // its load time is read.
  switch (answer.served) {
    case Answer::Served::kFresh:
      core_.recorder.Hit(CurrentThreadRecord());
      break;
    case Answer::Served::kStale:
      core_.recorder.StaleHit(absl::Nanoseconds(now - answer.loaded_at));
      break;
    case Answer::Served::kNegative:
      core_.recorder.NegativeHit();
      break;
    case Answer::Served::kStaleFallback:
      core_.recorder.StaleFallback(absl::Nanoseconds(now - answer.loaded_at));
      break;
    case Answer::Served::kNothing:
      break;
  }
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Lookup::Serve(
    const Outcome& outcome) const {
  if (outcome.stale) {
    core_.recorder.StaleFallback(
        absl::Nanoseconds(core_.NowNanos() - outcome.stale_loaded_at));
  }
  return outcome.value;
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Lookup::TimedOut(
    const K& key, size_t hash, bool counted) const {
  if (counted) core_.recorder.WaitTimeout();
  std::optional<V> stale;
  int64_t now = 0;
  int64_t loaded_at = 0;
  {
    EpochGuard guard;
    now = core_.NowNanos();
    const Entry* n = core_.ShardFor(hash).Find(hash, key, core_.lookup_eq());
    if (n != nullptr && n->has_value() &&
        now < n->keep_until(core_.fixed_times)) {
      stale.emplace(n->value());
      loaded_at = n->loaded_at(core_.fixed_times);
    }
  }
  if (stale.has_value()) {
    core_.recorder.StaleFallback(absl::Nanoseconds(now - loaded_at));
    return *std::move(stale);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("paddock: the load of this key did not finish within "
                   "wait_timeout (",
                   absl::FormatDuration(core_.options.wait_timeout), ")"));
}

template <typename Core>
template <typename Q>
std::optional<typename Core::Value> Engine<Core>::Lookup::IfPresent(
    const Q& key) const {
  const size_t hash = core_.HashOf(key);
  EpochGuard guard;
  const Entry* n = core_.ShardFor(hash).Find(hash, key, core_.lookup_eq());
  if (n == nullptr || !n->has_value()) return std::nullopt;
  const int64_t now = core_.NowNanos();
  if (now < n->keep_until(core_.fixed_times) &&
      (now < n->quiet_until ||
       core_.policy.Decide(core_.StateOf(n), absl::FromUnixNanos(now),
                           core_.rng) != Decision::kLoad)) {
    core_.MarkVisited(n);
    return n->value();
  }
  if (now < n->error_until() &&
      now < n->stale_if_error_until(core_.fixed_times)) {
    return n->value();
  }
  return std::nullopt;
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOOKUP_H_
