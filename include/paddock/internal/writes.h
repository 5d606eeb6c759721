// File: paddock/internal/writes.h
// -----------------------------------------------------------------------------
// The entries a cache's engine stores, and its local writes: an entry for a
// value this process loaded or was given (times from the policy's Lifetime),
// one for a value the shared tier holds (times from the tier's record, so that
// processes agree on what is fresh), a Put, and the invalidation of one key or
// of everything, here only (the shared tier's half is the fleet path's).
//
// `Engine<Core>::Writes` is made on the spot over a cache's internal::CacheCore
// and holds nothing else; thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_WRITES_H_
#define PADDOCK_INTERNAL_WRITES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "paddock/codec.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet.h"
#include "paddock/internal/time_math.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// What a Put stored here, for writing it through to the shared tier.
struct PutPlan {
  Lifetime life;
  int64_t load_duration = 0;  // The last load's, which the value inherits.
  std::string version;        // With a shared tier: the value's version,
  std::optional<std::string> bytes;  // and its bytes. Else empty.
};

template <typename Core>
class Engine<Core>::Writes {
 public:
  explicit Writes(Core& core) : core_(core) {}

  // An entry for `value`, loaded at `now` in `load_duration`, with the
  // lifetime `given` (one the tier was filled with) or else the policy's.
  // Throws what V's move or an allocation throws.
  std::unique_ptr<Entry> NewEntry(const K& key, size_t hash, V value,
                                  int64_t load_duration, int64_t now,
                                  const std::optional<Lifetime>& given) const {
    auto n = std::make_unique<Entry>(hash, key);
    n->emplace_value(std::move(value));
    if constexpr (Core::kFixedLifetime) {
      // Every lifetime is the fixed one (LifetimeFor gave `given` too).
      if (core_.fixed_times_exact) {
        n->SetFixedTimes(now, load_duration, core_.fixed_times);
        return n;
      }
    }
    const Lifetime life =
        given.has_value() ? *given
                          : core_.LifetimeFor(absl::Nanoseconds(load_duration));
    n->SetTimes(
        {.loaded_at = now,
         .quiet_until = AddSaturated(now, life.quiet_for),
         .expires_at = AddSaturated(now, life.expires_after),
         .keep_until = AddSaturated(now, life.keep_for),
         .stale_if_error_until = AddSaturated(now, life.serve_on_error_for),
         .load_duration = load_duration},
        core_.fixed_times);
    return n;
  }

  // An entry for `value`, decoded from the shared tier's `record`, at `now`:
  // its times count from when the tier stored it, by the tier's clock, so
  // that processes whose clocks disagree agree on what is fresh. Throws as
  // NewEntry.
  std::unique_ptr<Entry> EntryFromTier(const K& key, size_t hash, V value,
                                       const SharedRecord& record,
                                       int64_t now) const {
    // The quiet window is the hit path's business, not the fleet's: this
    // policy's, within the record's freshness.
    const absl::Duration quiet = std::min(
        core_.LifetimeFor(record.load_duration).quiet_for, record.fresh_for);
    const int64_t loaded_at = now - ToNanosSaturated(record.age);
    auto n = std::make_unique<Entry>(hash, key);
    n->emplace_value(std::move(value));
    n->mutable_extras(core_.fixed_times).shared_version = record.version;
    n->SetTimes({.loaded_at = loaded_at,
                 .quiet_until = AddSaturated(loaded_at, quiet),
                 .expires_at = AddSaturated(loaded_at, record.fresh_for),
                 .keep_until = AddSaturated(loaded_at, record.keep_for),
                 .stale_if_error_until =
                     AddSaturated(loaded_at, record.serve_on_error_for),
                 .load_duration = ToNanosSaturated(record.load_duration)},
                core_.fixed_times);
    return n;
  }

  // Stores `value` for `key` here, over any entry and any load in flight
  // (whose result must not overwrite it). With a shared tier, encodes the
  // value first, for writing it through. Throws what V's codec or copy, the
  // key's Eq or an allocation throws, with nothing stored.
  PutPlan Put(const K& key, size_t hash, V value) const {
    Shard& shard = core_.ShardFor(hash);
    // The entry is built before the lock. It inherits the last load's
    // duration (XFetch's Δ), read without the lock: a load finishing
    // meanwhile only makes that estimate one load older.
    PutPlan plan;
    {
      EpochGuard guard;
      if (const Entry* n = shard.Find(hash, key, core_.lookup_eq())) {
        plan.load_duration = n->load_duration(core_.fixed_times);
      }
    }
    const int64_t now = core_.StoreNowNanos();
    plan.life = core_.LifetimeFor(absl::Nanoseconds(plan.load_duration));
    if constexpr (Core::kShareable) {
      if (core_.tier != nullptr) {  // Before V moves.
        plan.version = NewSharedVersion();
        plan.bytes.emplace(Codec<V>::Encode(value));
      }
    }
    std::unique_ptr<Entry> fresh = NewEntry(key, hash, std::move(value),
                                            plan.load_duration, now, plan.life);
    if (!plan.version.empty()) {
      fresh->mutable_extras(core_.fixed_times).shared_version = plan.version;
    }
    size_t evicted;
    {
      Writer w(shard);
      shard.DropFlight(w, key, hash);  // Its result must not overwrite this.
      Entry* current = shard.Find(hash, key, core_.lookup_eq());
      evicted = shard.Store(w, current, std::move(fresh), now);
    }
    core_.recorder.Evicted(evicted);
    return plan;
  }

  // Removes `key`'s entry here, and unregisters its load so that the load's
  // result is not stored over the removal. Throws what the key's Eq throws.
  void InvalidateLocally(const K& key, size_t hash) const {
    Shard& shard = core_.ShardFor(hash);
    Writer w(shard);
    shard.DropFlight(w, key, hash);
    if (Entry* n = shard.Find(hash, key, core_.lookup_eq()); n != nullptr) {
      shard.Unlink(w, n);
    }
  }

  // InvalidateLocally for every key, shard by shard.
  void InvalidateAllLocally() const {
    for (size_t i = 0; i < core_.shard_count; ++i) {
      Shard& shard = core_.shards[i];
      Writer w(shard);
      shard.DropAllFlights(w);
      shard.UnlinkAll(w);
    }
  }

 private:
  Core& core_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_WRITES_H_
