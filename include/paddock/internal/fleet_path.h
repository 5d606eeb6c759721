// File: paddock/internal/fleet_path.h
// -----------------------------------------------------------------------------
// The fleet path: what a load of a cache with a shared tier (`Options::shared`)
// asks the tier before it calls the loader, and how it fills the tier after.
// It never completes a load: `Ask` returns a verdict (the tier's record
// answers; serve a stale record while this process refreshes it; load under
// the lease; load without the tier; park until another process's fill; give
// up), and the caller carries it out. `Fill` returns what the local store of
// the result must know (the schedule written, the version, a lost lease).
//
// Every SharedTier method is called inside a try: a tier that throws (its own
// allocation failing) counts as a tier error, and this process loads without
// the tier, as on any other tier error.
//
// `Engine<Core>::FleetPath` is made on the spot over a cache's
// internal::CacheCore; its functions are instantiated only for a cache with
// kShareable types.

#ifndef PADDOCK_INTERNAL_FLEET_PATH_H_
#define PADDOCK_INTERNAL_FLEET_PATH_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/codec.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/time_math.h"
#include "paddock/internal/writes.h"
#include "paddock/listener.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// The tier's record answers the load: a value, or an error the fleet
// remembers (`value` not ok). Counted as a shared hit.
template <typename V>
struct TierAnswer {
  absl::StatusOr<V> value;
  SharedRecord record;
  int64_t now;
};
// The lease came with a stale record the policy serves while one refresh
// runs: the caller gets `stale` at once, gives `lease` back first (the
// refresh asks the tier again) and refreshes the stored record. Counted as a
// shared hit.
template <typename V>
struct ServeStale {
  absl::StatusOr<V> stale;
  SharedRecord record;
  Lease lease;
  int64_t now;
};
// This process loads the key and fills the tier under `lease`. Whatever
// stand-in the record offers is stored here already.
struct LoadUnderLease {
  Lease lease;
};
// The tier failed or cannot help (counted as a tier error): load without it.
struct LoadAlone {};
// Another process loads the key: park the load until the key changes or
// `wait` passes, then ask again (only for Where::kExecutorTask). `since` is
// the change sequence read before the lookup.
struct ParkFor {
  uint64_t since;
  absl::Duration wait;
};
// The load ends with `error` without a loader call: the cache is closing, or
// another process held the lease past the wait's deadline (then
// `stale_until_keep`: a kept value stands in, as for a timed-out wait).
struct GiveUp {
  absl::Status error;
  bool stale_until_keep;
  int64_t now;
};

template <typename V>
using FleetVerdict = std::variant<TierAnswer<V>, ServeStale<V>, LoadUnderLease,
                                  LoadAlone, ParkFor, GiveUp>;

template <typename Core>
class Engine<Core>::FleetPath {
 public:
  using Verdict = FleetVerdict<V>;

  explicit FleetPath(Core& core) : core_(core) {}

  // Where `load` starts asking: its key's bytes, the version this process
  // holds, and how long it waits for another process's fill (a caller as
  // long as for a local load, a refresh as long as a load may take).
  // nullopt if the key's codec threw (counted): the load runs without the
  // tier. Throws only std::bad_alloc.
  std::optional<FleetProgress> Begin(const Load& load) const;

  // Asks the tier from `progress` (updated) until it has a verdict. Blocks:
  // with Where::kCallerThread it waits here for another process's fill,
  // within `progress.deadline`; with kExecutorTask it returns ParkFor
  // instead. Before any wait the load's slot goes back (`load.slot` = 0).
  // Counts lease grants, lease waits, shared hits, tier errors and a
  // caller's wait timeout. Throws only std::bad_alloc.
  Verdict Ask(Load& load, FleetProgress& progress, Where where);

  // Waits until the tier announces a change of the key or `wait` passes.
  // Returns false if the tier threw (counted): load without it.
  bool AwaitChange(const FleetProgress& progress, absl::Duration wait) noexcept;

  // Writes `result`, loaded from `started` to `finished`, to the tier under
  // `lease`, or gives the lease back when nothing is to be shared (a value
  // too large, an error that is not a `verdict` on the key, the error of a
  // refresh or of a load over a record that stands in). Never throws.
  TierFill Fill(const Load& load, const Lease& lease,
                const absl::StatusOr<V>& result, int64_t started,
                int64_t finished, bool verdict) noexcept;

  // Gives `lease` back, if any; a failure is counted.
  void GiveBack(const Lease* lease) noexcept;

  // The record's value decoded, its remembered error, or nullopt if it is
  // undecodable or larger than this process may store (a miss).
  std::optional<absl::StatusOr<V>> Decode(const SharedRecord& record) const;

  // Writes a Put that `plan` stored here through to the tier (or, too large
  // for it, removes the key from it), then drops what a load that raced the
  // write stored here meanwhile. A tier failure is counted. Throws what K's
  // codec or Eq throws.
  void PutThrough(const K& key, size_t hash, const PutPlan& plan);
  // Removes `key` from the tier (which tells every other cache), then here
  // again: a load between the first removal and the tier's may have stored
  // the record the tier still held. A tier failure is counted. Throws what
  // K's codec or Eq throws.
  void InvalidateThrough(const K& key, size_t hash);

 private:
  // The lookup, with tier errors and exceptions as nullopt.
  std::optional<SharedLookup> LookUp(const FleetProgress& progress) noexcept;
  // The verdict on a granted lease.
  Verdict OnGranted(Load& load, const FleetProgress& progress,
                    SharedLookup& lookup, int64_t now);
  // Another process fills the key: give up, park, or wait here; nullopt
  // once the wait here is over (ask again).
  std::optional<Verdict> WaitOrGiveUp(Load& load, const FleetProgress& progress,
                                      const SharedLookup& lookup, int64_t now,
                                      uint64_t since, Where where);
  // Stores the record's value here while this load runs if it stands in for
  // errors and this process has no value of its own. Returns whether the
  // record stands in. Never throws: a copy that throws stores nothing.
  bool KeepStandIn(const Load& load, const SharedRecord& record,
                   int64_t now) noexcept;
  // What Fill writes for `result`, which took `took`; nullopt if nothing is
  // to be shared. Sets `out.lifetime` for a value. Throws what V's codec
  // throws.
  std::optional<SharedFill> FillOf(const Load& load, const Lease& lease,
                                   const absl::StatusOr<V>& result,
                                   absl::Duration took, bool verdict,
                                   TierFill& out) const;
  // Whether the policy serves `record` stale at `now` while one refresh runs.
  bool ServesStale(const SharedRecord& record, int64_t now) const;
  // The version of the key's entry here, or "".
  std::string LocalVersion(const Load& load) const;

  Core& core_;
};

template <typename Core>
std::optional<FleetProgress> Engine<Core>::FleetPath::Begin(
    const Load& load) const {
  FleetProgress progress;
  try {
    progress.key_bytes = Codec<K>::Encode(load.key);
    progress.have_version = LocalVersion(load);
  } catch (...) {
    core_.recorder.SharedError();
    return std::nullopt;
  }
  progress.budget = load.caller_waits() ? core_.options.wait_timeout
                                        : core_.options.max_load_age;
  progress.deadline = IsForever(progress.budget)
                          ? std::chrono::steady_clock::time_point::max()
                          : std::chrono::steady_clock::now() +
                                absl::ToChronoNanoseconds(progress.budget);
  return progress;
}

template <typename Core>
typename Engine<Core>::FleetPath::Verdict Engine<Core>::FleetPath::Ask(
    Load& load, FleetProgress& progress, Where where) {
  for (;;) {
    // Read before the lookup: a change announced after it wakes the park.
    // Only where a load may park: reading it makes the process-wide waits.
    const uint64_t since =
        where == Where::kExecutorTask ? FleetWaits::Process().sequence() : 0;
    std::optional<SharedLookup> lookup = LookUp(progress);
    if (!lookup.has_value()) {
      core_.recorder.SharedError();
      return LoadAlone{};
    }
    const int64_t now = core_.NowNanos();
    if (lookup->lease == SharedLookup::Lease::kGranted) {
      return OnGranted(load, progress, *lookup, now);
    }
    const bool held_elsewhere =
        lookup->lease == SharedLookup::Lease::kHeldElsewhere;
    if (held_elsewhere && !progress.waited) {
      core_.recorder.LeaseWait();
      progress.waited = true;
    }
    if (lookup->record.has_value()) {
      std::optional<absl::StatusOr<V>> value = Decode(*lookup->record);
      if (!value.has_value()) {
        // Undecodable (another format, garbage): a miss. Ask once more as
        // the holder of that very version, which gets the lease, so that
        // this load replaces it.
        core_.recorder.SharedError();
        if (progress.asked_past_bad_record) return LoadAlone{};
        progress.asked_past_bad_record = true;
        progress.have_version = lookup->record->version;
        continue;
      }
      if (!held_elsewhere || (load.caller_waits() && value->ok() &&
                              ServesStale(*lookup->record, now))) {
        core_.recorder.SharedHit();
        return TierAnswer<V>{*std::move(value), *std::move(lookup->record),
                             now};
      }
    } else if (!held_elsewhere) {
      core_.recorder.SharedError();  // "Fresh", with nothing: a broken tier.
      return LoadAlone{};
    }
    if (std::optional<Verdict> verdict =
            WaitOrGiveUp(load, progress, *lookup, now, since, where)) {
      return *std::move(verdict);
    }
  }
}

template <typename Core>
std::optional<SharedLookup> Engine<Core>::FleetPath::LookUp(
    const FleetProgress& progress) noexcept {
  try {
    absl::StatusOr<SharedLookup> answer =
        core_.tier->Lookup(progress.key_bytes, progress.have_version,
                           LeaseHoldFor(core_.options.max_load_age));
    if (answer.ok()) return *std::move(answer);
  } catch (...) {
    // SharedTier's methods never throw; one that does anyway (out of memory
    // in the tier's own code) is a tier error like any other.
  }
  return std::nullopt;
}

template <typename Core>
typename Engine<Core>::FleetPath::Verdict Engine<Core>::FleetPath::OnGranted(
    Load& load, const FleetProgress& progress, SharedLookup& lookup,
    int64_t now) {
  core_.recorder.LeaseAcquired();
  Lease lease{progress.key_bytes, std::move(lookup.lease_token)};
  if (!lookup.record.has_value() || !lookup.record->value.ok()) {
    return LoadUnderLease{std::move(lease)};
  }
  const SharedRecord& record = *lookup.record;
  // A stale record the policy serves while one refresh runs (SoftTtl within
  // stale_for): this caller gets it at once, as the callers of processes
  // that hold a copy do, and the refresh runs behind it.
  if (load.caller_waits() && record.version != progress.have_version &&
      ServesStale(record, now)) {
    std::optional<absl::StatusOr<V>> stale = Decode(record);
    if (stale.has_value()) {
      core_.recorder.SharedHit();
      return ServeStale<V>{*std::move(stale), *std::move(lookup.record),
                           std::move(lease), now};
    }
    core_.recorder.SharedError();  // Undecodable: this load replaces it.
  }
  lease.record_stands_in = KeepStandIn(load, record, now);
  return LoadUnderLease{std::move(lease)};
}

template <typename Core>
std::optional<typename Engine<Core>::FleetPath::Verdict>
Engine<Core>::FleetPath::WaitOrGiveUp(Load& load, const FleetProgress& progress,
                                      const SharedLookup& lookup, int64_t now,
                                      uint64_t since, Where where) {
  // Another process loads this key: wait for its fill, then ask again (a
  // holder that died lets the lease lapse, and this one may get it). Unless
  // this cache is being destroyed: its destructor waits for this load, and
  // should not wait for another process (up to max_load_age).
  if (core_.lifeline->closing()) {
    return GiveUp{absl::CancelledError(
                      "paddock: cache destroyed while waiting for another "
                      "process's fill of this key"),
                  /*stale_until_keep=*/false, now};
  }
  const auto steady_now = std::chrono::steady_clock::now();
  if (steady_now >= progress.deadline) {
    if (load.caller_waits()) core_.recorder.WaitTimeout();
    return GiveUp{absl::DeadlineExceededError(absl::StrCat(
                      "paddock: another process holds the shared tier's "
                      "lease on this key and did not fill it within ",
                      absl::FormatDuration(progress.budget))),
                  /*stale_until_keep=*/load.caller_waits(), now};
  }
  // No load slot is held while another process loads (a refresh's
  // reservation goes back too): one is taken if this process is to load
  // after all.
  core_.slots.Release(std::exchange(load.slot, 0));
  const absl::Duration wait = std::min(
      {absl::FromChrono(progress.deadline - steady_now),
       lookup.lease_remaining + absl::Milliseconds(50), absl::Seconds(1)});
  if (where == Where::kExecutorTask) return ParkFor{since, wait};
  if (!AwaitChange(progress, wait)) return LoadAlone{};
  return std::nullopt;
}

template <typename Core>
bool Engine<Core>::FleetPath::AwaitChange(const FleetProgress& progress,
                                          absl::Duration wait) noexcept {
  try {
    core_.tier->AwaitChange(progress.key_bytes, wait);
    return true;
  } catch (...) {
    core_.recorder.SharedError();
    return false;
  }
}

template <typename Core>
TierFill Engine<Core>::FleetPath::Fill(const Load& load, const Lease& lease,
                                       const absl::StatusOr<V>& result,
                                       int64_t started, int64_t finished,
                                       bool verdict) noexcept {
  TierFill out;
  std::optional<SharedFill> fill;
  try {
    fill = FillOf(load, lease, result, absl::Nanoseconds(finished - started),
                  verdict, out);
  } catch (...) {
    // Encoding failed: nothing to write. The lease goes back, as for a value
    // too large to share: kept, it would be extended for hold_for while the
    // others wait for a fill that never comes.
    core_.recorder.SharedError();
    fill.reset();
  }
  if (!fill.has_value()) {
    GiveBack(&lease);
    return out;
  }
  std::optional<absl::StatusOr<bool>> filled;
  try {
    filled.emplace(core_.tier->Fill(lease.key_bytes, lease.token, *fill));
  } catch (...) {
    // A tier that throws: the lease lapses.
  }
  if (!filled.has_value() || !filled->ok()) {
    core_.recorder.SharedError();  // Stored here all the same.
  } else if (!**filled) {
    // A Put or Invalidate somewhere (or a lapse) took the lease: like a
    // local write during a load, it wins; this result goes only to its
    // own callers.
    out.lease_lost = true;
  } else {
    out.version = std::move(fill->version);
  }
  return out;
}

template <typename Core>
std::optional<SharedFill> Engine<Core>::FleetPath::FillOf(
    const Load& load, const Lease& lease, const absl::StatusOr<V>& result,
    absl::Duration took, bool verdict, TierFill& out) const {
  if (result.ok()) {
    // The schedule the local entry gets too.
    const Lifetime life = core_.LifetimeFor(took);
    out.lifetime = life;
    std::string bytes = Codec<V>::Encode(*result);
    // Too large: served and stored here only; the others may load it.
    if (bytes.size() > core_.tier->max_value_bytes()) return std::nullopt;
    return SharedFill{.value = std::move(bytes),
                      .fresh_for = life.expires_after,
                      .keep_for = life.keep_for,
                      .serve_on_error_for = life.serve_on_error_for,
                      .load_duration = took,
                      .version = NewSharedVersion()};
  }
  if (core_.options.error_ttl > absl::ZeroDuration() && verdict &&
      load.kind != LoadKind::kRefresh && !lease.record_stands_in) {
    return SharedFill{.value = result.status(),
                      .keep_for = core_.options.error_ttl,
                      .load_duration = took,
                      .version = NewSharedVersion()};
  }
  // Not remembered: the next asker may load at once. Nor is an error of this
  // process's own (not a verdict), nor the error of a refresh or of a load
  // over a record that still stands in for errors, which would replace that
  // record: still the fleet's value, which every process may serve stale
  // (this one keeps its copy and remembers the error itself).
  return std::nullopt;
}

template <typename Core>
void Engine<Core>::FleetPath::GiveBack(const Lease* lease) noexcept {
  if (lease == nullptr) return;
  try {
    if (!core_.tier->Release(lease->key_bytes, lease->token).ok()) {
      core_.recorder.SharedError();
    }
  } catch (...) {
    core_.recorder.SharedError();  // A tier that throws: the lease lapses.
  }
}

template <typename Core>
std::optional<absl::StatusOr<typename Core::Value>>
Engine<Core>::FleetPath::Decode(const SharedRecord& record) const {
  if (!record.value.ok()) return record.value.status();  // The fleet's error.
  // Larger than this process may store (written by a process with a larger
  // limit): a miss, like an undecodable record.
  if (record.value->size() > core_.tier->max_value_bytes()) return std::nullopt;
  try {
    absl::StatusOr<V> decoded = Codec<V>::Decode(*record.value);
    if (decoded.ok()) return decoded;
  } catch (...) {
    // A codec that throws (std::bad_alloc, a throwing parser): as
    // undecodable. Never past here: a refresh runs under noexcept.
  }
  return std::nullopt;
}

template <typename Core>
bool Engine<Core>::FleetPath::KeepStandIn(const Load& load,
                                          const SharedRecord& record,
                                          int64_t now) noexcept {
  if (record.age >= record.serve_on_error_for) return false;
  Shard& shard = core_.ShardFor(load.hash);
  EpochGuard guard;
  // Destroyed after the lock, if not stored.
  std::unique_ptr<Entry> fresh;
  size_t evicted = 0;
  try {
    Entry* current = shard.Find(load.hash, load.key, core_.lookup_eq());
    if (current != nullptr && current->has_value()) return true;  // Its own.
    {  // The decoded value (moved from) is destroyed before the lock.
      std::optional<absl::StatusOr<V>> value = Decode(record);
      if (!value.has_value() || !value->ok()) return true;  // None to store.
      fresh = Writes(core_).EntryFromTier(load.key, load.hash,
                                          **std::move(value), record, now);
    }
    Writer w(shard);
    if (shard.Find(load.hash, load.key, core_.lookup_eq()) != current) {
      return true;
    }
    // Only while this load still owns the key (no Put, no Invalidate since),
    // and without giving up that ownership: the load stores after it.
    if (shard.IsRegistered(w, load.key, load.hash, load.flight.get(),
                           /*drop=*/false, load.pending)) {
      evicted = shard.Store(w, current, std::move(fresh), now);
    }
  } catch (...) {
    // Eq, V's copy or an allocation threw: no stand-in; the load runs.
  }
  core_.recorder.Evicted(evicted);
  return true;
}

template <typename Core>
bool Engine<Core>::FleetPath::ServesStale(const SharedRecord& record,
                                          int64_t now) const {
  const int64_t loaded_at = now - ToNanosSaturated(record.age);
  const int64_t keep_until = AddSaturated(loaded_at, record.keep_for);
  if (now >= keep_until) return false;
  const EntryState state{
      absl::FromUnixNanos(loaded_at),
      absl::FromUnixNanos(AddSaturated(loaded_at, record.fresh_for)),
      record.load_duration, /*refresh_in_flight=*/true};
  return core_.policy.Decide(state, absl::FromUnixNanos(now), core_.rng) !=
         Decision::kLoad;
}

template <typename Core>
std::string Engine<Core>::FleetPath::LocalVersion(const Load& load) const {
  EpochGuard guard;
  const Entry* n =
      core_.ShardFor(load.hash).Find(load.hash, load.key, core_.lookup_eq());
  const std::string* version = n != nullptr ? n->shared_version() : nullptr;
  return version != nullptr ? *version : std::string();
}

template <typename Core>
void Engine<Core>::FleetPath::PutThrough(const K& key, size_t hash,
                                         const PutPlan& plan) {
  const uint64_t origin = core_.subscription->id();
  const std::string key_bytes = Codec<K>::Encode(key);
  absl::Status written;
  if (plan.bytes->size() > core_.tier->max_value_bytes()) {
    // Too large for the tier: at least take the old value out of it.
    written = core_.tier->Invalidate(key_bytes, origin);
  } else {
    written = core_.tier->Put(
        key_bytes,
        SharedFill{.value = *plan.bytes,
                   .fresh_for = plan.life.expires_after,
                   .keep_for = plan.life.keep_for,
                   .serve_on_error_for = plan.life.serve_on_error_for,
                   .load_duration = absl::Nanoseconds(plan.load_duration),
                   .version = plan.version},
        origin);
  }
  if (!written.ok()) core_.recorder.SharedError();
  // A load of this key registered after the Put's drop asked the tier
  // before this write reached it, and may have stored the record this write
  // replaced. The tier tells every other cache, never its origin: so this
  // cache drops whatever now stands in its place, and the next `Get` takes
  // the tier's record.
  Shard& shard = core_.ShardFor(hash);
  Writer w(shard);
  shard.DropFlight(w, key, hash);
  if (Entry* n = shard.Find(hash, key, core_.lookup_eq()); n != nullptr) {
    const std::string* stored = n->shared_version();
    if (stored == nullptr || *stored != plan.version) shard.Unlink(w, n);
  }
}

template <typename Core>
void Engine<Core>::FleetPath::InvalidateThrough(const K& key, size_t hash) {
  if (!core_.tier->Invalidate(Codec<K>::Encode(key), core_.subscription->id())
           .ok()) {
    core_.recorder.SharedError();
  }
  Writes(core_).InvalidateLocally(key, hash);
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FLEET_PATH_H_
