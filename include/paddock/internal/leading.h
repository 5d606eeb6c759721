// File: paddock/internal/leading.h
// -----------------------------------------------------------------------------
// A blocking caller that leads its key's load: it takes a load slot if the
// cache limits them, runs the load on its own thread (an asynchronous loader:
// starts it, then waits for it like a joiner) and returns what the load
// answers it. The most common miss (a blocking loader, no slot limit, no
// shared tier) takes a shorter way: its pending load, registered without a
// flight, is stored and unregistered under one lock.
//
// `Engine<Core>::Leading` is made on the spot over a cache's
// internal::CacheCore; `PendingLead<Core>` is the caller's pending load and its
// guard.

#ifndef PADDOCK_INTERNAL_LEADING_H_
#define PADDOCK_INTERNAL_LEADING_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/internal/admission.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/in_flight_set.h"
#include "paddock/internal/load_pipeline.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/loader_call.h"
#include "paddock/internal/lookup.h"
#include "paddock/internal/outcome_store.h"
#include "paddock/internal/refresh.h"
#include "paddock/internal/waiting.h"
#include "paddock/listener.h"

namespace paddock::internal {

// A blocking Get's own pending load, if it leads one on its thread from
// start to end (a blocking loader): registered without a flight until
// someone joins. Whatever escapes between the registration and the load's
// completion (which unregisters it), the registration does not outlive the
// caller's frame, and whoever joined gets an answer.
template <typename Core>
class PendingLead {
 public:
  using Flight = typename Core::Flight;

  PendingLead(Core& core, typename Core::Shard& shard)
      : core_(core), shard_(shard) {}
  PendingLead(const PendingLead&) = delete;
  PendingLead& operator=(const PendingLead&) = delete;
  ~PendingLead() {
    if (!registered_ || pending_.completed) return;
    if (const std::shared_ptr<Flight> waited_on =
            AbandonPending<Core::kCoalesce>(shard_, &pending_)) {
      typename Engine<Core>::OutcomeStore(core_).Publish(
          *waited_on,
          {absl::InternalError("paddock: the load ended by an exception "
                               "before it completed")});
    }
  }

  // What admission registers (or not).
  PendingLoad<Flight>* get() { return &pending_; }
  // Admission registered it.
  void set_registered() { registered_ = true; }
  // The pending load, if registered; else null.
  PendingLoad<Flight>* registered() {
    return registered_ ? &pending_ : nullptr;
  }

 private:
  Core& core_;
  typename Core::Shard& shard_;
  PendingLoad<Flight> pending_;
  bool registered_ = false;
};

template <typename Core>
class Engine<Core>::Leading {
 public:
  explicit Leading(Core& core) : core_(core) {}

  // A miss this caller leads, as admission `joined` it at `start`
  // (`pending`: its pending load, if registered). Returns what the load
  // answers it. Blocks for the load (and a slot, a tier's answer).
  absl::StatusOr<V> LeadMiss(Shard& shard, const K& key, size_t hash,
                             Joined<Flight>& joined, const LoadStart& start,
                             PendingLoad<Flight>* pending);
  // Runs `load` on this thread (taking a slot first if it has none) and
  // returns what its caller gets.
  absl::StatusOr<V> Lead(Load load);
  // Lead for the most common miss: `pending` registered by this caller at
  // `start`, with nothing to wait for before the loader (no load-slot limit,
  // no shared tier). A loaded value is stored and the load unregistered
  // under one lock (OutcomeStore::StorePending); an error completes the
  // general way.
  absl::StatusOr<V> LeadPending(Shard& shard, const K& key, size_t hash,
                                PendingLoad<Flight>& pending,
                                const LoadStart& start);

 private:
  // Runs `load` through the pipeline on this thread, and what it leaves to
  // do; returns the outcome, or nullopt if an asynchronous loader will
  // complete it.
  std::optional<Outcome> RunHere(Load& load) {
    return Refresh(core_).Continue(
        load, LoadPipeline(core_).Run(load, Where::kCallerThread),
        Where::kCallerThread);
  }

  Core& core_;
};

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Leading::LeadMiss(
    Shard& shard, const K& key, size_t hash, Joined<Flight>& joined,
    const LoadStart& start, PendingLoad<Flight>* pending) {
  // Nothing between here and the loader call waits (no load slot to take, no
  // shared tier to ask): the load starts at `now`, to the clock's eye.
  const bool starts_now =
      core_.options.max_concurrent_loads == 0 && core_.tier == nullptr;
  if (pending != nullptr && starts_now) {
    return LeadPending(shard, key, hash, *pending, start);
  }
  // A claimed refresh's reservation, if no load took it; else Lead waits
  // for a slot, as this caller needs the value.
  const LoadKind kind =
      joined.claimed_refresh ? LoadKind::kRefresh : LoadKind::kForeground;
  std::shared_ptr<Flight> flight = std::move(joined.flight);
  const LoadSlots::Ticket slot =
      kind == LoadKind::kRefresh
          ? core_.slots.Restart(flight->slot(), core_.NowNanos())
          : 0;
  Load load{key, hash, std::move(flight), kind, slot};
  load.pending = pending;
  // The general path times its load by the precise clock: from `now` only
  // if it is that clock's.
  if (starts_now && start.tick_q32 == 0) load.starts_at = start.nanos;
  return Lead(std::move(load));
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Leading::Lead(Load load) {
  load.awaited = Awaited::kByCaller;
  // With a shared tier the slot is taken once the loader is to run, never
  // for a wait for another process (the pipeline's LoadWithSlot).
  if (load.slot == 0 && !core_.fleet()) {
    load.slot = core_.AcquireSlot();
    if (load.slot == 0) {
      return Lookup(core_).Serve(
          OutcomeStore(core_).Fail(load, core_.NoSlotError()));
    }
  }
  if (!core_.async_loader) return Lookup(core_).Serve(*RunHere(load));
  // An asynchronous loader completes elsewhere: wait for it like a joiner,
  // on the load's flight (an uncoalesced load: on a rendezvous of its own).
  std::shared_ptr<Flight> rendezvous = load.flight;
  if constexpr (Core::kCoalesce) {
    load.flight->Join();  // Before the load can complete and publish.
  } else {
    rendezvous = load.delivery =
        std::make_shared<Flight>(load.key, load.hash, core_.NowNanos());
  }
  if (std::optional<Outcome> outcome = RunHere(load)) {
    return Lookup(core_).Serve(*outcome);
  }
  return Waiting(core_).Wait(rendezvous, load.key, load.hash,
                             /*counted=*/false);
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Leading::LeadPending(
    Shard& shard, const K& key, size_t hash, PendingLoad<Flight>& pending,
    const LoadStart& start) {
  core_.recorder.LoadStarted(LoadKind::kForeground);
  absl::StatusOr<V> result = LoaderCall(core_).Call(key, hash);
  const auto [started, finished] = core_.EndLoadClock(start);
  core_.recorder.LoadFinished(LoadKind::kForeground, finished - started,
                              result.status());
  if (!result.ok()) {
    // Negative caching, stale stand-ins: the general way.
    Load load{key, hash, nullptr, LoadKind::kForeground};
    load.awaited = Awaited::kByCaller;
    load.pending = &pending;
    return Lookup(core_).Serve(OutcomeStore(core_).Complete(
        load, std::move(result), /*loader_ran=*/true, started, finished));
  }
  return OutcomeStore(core_).StorePending(shard, key, hash, pending,
                                          std::move(result), started, finished);
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LEADING_H_
