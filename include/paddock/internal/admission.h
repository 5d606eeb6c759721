// File: paddock/internal/admission.h
// -----------------------------------------------------------------------------
// Admission: the one step where a caller that missed takes part in its key's
// load, for Get and GetAsync alike. Under the shard's lock, it either joins a
// load already registered for the key or registers one that the caller then
// leads. Whether loads of a key coalesce (the policy's kCoalesceLoads) is
// decided here and nowhere else on the way in: a coalescing cache joins the
// live load, an uncoalesced one always leads, and shares the key's
// registration with the other runners only to learn whether a write
// superseded them.
//
// How a caller takes part differs by entry point (AdmitAs): a blocking Get
// runs a queued load itself rather than wait for the executor that queued
// it, and with a blocking loader registers without a flight until someone
// joins (PendingLoad); GetAsync never claims a queued load, waits for a load
// hung on an executor thread rather than hang another thread beside it, and
// joins the flight it registers, as it waits on it like any joiner.

#ifndef PADDOCK_INTERNAL_ADMISSION_H_
#define PADDOCK_INTERNAL_ADMISSION_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"

namespace paddock::internal {

// How a caller takes part in its key's load.
template <typename Flight>
struct AdmitAs {
  // Runs a flight still queued on the executor itself (Get), rather than
  // join it (GetAsync, which would only hand it to the executor again).
  bool claims_queued = false;
  // Registers a flightless pending load when nobody loads the key (a Get
  // with a blocking loader, which leads from start to end on its thread).
  bool may_pend = false;
  // Joins a load hung on an executor thread, however old (GetAsync).
  bool asks_executor = false;
  // The leader waits on the flight it registers, as a joiner (GetAsync).
  bool leader_waits = false;
  // The state of a flight it registers: kQueued when the executor (or a
  // blocking caller) is to claim it, kRunning when this caller starts it.
  typename Flight::State new_state = Flight::State::kRunning;

  // A blocking Get: with a blocking loader it may pend; with an
  // asynchronous one, it registers a running flight the loader completes.
  static AdmitAs Get(bool blocking_loader) {
    return {.claims_queued = true,
            .may_pend = blocking_loader,
            .asks_executor = false,
            .leader_waits = false,
            .new_state = Flight::State::kRunning};
  }
  // GetAsync: `starts_here` if its load starts on the calling thread (an
  // asynchronous loader with nothing to wait for first).
  static AdmitAs GetAsync(bool starts_here) {
    return {.claims_queued = false,
            .may_pend = false,
            .asks_executor = true,
            .leader_waits = true,
            .new_state =
                starts_here ? Flight::State::kRunning : Flight::State::kQueued};
  }
};

enum class Role : uint8_t {
  kLead,         // `flight` is this caller's to run (registered or claimed).
  kLeadPending,  // The caller's PendingLoad is registered; no flight yet.
  kJoin,         // `flight` is another caller's load; joined.
};

template <typename Flight>
struct Joined {
  Role role = Role::kLead;
  // kLead: the flight this caller runs (for an uncoalesced runner, the key's
  // shared registration, or null beside kLeadPending); kJoin: the one to
  // wait on.
  std::shared_ptr<Flight> flight;
  // kLead by claiming a queued refresh: the flight holds a load slot, and
  // the load runs as a refresh for this caller.
  bool claimed_refresh = false;
};

// The register-or-join step. Call with a Writer on `shard` held, once the
// caller found no value to serve. `pending` is the caller's (used only with
// `as.may_pend`; its started_at is set to `now`). `max_load_age`: a
// coalescing load older than this (nanoseconds) no longer blocks the key.
// May throw (an allocation, a copy or comparison of the key), leaving the
// shard unchanged.
template <bool kCoalesce, typename Shard, typename K>
Joined<typename Shard::FlightType> RegisterOrJoin(
    typename Shard::Writer& w, Shard& shard, const K& key, size_t hash,
    int64_t now, int64_t max_load_age,
    const AdmitAs<typename Shard::FlightType>& as,
    typename Shard::Pending* pending)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mutex()) {
  using Flight = typename Shard::FlightType;
  std::shared_ptr<Flight> flight;
  if (as.may_pend) pending->started_at = now;
  if constexpr (kCoalesce) {
    if (as.may_pend) {
      flight =
          shard.LiveFlightOrRegister(w, key, hash, now, max_load_age, pending);
      if (flight == nullptr) return {Role::kLeadPending, nullptr};
    } else {
      flight = shard.LiveFlight(key, hash, now, max_load_age);
      // A load hung on an executor thread: waiting for it (until
      // wait_timeout) beats hanging another thread beside it. (A blocking
      // Get starts a fresh load on its own thread.)
      if (flight == nullptr && as.asks_executor) {
        flight = shard.ExecutorFlight(key, hash);
      }
      if (flight == nullptr) {
        // None in flight, or the one in flight is done or too old to wait
        // for: it keeps running but will no longer store.
        flight = std::make_shared<Flight>(key, hash, now, as.new_state);
        shard.Register(w, key, hash, flight);
        if (as.leader_waits) flight->Join();
        return {Role::kLead, std::move(flight)};
      }
    }
    if (as.claims_queued && flight->TryClaim(now)) {
      // Queued on the executor (a refresh, which reserved a slot, or a
      // GetAsync caller's load): run it here rather than wait for the
      // executor, which may be busy with this very caller.
      const bool refresh = flight->slot() != 0;
      return {Role::kLead, std::move(flight), refresh};
    }
    flight->Join();
    return {Role::kJoin, std::move(flight)};
  } else {
    if (as.may_pend) {
      flight = shard.JoinRunnersOrRegister(w, key, hash, now, pending);
      return {flight == nullptr ? Role::kLeadPending : Role::kLead,
              std::move(flight)};
    }
    flight = shard.JoinRunners(key, hash, now);
    if (flight == nullptr) {
      flight =
          std::make_shared<Flight>(key, hash, now, Flight::State::kRunning);
      shard.Register(w, key, hash, flight);
    }
    return {Role::kLead, std::move(flight)};
  }
}

// Unregisters a pending load whose leader leaves before completing it (an
// exception), without comparing keys. Returns the flight whose joiners
// still need an answer (coalescing only: an uncoalesced runner's callers
// wait for nobody but themselves), or null. Takes its own Writer.
template <bool kCoalesce, typename Shard>
std::shared_ptr<typename Shard::FlightType> AbandonPending(
    Shard& shard, typename Shard::Pending* pending) {
  {
    typename Shard::Writer w(shard);
    if constexpr (kCoalesce) {
      shard.ForgetPending(w, pending);
    } else {
      shard.ForgetRunner(w, pending);
      return nullptr;
    }
  }
  return pending->flight;
}

// Whether a load about to store its result still owns its key (no Put,
// Invalidate or newer load superseded it), ending its registration: a
// coalesced load unregisters (`flight`, or its `pending` load); an
// uncoalesced one leaves the runners that share the key's registration, and
// the last to leave unregisters it. Call with a Writer on `shard` held. May
// throw (a key comparison), leaving the registration as it was.
template <bool kCoalesce, typename Shard, typename K>
bool Leave(typename Shard::Writer& w, Shard& shard, const K& key, size_t hash,
           typename Shard::FlightType* flight, typename Shard::Pending* pending)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mutex()) {
  if constexpr (kCoalesce) {
    return shard.IsRegistered(w, key, hash, flight, /*drop=*/true, pending);
  } else if (pending != nullptr) {
    return shard.LeaveRunners(w, key, hash, pending);
  } else {
    const bool last = flight->RemoveRunner() == 0;
    return shard.IsRegistered(w, key, hash, flight, last);
  }
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ADMISSION_H_
