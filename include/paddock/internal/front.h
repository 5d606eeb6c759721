// File: paddock/internal/front.h
// -----------------------------------------------------------------------------
// The step every lookup past the hit path shares (Get, GetAsync, Await): what
// the key's entry serves now (fresh, stale with a refresh started, a
// remembered error), or else the caller's part in the key's load, decided by
// admission under the shard's lock; and GetAsync's start of the load it leads.
// A served answer is counted and its refresh scheduled only after the epoch
// guard ends (a load must never run inside one).
//
// `Engine<Core>::Front` is made on the spot over a cache's internal::CacheCore;
// thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_FRONT_H_
#define PADDOCK_INTERNAL_FRONT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/internal/admission.h"
#include "paddock/internal/async_waiters.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/in_flight_set.h"
#include "paddock/internal/load_pipeline.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/lookup.h"
#include "paddock/internal/outcome_store.h"
#include "paddock/internal/refresh.h"
#include "paddock/internal/waiting.h"
#include "paddock/listener.h"

namespace paddock::internal {

// What a lookup served: the value or error, what it counts as, and the
// refresh it starts.
template <typename Core>
struct Served {
  std::optional<absl::StatusOr<typename Core::Value>> result;  // Unset: none.
  Answer<typename Core::Entry> answer;
  int64_t now = 0;
  std::optional<LoadTask<Core>> refresh;
};

// What Front::Admit found: `served`, or the caller's part in the key's load.
template <typename Core>
struct Admitted {
  Served<Core> served;
  typename Core::LoadStart start;  // When it looked: `served.now`.
  Joined<typename Core::Flight> joined;
};

template <typename Core>
class Engine<Core>::Front {
 public:
  explicit Front(Core& core) : core_(core) {}

  // Under one epoch guard and the shard's lock: what `key`'s entry serves,
  // or else the caller's part in its load (internal/admission.h), counted as
  // a miss (and a coalesced wait, if it joined). `times_load`: the lookup's
  // time comes from StartLoadClock, for a load this caller may time. Throws
  // what the key's copy or Eq, V's copy or an allocation throws, with
  // nothing registered.
  Admitted<Core> Admit(Shard& shard, const K& key, size_t hash,
                       const AdmitAs<Flight>& as, bool times_load,
                       PendingLoad<Flight>* pending);
  // What `key`'s entry serves now, without a lock unless it starts a
  // refresh; nullopt if it serves nothing. Throws as Admit.
  std::optional<absl::StatusOr<V>> ServeNow(Shard& shard, const K& key,
                                            size_t hash);
  // After the guard: counts what was served, schedules its refresh, and
  // returns the result. Never throws.
  absl::StatusOr<V> Finish(Served<Core>& served);
  // GetAsync past what it can answer at once: serves what Admit serves, or
  // enlists `done` as a waiter on the key's load, starting that load if it
  // leads it. Never blocks. Throws (with `done` not called, and a load it
  // registered ended) what the key's copy or an allocation throws.
  void AsyncMiss(Shard& shard, const K& key, size_t hash, Callback done);
  // GetAsync's load, once its caller is enlisted: starts it here (an
  // asynchronous loader with nothing to wait for) or schedules a task.
  // Never throws: a load that cannot start ends (EndUnstarted).
  void StartAsyncLead(const K& key, size_t hash, std::shared_ptr<Flight> flight,
                      std::shared_ptr<Flight> delivery, bool start_here);
  // Ends a GetAsync caller's load that never started, so that a queued
  // flight does not wait for a task nobody runs; unless a blocking Get
  // claimed it meanwhile (its load then ends it).
  void EndUnstarted(const K& key, size_t hash,
                    const std::shared_ptr<Flight>& flight,
                    std::shared_ptr<Flight> delivery, bool start_here) noexcept;

 private:
  // Inside the guard `served.answer` was made under: the result it serves,
  // and the refresh it starts (prepared, not scheduled). Copies V.
  void ServeUnderGuard(Shard& shard, const K& key, size_t hash,
                       Served<Core>& served);

  Core& core_;
};

template <typename Core>
Admitted<Core> Engine<Core>::Front::Admit(Shard& shard, const K& key,
                                          size_t hash,
                                          const AdmitAs<Flight>& as,
                                          bool times_load,
                                          PendingLoad<Flight>* pending) {
  Admitted<Core> admitted;
  Served<Core>& served = admitted.served;
  {
    // Held across the lock so that the entry examined under it can still be
    // read (and compared by address) after it.
    EpochGuard guard;
    // Read before the lock, which is then held for less: an entry stored
    // after this reading is fresh at it, and a load registered after it has
    // not reached max_load_age.
    admitted.start = times_load ? core_.StartLoadClock()
                                : typename Core::LoadStart{core_.NowNanos()};
    served.now = admitted.start.nanos;
    {
      Writer w(shard);
      // Re-check: a load may have stored the value since the lock-free look.
      if (Entry* n = shard.Find(hash, key, core_.lookup_eq()); n != nullptr) {
        served.answer = Lookup(core_).Examine(n, served.now);
      }
      if (served.answer.served == Answer<Entry>::Served::kNothing) {
        admitted.joined = RegisterOrJoin<Core::kCoalesce>(
            w, shard, key, hash, served.now, core_.max_load_age, as, pending);
      }
    }
    ServeUnderGuard(shard, key, hash, served);
  }
  if (!served.result.has_value()) {
    core_.recorder.Miss();
    if (admitted.joined.role == Role::kJoin) core_.recorder.CoalescedWait();
  }
  return admitted;
}

template <typename Core>
std::optional<absl::StatusOr<typename Core::Value>>
Engine<Core>::Front::ServeNow(Shard& shard, const K& key, size_t hash) {
  Served<Core> served;
  {
    EpochGuard guard;
    if (Entry* n = shard.Find(hash, key, core_.lookup_eq()); n != nullptr) {
      served.now = core_.NowNanos();
      served.answer = Lookup(core_).Examine(n, served.now);
      ServeUnderGuard(shard, key, hash, served);
    }
  }
  // Past the guard: a load must never run inside one.
  if (!served.result.has_value()) return std::nullopt;
  return Finish(served);
}

template <typename Core>
void Engine<Core>::Front::ServeUnderGuard(Shard& shard, const K& key,
                                          size_t hash, Served<Core>& served) {
  if (served.answer.served == Answer<Entry>::Served::kNothing) return;
  served.result.emplace(Lookup::ResultOf(served.answer));
  if (served.answer.refresh) {
    Refresh(core_).Prepare(shard, key, hash, served.answer.entry,
                           served.refresh);
  }
}

template <typename Core>
absl::StatusOr<typename Core::Value> Engine<Core>::Front::Finish(
    Served<Core>& served) {
  Lookup(core_).Record(served.answer, served.now);
  if (served.refresh.has_value()) {
    Refresh(core_).Schedule(*std::move(served.refresh));
  }
  return *std::move(served.result);
}

template <typename Core>
void Engine<Core>::Front::AsyncMiss(Shard& shard, const K& key, size_t hash,
                                    Callback done) {
  if (core_.lifeline->closing()) [[unlikely]] {
    // Asked from a callback ~Cache runs: no load, and no waiter, would ever
    // answer (the destructor has cancelled every waiter it holds).
    CallDropping(std::move(done),
                 absl::CancelledError("paddock: cache destroyed"));
    return;
  }
  // An asynchronous loader with nothing to block on starts at once, here;
  // anything else that may block (a blocking loader, a wait for a load
  // slot, the shared tier) runs on the executor.
  const bool start_here = core_.async_loader && core_.tier == nullptr &&
                          core_.options.max_concurrent_loads == 0;
  Admitted<Core> admitted =
      Admit(shard, key, hash, AdmitAs<Flight>::GetAsync(start_here),
            /*times_load=*/false, /*pending=*/nullptr);
  if (admitted.served.result.has_value()) {
    CallDropping(std::move(done), Finish(admitted.served));
    return;
  }
  const bool lead = admitted.joined.role != Role::kJoin;
  std::shared_ptr<Flight> flight = std::move(admitted.joined.flight);
  std::shared_ptr<Flight> delivery;
  // Once the waiter can be answered (by its timer, by a load a blocking Get
  // claimed, or inline by a zero wait_timeout), `done` may free whatever
  // holds the caller's `key`: from then on only the waiter's own copy of the
  // key is read.
  std::shared_ptr<AsyncWaiter<Core>> waiter;
  try {
    if constexpr (!Core::kCoalesce) {
      delivery = std::make_shared<Flight>(key, hash, admitted.start.nanos);
    }
    Flight& rendezvous = delivery != nullptr ? *delivery : *flight;
    Waiting(core_).Enlist(rendezvous, key, hash, std::move(done),
                          /*joined=*/!lead, waiter);
  } catch (...) {
    // This caller gets the exception (as from Get), not its callback. Until
    // a task (or the loader) holds the load it registered, a throw ends it:
    // a queued flight never ages, and every later caller of the key would
    // join it and wait for a load nobody runs.
    if (lead) {
      EndUnstarted(waiter != nullptr ? waiter->key() : key, hash, flight,
                   std::move(delivery), start_here);
    }
    throw;
  }
  if (lead) {
    StartAsyncLead(waiter->key(), hash, std::move(flight), std::move(delivery),
                   start_here);
  }
}

template <typename Core>
void Engine<Core>::Front::StartAsyncLead(const K& key, size_t hash,
                                         std::shared_ptr<Flight> flight,
                                         std::shared_ptr<Flight> delivery,
                                         bool start_here) {
  if (start_here) {
    Load load{key, hash, flight, LoadKind::kForeground};
    load.awaited = Awaited::kByCaller;
    load.delivery = std::move(delivery);
    LoadPipeline(core_).StartAsync(load, nullptr);
    return;
  }
  try {
    std::optional<LoadTask<Core>> task;
    task.emplace(&core_, key, hash, LoadKind::kForeground);
    task->Attach(flight, /*claimed=*/!Core::kCoalesce, std::move(delivery));
    Refresh(core_).Schedule(*std::move(task));
  } catch (...) {
    // The task could not be made (its key's copy threw): end the load as
    // dropped work ends, so that its waiters (this caller's among them,
    // through its delivery) are not left waiting.
    EndUnstarted(key, hash, flight, std::move(delivery), start_here);
  }
}

template <typename Core>
void Engine<Core>::Front::EndUnstarted(const K& key, size_t hash,
                                       const std::shared_ptr<Flight>& flight,
                                       std::shared_ptr<Flight> delivery,
                                       bool start_here) noexcept {
  // A blocking Get may have claimed the queued flight meanwhile: then its
  // load runs, and ends the flight, for every caller that joined it. (Other
  // flights start running: nobody else can claim them.)
  if constexpr (Core::kCoalesce) {
    if (!start_here && !flight->TryClaim(core_.NowNanos())) return;
  }
  Load load{key, hash, flight, LoadKind::kForeground};
  load.delivery = std::move(delivery);
  OutcomeStore(core_).Fail(
      load, absl::InternalError("paddock: could not start the load"));
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FRONT_H_
