// File: paddock/internal/outcome_store.h
// -----------------------------------------------------------------------------
// How a load ends, however it ended (its loader returned, the shared tier
// answered, a wait timed out, it could not start): its load slot goes back,
// its result is stored if the load still owns its key, and it is published
// to the load's waiters, blocking and asynchronous. Also how a refresh that
// stores nothing ends, and when a refresh without a load slot is skipped.
//
// Storing builds the entry before the shard's lock (it copies V and may ask
// the policy) and, under the lock, stores it only if no Put, Invalidate or
// newer load superseded the load. A failed load stores a remembered error
// (error_ttl, or the fleet's) and lets a value the policy still serves on
// errors stand in for it; a failed refresh never takes away the value it
// was refreshing.
//
// `Engine<Core>::OutcomeStore` is made on the spot over a cache's
// internal::CacheCore; thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_OUTCOME_STORE_H_
#define PADDOCK_INTERNAL_OUTCOME_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/internal/admission.h"
#include "paddock/internal/async_waiters.h"
#include "paddock/internal/caught_error.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/time_math.h"
#include "paddock/internal/waiting.h"
#include "paddock/internal/writes.h"
#include "paddock/listener.h"

namespace paddock::internal {

template <typename Core>
class Engine<Core>::OutcomeStore {
 public:
  explicit OutcomeStore(Core& core) : core_(core) {}

  // Ends `load` with `result` (the loader's if `loader_ran`, which ran from
  // `started` to `finished`): gives back its load slot, stores the result if
  // the load still owns its key, and publishes what its callers get (a
  // stale value standing in for an error, or an Internal error if storing
  // threw). Returns that. Never throws.
  Outcome Complete(Load& load, absl::StatusOr<V> result, bool loader_ran,
                   int64_t started, int64_t finished) noexcept;
  // Complete for a load that ends with `error` before its loader ran.
  Outcome Fail(Load& load, absl::Status error) noexcept {
    const int64_t now = core_.NowNanos();
    return Complete(load, std::move(error), /*loader_ran=*/false, now, now);
  }
  // The store of a blocking Get's own pending load (registered without a
  // flight, completed on the caller's thread): stores the loaded `result`
  // if the load still owns its key, copying V once, and publishes a copy to
  // whoever joined. Returns `result`, or the Internal error storing threw.
  absl::StatusOr<V> StorePending(Shard& shard, const K& key, size_t hash,
                                 PendingLoad<Flight>& pending,
                                 absl::StatusOr<V> result, int64_t started,
                                 int64_t finished);
  // A refresh about to start without a load slot: if nobody waits for it,
  // ends it (counted in refreshes_skipped; the entry is refreshable again)
  // and returns true; else returns false, and it waits for a slot.
  bool SkipRefresh(const Load& load) noexcept;
  // Unregisters a refresh that stores nothing and unmarks its entry, if no
  // write superseded it; with `unless_joined`, only if nobody joined it
  // (returns false, changing nothing, if someone did). May throw (a key
  // comparison).
  bool EndRefreshUnstored(const Load& load, bool unless_joined);
  // Publishes `outcome` on `flight` and completes its asynchronous waiters.
  void Publish(Flight& flight, const Outcome& outcome) noexcept;
  // The same for a copy of `result`, or for an error if copying it throws.
  void PublishCopy(Flight& flight, const absl::StatusOr<V>& result) noexcept;
  // What a caller gets when storing its load's outcome threw; call in the
  // handler of that exception.
  static absl::Status StoreFailure();

 private:
  // What Store builds before the lock: the entry to store (null: none) and
  // the stale value that stands in for a failure, if any.
  struct Built {
    std::unique_ptr<Entry> fresh;
    std::optional<Outcome> fallback;
  };

  // Complete's store: returns whether anyone joined the load. Throws what
  // building the entry throws, with nothing stored.
  bool Store(Load& load, Outcome& outcome, bool loader_ran, int64_t started,
             int64_t finished);
  // The entry for `outcome` over the key's `current` one. Throws what V's
  // copy, the policy or an allocation throws.
  Built Build(const Load& load, const Outcome& outcome, const Entry* current,
              bool loader_ran, int64_t started, int64_t finished) const;
  // Under the lock: stores `fresh` over `current` if the load still owns its
  // key (else unmarks `current` for a refresh). Returns whether anyone
  // joined, or nullopt if `current` is no longer the key's entry.
  std::optional<bool> Commit(Load& load, Shard& shard, Entry* current,
                             std::unique_ptr<Entry>& fresh, int64_t finished,
                             size_t& evicted);
  // After Store threw: unregisters the load if still registered and, for a
  // refresh, leaves the entry it was refreshing refreshable again.
  void EndUnstored(Load& load) noexcept;

  Core& core_;
};

template <typename Core>
typename Core::Outcome Engine<Core>::OutcomeStore::Complete(
    Load& load, absl::StatusOr<V> result, bool loader_ran, int64_t started,
    int64_t finished) noexcept {
  // However the load ended, a slot it still holds goes back now: one kept
  // past here would count against max_concurrent_loads until it aged out.
  core_.slots.Release(std::exchange(load.slot, 0));
  Outcome outcome{std::move(result)};
  // If storing fails, publish anyway: a waiter may have joined.
  bool publish = true;
  bool stored = false;
  try {
    publish = Store(load, outcome, loader_ran, started, finished);
    stored = true;
  } catch (...) {
    outcome = {StoreFailure()};
  }
  // From here the flight is done: even if it is still registered (storing
  // threw before it was unregistered), nobody joins or waits for it again.
  // (An uncoalesced load's registration is shared with the key's other
  // loads and waited on by nobody: it is left alone.)
  if (!stored) EndUnstored(load);
  if (load.pending != nullptr) load.pending->completed = true;
  if constexpr (Core::kCoalesce) {
    if (Flight* flight = load.Rendezvous(); flight == nullptr) {
      // A pending load nobody joined: nothing to publish.
    } else if (!publish) {
      flight->Abandon();
    } else {
      Publish(*flight, outcome);
    }
  }
  if (load.delivery != nullptr) Publish(*load.delivery, outcome);
  return outcome;
}

template <typename Core>
bool Engine<Core>::OutcomeStore::Store(Load& load, Outcome& outcome,
                                       bool loader_ran, int64_t started,
                                       int64_t finished) {
  Shard& shard = core_.ShardFor(load.hash);
  // Held from the lock-free look at the current entry to the locked check
  // that it is still current, so that an address cannot be reused between.
  EpochGuard guard;
  for (;;) {
    Entry* current = shard.Find(load.hash, load.key, core_.lookup_eq());
    // Everything that copies V or calls the policy happens before the lock;
    // an entry not stored is destroyed after it.
    Built built = Build(load, outcome, current, loader_ran, started, finished);
    size_t evicted = 0;
    const std::optional<bool> joined =
        Commit(load, shard, current, built.fresh, finished, evicted);
    if (!joined.has_value()) continue;  // Look again.
    core_.recorder.Evicted(evicted);
    if (built.fallback.has_value()) outcome = *std::move(built.fallback);
    return *joined;
  }
}

template <typename Core>
typename Engine<Core>::OutcomeStore::Built Engine<Core>::OutcomeStore::Build(
    const Load& load, const Outcome& outcome, const Entry* current,
    bool loader_ran, int64_t started, int64_t finished) const {
  Built built;
  const Writes writes(core_);
  if (load.filled.lease_lost) {
    // Another writer won the shared tier: store nothing here either.
  } else if (outcome.value.ok()) {
    built.fresh =
        load.from_tier != nullptr
            ? writes.EntryFromTier(load.key, load.hash, *outcome.value,
                                   *load.from_tier, finished)
            : writes.NewEntry(load.key, load.hash, *outcome.value,
                              finished - started, finished,
                              load.filled.lifetime);
    if (!load.filled.version.empty()) {
      built.fresh->mutable_extras(core_.fixed_times).shared_version =
          load.filled.version;
    }
  } else {
    const bool has_value = current != nullptr && current->has_value();
    // Callers of this load get the stale value instead of the error.
    const bool stand_in =
        has_value &&
        finished < (load.awaited == Awaited::kByCallerPastItsWait
                        ? current->keep_until(core_.fixed_times)
                        : current->stale_if_error_until(core_.fixed_times));
    // A failed refresh never takes away the value it was refreshing.
    const bool keep_value =
        stand_in || (has_value && load.kind == LoadKind::kRefresh);
    if (load.from_tier != nullptr) {
      // An error the fleet remembers: for what is left of its keep_for.
      const int64_t stored_at =
          finished - ToNanosSaturated(load.from_tier->age);
      built.fresh = MakeErrorEntry(
          load.hash, load.key, current, keep_value, outcome.value.status(),
          stored_at - ToNanosSaturated(load.from_tier->load_duration),
          stored_at, load.from_tier->keep_for, core_.fixed_times);
    } else if (loader_ran && core_.options.error_ttl > absl::ZeroDuration()) {
      // Negative caching: no loader call for this key until error_until.
      built.fresh = MakeErrorEntry(load.hash, load.key, current, keep_value,
                                   outcome.value.status(), started, finished,
                                   core_.options.error_ttl, core_.fixed_times);
    }
    if (stand_in) {
      built.fallback = Outcome{current->value(), true,
                               current->loaded_at(core_.fixed_times)};
    }
  }
  return built;
}

template <typename Core>
std::optional<bool> Engine<Core>::OutcomeStore::Commit(
    Load& load, Shard& shard, Entry* current, std::unique_ptr<Entry>& fresh,
    int64_t finished, size_t& evicted) {
  Writer w(shard);
  if (shard.Find(load.hash, load.key, core_.lookup_eq()) != current) {
    return std::nullopt;
  }
  const bool own = Leave<Core::kCoalesce>(w, shard, load.key, load.hash,
                                          load.flight.get(), load.pending);
  // Final: the flight can no longer be found, or is about to be done.
  const Flight* flight = load.Rendezvous();
  const bool joined = flight != nullptr && flight->joined() > 0;
  if (own && fresh != nullptr) {
    evicted = shard.Store(w, current, std::move(fresh), finished);
  } else if (own && current != nullptr) {
    // Nothing stored (a failure, or a fill that lost the shared tier's
    // lease): eligible for the next refresh, never wedged by this one.
    current->refreshing.store(false, std::memory_order_relaxed);
  }
  return joined;
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::OutcomeStore::StorePending(
    Shard& shard, const K& key, size_t hash, PendingLoad<Flight>& pending,
    absl::StatusOr<V> result, int64_t started, int64_t finished) {
  absl::Status failure;  // Why storing failed, if it did.
  size_t evicted = 0;
  try {
    // Built before the lock, and copies V once: the caller gets `result`.
    std::unique_ptr<Entry> fresh = Writes(core_).NewEntry(
        key, hash, *result, finished - started, finished, std::nullopt);
    Writer w(shard);
    // No Put, Invalidate or newer load superseded this one: store.
    if (Leave<Core::kCoalesce>(w, shard, key, hash, nullptr, &pending)) {
      // Found first, in a statement of its own: were `Find` an argument of
      // `Store`, `fresh` might already be Store's parameter when the key's
      // Eq throws, and would then be destroyed under the lock.
      Entry* const current = shard.Find(hash, key, core_.lookup_eq());
      evicted = shard.Store(w, current, std::move(fresh), finished);
    }
  } catch (...) {
    failure = StoreFailure();
    AbandonPending<Core::kCoalesce>(shard, &pending);  // Unless it went.
  }
  core_.recorder.Evicted(evicted);
  // Unregistered: the flight, if anyone joined, is final. (A co-runner's
  // flight is waited on by nobody: it stays running for the runners still
  // sharing it.)
  pending.completed = true;
  Flight* const flight = Core::kCoalesce ? pending.flight.get() : nullptr;
  if (!failure.ok()) {
    if (flight != nullptr) Publish(*flight, Outcome{failure});
    return failure;
  }
  if (flight != nullptr) {
    if (flight->joined() > 0) {
      PublishCopy(*flight, result);
    } else {
      flight->Abandon();
    }
  }
  return result;
}

template <typename Core>
void Engine<Core>::OutcomeStore::EndUnstored(Load& load) noexcept {
  if (load.pending != nullptr) {
    // Still registered, perhaps: unregistered here, so that its flight (if
    // anyone joined) is final and nobody joins it after this.
    AbandonPending<Core::kCoalesce>(core_.ShardFor(load.hash), load.pending);
  } else if (load.kind == LoadKind::kRefresh) {
    try {
      EndRefreshUnstored(load, /*unless_joined=*/false);
    } catch (...) {
      // A key comparison threw: the flight, published next, is done all the
      // same; the entry stays marked until keep_for runs out.
    }
  }
}

template <typename Core>
bool Engine<Core>::OutcomeStore::EndRefreshUnstored(const Load& load,
                                                    bool unless_joined) {
  Shard& shard = core_.ShardFor(load.hash);
  EpochGuard guard;
  Writer w(shard);
  // Joined under this lock: once unregistered, nobody joins any more.
  if (unless_joined && load.flight->joined() > 0) return false;
  // Still registered means nothing superseded the refresh: the key's entry
  // is the one Examine marked for it, and no refresh of it is coming. (An
  // uncoalesced registration is left to the loads sharing it.) Unmarked
  // under the lock that unregisters, so that a new refresh cannot start in
  // between and lose its own mark.
  if (shard.IsRegistered(w, load.key, load.hash, load.flight.get(),
                         /*drop=*/Core::kCoalesce)) {
    if (Entry* current = shard.Find(load.hash, load.key, core_.lookup_eq())) {
      current->refreshing.store(false, std::memory_order_relaxed);
    }
  }
  return true;
}

template <typename Core>
bool Engine<Core>::OutcomeStore::SkipRefresh(const Load& load) noexcept {
  if constexpr (!Core::kCoalesce) {
    return false;  // Its registration may be shared: it waits for a slot.
  } else {
    try {
      if (!EndRefreshUnstored(load, /*unless_joined=*/true)) return false;
    } catch (...) {
      return false;  // A key comparison threw: it ends the usual way.
    }
    load.flight->Abandon();
    core_.recorder.RefreshSkipped();
    return true;
  }
}

template <typename Core>
void Engine<Core>::OutcomeStore::Publish(Flight& flight,
                                         const Outcome& outcome) noexcept {
  std::vector<std::shared_ptr<AsyncWaiterBase>> waiters;
  try {
    waiters = flight.Publish(outcome);
  } catch (...) {
    waiters = flight.Publish({absl::InternalError(
        "paddock: copying the loaded value for its waiters failed")});
  }
  if (waiters.empty()) return;
  const Outcome& published = *flight.published();
  Waiting waiting(core_);
  for (const auto& waiter : waiters) waiting.Deliver(waiter, published);
}

template <typename Core>
void Engine<Core>::OutcomeStore::PublishCopy(
    Flight& flight, const absl::StatusOr<V>& result) noexcept {
  std::optional<Outcome> copy;
  try {
    copy.emplace(Outcome{result});
  } catch (...) {
    copy.emplace(Outcome{absl::InternalError(
        "paddock: copying the loaded value for its waiters failed")});
  }
  Publish(flight, *copy);
}

template <typename Core>
absl::Status Engine<Core>::OutcomeStore::StoreFailure() {
  return CaughtError(
      "paddock: storing the loaded value failed: ",
      "paddock: storing the loaded value failed (an exception that is not a "
      "std::exception)");
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_OUTCOME_STORE_H_
