// File: paddock/shared_tier.h
// -----------------------------------------------------------------------------
// `paddock::SharedTier`: a store that the caches of several processes share,
// so that a fleet of N pods loads a hot key once per expiry instead of N
// times. The core knows only this interface; `paddock/redis.h` implements it
// on Redis (target `paddock::redis`). Set it in `Options::shared`.
//
// The protocol is memcache's leases (Nishtala et al., NSDI 2013): a process
// that would load asks the tier first, in one round trip. The tier answers
// with the value if it holds a fresh one, else grants the load to exactly one
// asker (the lease) and tells the others how long the holder has. The holder
// loads and fills; the fill is accepted only with the lease's token, so a
// write (`Put`, `Invalidate`) made meanwhile wins over a load that started
// before it. The others wait for the fill (`AwaitChange`, or, without a
// thread, `Subscriber::OnChange`) or serve what they may serve stale.
//
// Keys are passed encoded (`paddock::Codec<K>::Encode`), values encoded
// (`Codec<V>`). Ages and lifetimes are durations measured on the tier's own
// clock, so processes whose clocks disagree still agree on freshness.
//
// It is an efficiency lock, not a correctness lock: a holder paused past its
// lease, or a failover that loses the lease, lets a second process load.

#ifndef PADDOCK_SHARED_TIER_H_
#define PADDOCK_SHARED_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paddock {

// What a cache writes to the tier for one key: a loaded value with the
// schedule its policy chose, or a load error to remember fleet-wide.
struct SharedFill {
  // The encoded value, or the load's error (remembered for `keep_for`).
  absl::StatusOr<std::string> value;
  // The `paddock::Lifetime` the writer's policy chose, counted from the
  // moment the tier stores the fill. For an error, `fresh_for` is zero and
  // `keep_for` is `Options::error_ttl`. The tier may forget the record once
  // it is older than `keep_for`.
  absl::Duration fresh_for = absl::ZeroDuration();
  absl::Duration keep_for = absl::ZeroDuration();
  absl::Duration serve_on_error_for = absl::ZeroDuration();
  // How long the load took (XFetch's Δ).
  absl::Duration load_duration = absl::ZeroDuration();
  // Names the record; the writer chooses it, unique per write (a cache uses
  // 128 random bits), so that it knows the version of what it wrote. Empty:
  // the tier chooses one.
  std::string version = {};
};

// What the tier holds for one key.
struct SharedRecord {
  // The encoded value, or a remembered load error.
  absl::StatusOr<std::string> value;
  // Names this fill; different for every fill and put. Opaque.
  std::string version;
  // Time since the record was stored, on the tier's clock.
  absl::Duration age = absl::ZeroDuration();
  // As written (see `SharedFill`).
  absl::Duration fresh_for = absl::ZeroDuration();
  absl::Duration keep_for = absl::ZeroDuration();
  absl::Duration serve_on_error_for = absl::ZeroDuration();
  absl::Duration load_duration = absl::ZeroDuration();
};

// The answer to `SharedTier::Lookup`.
struct SharedLookup {
  enum class Lease {
    kNotNeeded,      // `record` is fresh (or a remembered error): use it.
    kGranted,        // The caller holds the lease: load, then Fill or Release.
    kHeldElsewhere,  // Another asker loads; `lease_remaining` bounds it.
  };

  // What the tier holds, fresh or not; nullopt if nothing (or something
  // older than its `keep_for`).
  std::optional<SharedRecord> record;
  Lease lease = Lease::kNotNeeded;
  // With kGranted: the token to pass to Fill or Release.
  std::string lease_token;
  // With kHeldElsewhere: how long until the holder's lease lapses unless it
  // is extended.
  absl::Duration lease_remaining = absl::ZeroDuration();
};

// SharedTier
//
// Every method is thread-safe, never throws (but Subscribe, which a cache
// calls from its constructor, may throw std::bad_alloc), and reports a tier
// that is unreachable, slow (past its I/O timeout) or switched off by a
// circuit breaker as `absl::UnavailableError` or
// `absl::DeadlineExceededError`, and a reply it cannot parse as
// `absl::DataLossError`. Each blocks for at most the tier's I/O timeout
// unless it says otherwise. A cache treats every error as "no shared tier
// for this call": it loads locally and carries on. It does the same when
// Lookup, Fill or AwaitChange throws all the same.
class SharedTier {
 public:
  virtual ~SharedTier() = default;

  // SharedTier::Lookup()
  //
  // One round trip. Returns the record for `key` and, unless that record is
  // a fresh value whose version differs from `have_version` (or a remembered
  // error younger than its `keep_for`), tries to take the key's lease:
  // kGranted to exactly one asker at a time, kHeldElsewhere to the others.
  // Pass the version of the value the caller already has (empty if none) so
  // that a caller refreshing early is not handed back its own value.
  //
  // A granted lease lasts the tier's lease period and is kept alive by the
  // tier while the holder's process lives, until Fill or Release, for
  // `max(lease period, hold_for)` in all; a holder that dies costs the others
  // at most one lease period.
  virtual absl::StatusOr<SharedLookup> Lookup(std::string_view key,
                                              std::string_view have_version,
                                              absl::Duration hold_for) = 0;

  // SharedTier::Fill()
  //
  // Stores `fill` for `key` if `lease_token` still holds the key's lease, and
  // ends the lease; wakes `AwaitChange` callers everywhere. Returns false,
  // storing nothing, if the lease was lost (lapsed and taken by another, or
  // removed by Put or Invalidate). A fill larger than `max_value_bytes()` is
  // refused with `absl::InvalidArgumentError` and its lease released. A fill
  // is not an invalidation: other caches keep their copies of the previous
  // value until those expire.
  virtual absl::StatusOr<bool> Fill(std::string_view key,
                                    std::string_view lease_token,
                                    const SharedFill& fill) = 0;

  // SharedTier::Release()
  //
  // Gives up a lease without storing anything (the load failed and is not
  // to be remembered), so the next asker gets the lease at once. A lost lease
  // is not an error.
  virtual absl::Status Release(std::string_view key,
                               std::string_view lease_token) = 0;

  // SharedTier::Put()
  //
  // Stores `fill` for `key` unconditionally, under a new version, and removes
  // any lease, so a load in flight anywhere no longer stores. Tells every
  // subscriber except `origin` (a `Subscription::id()`, or 0) to drop its
  // local copy.
  virtual absl::Status Put(std::string_view key, const SharedFill& fill,
                           uint64_t origin) = 0;

  // SharedTier::Invalidate()
  //
  // Removes the record and the lease of `key`, so a load in flight anywhere
  // no longer stores. Tells every subscriber except `origin` to drop its
  // local copy.
  virtual absl::Status Invalidate(std::string_view key, uint64_t origin) = 0;

  // SharedTier::AwaitChange()
  //
  // Blocks until the tier learns that `key` was filled, put or invalidated,
  // or until `timeout` passes (real time). Returns whether a change was seen;
  // a hint only (it may also poll): the caller looks up again either way.
  // A cache calls it only on the thread of a blocking `Get`; a load on an
  // executor waits without a thread, woken by `Subscriber::OnChange` or a
  // timer.
  virtual bool AwaitChange(std::string_view key, absl::Duration timeout) = 0;

  // Receives other caches' writes. Callbacks run on a thread of the tier, one
  // at a time per subscription; they must be quick, must not call back
  // into the tier synchronously, and should not throw: one that throws out
  // of OnInvalidate is given OnMissedInvalidations instead (by the tiers
  // paddock provides), and an exception out of that is dropped. Whether one
  // may destroy the tier (drop the last reference to it) is the tier's to
  // say; `RedisTier` allows it.
  class Subscriber {
   public:
    virtual ~Subscriber() = default;
    // `key` was put or invalidated by another cache (in this process or
    // another): drop the local copy.
    virtual void OnInvalidate(std::string_view key) = 0;
    // The tier may have missed invalidations (its subscription was down):
    // drop every local copy that came from the tier. Changes of every kind
    // (see OnChange) may have been missed too.
    virtual void OnMissedInvalidations() = 0;
    // `key` changed in the tier: filled, put, invalidated or its lease given
    // back, by any cache, this subscriber's own writes included. A cache
    // whose load waits for another process's fill of `key` asks the tier
    // again. A hint, and optional for a tier: one that never calls it
    // leaves such loads to ask again on a timer (within about a second),
    // and the default here ignores it.
    virtual void OnChange(std::string_view key) { (void)key; }
  };

  // Ends a subscription when destroyed: blocks until no callback of it runs,
  // and none runs afterwards.
  class Subscription {
   public:
    virtual ~Subscription() = default;
    // The `origin` to pass to Put and Invalidate. Never 0.
    virtual uint64_t id() const = 0;
  };

  // SharedTier::Subscribe()
  //
  // Starts delivering invalidations to `subscriber` until the returned
  // subscription is destroyed; `subscriber` must outlive it. Never fails
  // but for std::bad_alloc: a tier that cannot subscribe now keeps trying
  // and calls `OnMissedInvalidations` once it has.
  virtual std::unique_ptr<Subscription> Subscribe(Subscriber* subscriber) = 0;

  // SharedTier::max_value_bytes()
  //
  // The largest encoded value the tier stores; a cache serves larger values
  // locally and does not write them.
  virtual size_t max_value_bytes() const = 0;
};

}  // namespace paddock

#endif  // PADDOCK_SHARED_TIER_H_
