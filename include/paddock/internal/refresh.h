// File: paddock/internal/refresh.h
// -----------------------------------------------------------------------------
// Loads that run on the executor, and what the pipeline leaves to them: a
// background refresh of a stale entry (registered as a queued flight with a
// reserved load slot), a GetAsync caller's load, and the next step of a load
// parked until another process's fill. `LoadTask` is the executor's task;
// `Refresh` prepares and schedules tasks and carries out a run's follow-up
// (internal/load_pipeline.h: park the load, or refresh the stale record it
// stored).
//
// A task holds its flight from registration; a queued flight is run by
// whoever claims it first: the task when the executor runs it, or a caller
// that needs the value before then. Destroyed unrun (an executor that drops
// work), a task ends its load with Cancelled. After the cache is gone it
// touches nothing of it.

#ifndef PADDOCK_INTERNAL_REFRESH_H_
#define PADDOCK_INTERNAL_REFRESH_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet_path.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/internal/lifeline.h"
#include "paddock/internal/load_pipeline.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/outcome_store.h"
#include "paddock/listener.h"

namespace paddock::internal {

template <typename Core>
class LoadTask {
 public:
  using K = typename Core::Key;
  using Flight = typename Core::Flight;

  LoadTask(Core* core, const K& key, size_t hash,
           LoadKind kind = LoadKind::kRefresh)
      : core_(core),
        lifeline_(core->lifeline),
        key_(key),
        hash_(hash),
        kind_(kind) {}
  LoadTask(LoadTask&&) noexcept = default;
  LoadTask& operator=(LoadTask&&) = delete;
  ~LoadTask() {
    if (flight_ == nullptr) return;
    if (resume_.has_value()) {
      Resume(/*dropped=*/true);
    } else {
      Run(/*dropped=*/true);
    }
  }

  // Gives the task its registered flight; until then destroying it does
  // nothing. `claimed`: the flight is the key's shared registration of
  // uncoalesced loads (never queued); `delivery` their own rendezvous.
  void Attach(std::shared_ptr<Flight> flight, bool claimed = false,
              std::shared_ptr<Flight> delivery = nullptr) {
    flight_ = std::move(flight);
    claimed_ = claimed;
    delivery_ = std::move(delivery);
  }

  // Makes the task the next step of a load parked for another process's
  // fill (`load`, whose flight it shares): it asks the tier again from
  // `progress` when run. Destroyed unrun, it ends the load (see Resume).
  void ContinueAfterPark(const Load<Core>& load, FleetProgress progress) {
    resume_.emplace(std::move(progress));
    flight_ = load.flight;
    delivery_ = load.delivery;
    awaited_ = load.awaited;
  }

  // Forgets the load: destroying the task then does nothing (the load goes
  // on elsewhere).
  void Disarm() {
    flight_ = nullptr;
    delivery_ = nullptr;
  }

  void operator()() && {
    if (flight_ == nullptr) return;
    if (resume_.has_value()) {
      Resume(/*dropped=*/false);
    } else {
      Run(/*dropped=*/false);
    }
  }

 private:
  // A parked load, woken: asks the tier again (or, `dropped` by the
  // executor, ends with Cancelled). After the cache is gone it does
  // nothing: ~Cache has answered its asynchronous waiters, and no caller
  // blocks on a cache being destroyed.
  void Resume(bool dropped) noexcept;
  void Run(bool dropped) noexcept;
  // The slot a load on the executor needs before its loader runs (none with
  // a shared tier: it takes one once it is to load). Returns false if the
  // load ended instead (skipped, no slot, the cache closing).
  bool TakeSlotOrEnd(Load<Core>& load) noexcept;

  static absl::Status DestroyedBeforeItRan() {
    return absl::CancelledError(
        "paddock: cache destroyed before this queued load ran");
  }

  Core* core_;
  std::shared_ptr<Lifeline> lifeline_;
  K key_;
  size_t hash_;
  LoadKind kind_;
  bool claimed_ = false;
  std::shared_ptr<Flight> flight_;
  std::shared_ptr<Flight> delivery_;
  // Set for the next step of a parked load (Resume).
  std::optional<FleetProgress> resume_;
  Awaited awaited_ = Awaited::kByNobody;
};

template <typename Core>
class Engine<Core>::Refresh {
 public:
  using Task = LoadTask<Core>;

  explicit Refresh(Core& core) : core_(core) {}

  // Registers a refresh of `key`, whose entry is `n`, and puts its task in
  // `task` (left empty if none is needed, or none can take a slot: counted
  // as skipped). The caller holds the epoch guard under which it found `n`
  // (so `n` is compared by address safely), and schedules the task after
  // that guard ends. Throws what copying the key throws, with `n`
  // refreshable again.
  void Prepare(Shard& shard, const K& key, size_t hash, const Entry* n,
               std::optional<Task>& task);
  // Hands `task` to the executor; a task the executor refuses (throws) ends
  // its load with Cancelled. Never throws.
  void Schedule(Task task) noexcept {
    try {
      // Outside every lock and guard: an executor may run the task inline.
      core_.executor()->Schedule(std::move(task));
    } catch (...) {
      // The executor could not be made or refused the task, which it then
      // destroyed unrun (or `task` is destroyed here): either way the
      // refresh ends with Cancelled and the caller keeps what it was served.
    }
  }
  // Carries out what a run of `load`'s pipeline left to do, until it is
  // done: parks it (only on an executor task), or refreshes the stale record
  // it stored. Returns the load's outcome, or nullopt if it goes on
  // elsewhere (parked, or an asynchronous loader's). Throws only
  // std::bad_alloc.
  std::optional<Outcome> Continue(Load& load, LoadEnd<V> end, Where where);

 private:
  // Parks `load` until its key changes in the tier or `park.wait` passes,
  // its next step a task that FleetWaits schedules; returns false, parking
  // nothing, if the key changed since `park.since`. Throws if it cannot park.
  bool Park(Load& load, const ParkLoad& park);
  // Starts a refresh of the entry a served stale record became, if it is
  // still that record's.
  void RefreshStoredEntry(const Load& load, const RefreshStored& stored);

  Core& core_;
};

template <typename Core>
void LoadTask<Core>::Resume(bool dropped) noexcept {
  const Lifeline::Pass pass = lifeline_->Enter();
  Load<Core> load{key_, hash_, std::move(flight_), kind_};
  if (!pass) return;
  load.awaited = awaited_;
  load.delivery = std::move(delivery_);
  if (dropped || lifeline_->closing()) {
    typename Engine<Core>::OutcomeStore(*core_).Fail(
        load, absl::CancelledError("paddock: load task dropped"));
    return;
  }
  if constexpr (Core::kShareable) {
    LoadEnd<typename Core::Value> end =
        typename Engine<Core>::LoadPipeline(*core_).ResumeFleet(
            load, *resume_, Where::kExecutorTask);
    typename Engine<Core>::Refresh(*core_).Continue(load, std::move(end),
                                                    Where::kExecutorTask);
  }
}

template <typename Core>
void LoadTask<Core>::Run(bool dropped) noexcept {
  const std::shared_ptr<Flight> flight = std::move(flight_);
  const Lifeline::Pass pass = lifeline_->Enter();
  if (!pass) {
    // The cache is gone (its destructor cancelled every async waiter); tell
    // a blocked waiter still holding the flight, if any.
    if (!claimed_ && flight->TryClaim(0)) {
      flight->Publish({absl::CancelledError("paddock: cache destroyed")});
    }
    return;
  }
  // A caller that needed the value ran it already.
  if (!claimed_ && !flight->TryClaim(core_->NowNanos())) return;
  Load<Core> load{key_, hash_, flight, kind_, claimed_ ? 0 : flight->slot()};
  load.awaited =
      kind_ == LoadKind::kForeground ? Awaited::kByCaller : Awaited::kByNobody;
  load.delivery = delivery_;
  if (dropped) {
    typename Engine<Core>::OutcomeStore(*core_).Fail(
        load, absl::CancelledError("paddock: load task dropped"));
    return;
  }
  if (!TakeSlotOrEnd(load)) return;
  // A blocking loader holds this thread until it returns: a GetAsync miss of
  // the key waits for it rather than start another beside it
  // (Shard::ExecutorFlight).
  if (!claimed_ && !core_->async_loader) flight->MarkOnExecutor();
  LoadEnd<typename Core::Value> end =
      typename Engine<Core>::LoadPipeline(*core_).Run(load,
                                                      Where::kExecutorTask);
  typename Engine<Core>::Refresh(*core_).Continue(load, std::move(end),
                                                  Where::kExecutorTask);
}

template <typename Core>
bool LoadTask<Core>::TakeSlotOrEnd(Load<Core>& load) noexcept {
  typename Engine<Core>::OutcomeStore outcomes(*core_);
  if (kind_ == LoadKind::kRefresh && load.slot != 0) {
    // Its slot was reserved when it was queued; a load that needed one may
    // have taken it since. Skipped if none is free (it is only a refresh)
    // and nobody waits for it.
    load.slot = core_->slots.Restart(load.slot, core_->NowNanos());
    if (load.slot == 0 && outcomes.SkipRefresh(load)) return false;
  }
  // With a shared tier the slot is taken once the loader is to run, never
  // for a wait for another process (the pipeline's LoadWithSlot).
  if (load.slot == 0 && !core_->fleet()) {
    // The destructor waits for this task: it stops waiting for a slot once
    // the destructor begins (within LoadSlots' recheck interval).
    load.slot = core_->AcquireSlot();
    if (load.slot == 0) {
      outcomes.Fail(load, lifeline_->closing() ? DestroyedBeforeItRan()
                                               : core_->NoSlotError());
      return false;
    }
  }
  // Queued work that has not called the loader when the destructor begins
  // is dropped, as the destructor's contract says, whatever it waited for.
  if (lifeline_->closing()) {
    outcomes.Fail(load, DestroyedBeforeItRan());
    return false;
  }
  return true;
}

template <typename Core>
void Engine<Core>::Refresh::Prepare(Shard& shard, const K& key, size_t hash,
                                    const Entry* n, std::optional<Task>& task) {
  // Built before the lock (it copies the key); inert until given a flight.
  // If anything here throws, the entry must stay refreshable.
  absl::Cleanup refreshable = [n] {
    const_cast<Entry*>(n)->refreshing.store(false, std::memory_order_relaxed);
  };
  task.emplace(&core_, key, hash);
  bool skipped = false;
  bool unneeded = false;  // The task goes, after the lock (it holds a K).
  // Declared before the lock: if `Register` throws, the flight (and its
  // copy of K) is destroyed after the lock is released.
  std::shared_ptr<Flight> flight;
  {
    Writer w(shard);
    const int64_t now = core_.NowNanos();
    // `n` cannot have been freed (the caller's guard), so an equal address
    // is the same entry.
    if (shard.Find(hash, key, core_.lookup_eq()) != n) {
      unneeded = true;
    } else if (shard.HasLiveFlight(key, hash, now, core_.max_load_age)) {
      // One load per key; the one in flight replaces `n` when it stores.
      // `n` stays marked, so its later hits do not come here again.
      std::move(refreshable).Cancel();
      unneeded = true;
    } else if (const LoadSlots::Ticket slot = core_.slots.TryReserve(now);
               slot == 0) {
      const_cast<Entry*>(n)->refreshing.store(false, std::memory_order_relaxed);
      skipped = true;
    } else {
      absl::Cleanup release_slot = [&] { core_.slots.Release(slot); };
      flight = std::make_shared<Flight>(key, hash, now, Flight::State::kQueued,
                                        slot);
      shard.Register(w, key, hash, flight);
      std::move(release_slot).Cancel();  // The flight holds it now.
      task->Attach(std::move(flight));
      std::move(refreshable).Cancel();
    }
  }
  if (unneeded || skipped) {
    task.reset();
    if (skipped) core_.recorder.RefreshSkipped();
    return;
  }
  core_.recorder.RefreshStarted();
}

template <typename Core>
std::optional<typename Core::Outcome> Engine<Core>::Refresh::Continue(
    Load& load, LoadEnd<V> end, Where where) {
  for (;;) {
    if (auto* stored = std::get_if<RefreshStored>(&end.follow_up)) {
      RefreshStoredEntry(load, *stored);
    }
    auto* park = std::get_if<ParkLoad>(&end.follow_up);
    if (park == nullptr) return std::move(end.outcome);
    // Only a load asking a shared tier parks.
    if constexpr (Core::kShareable) {
      try {
        if (Park(load, *park)) return std::nullopt;
        // The key changed since the lookup: ask again now.
      } catch (...) {
        // Could not park (out of memory, no timer thread): wait here.
        if (!FleetPath(core_).AwaitChange(park->progress, park->wait)) {
          end = LoadPipeline(core_).LoadAlone(load);
          continue;
        }
      }
      FleetProgress progress = std::move(park->progress);
      end = LoadPipeline(core_).ResumeFleet(load, progress, where);
    } else {
      return std::move(end.outcome);
    }
  }
}

template <typename Core>
bool Engine<Core>::Refresh::Park(Load& load, const ParkLoad& park) {
  auto next = std::make_unique<Task>(&core_, load.key, load.hash, load.kind);
  next->ContinueAfterPark(load, park.progress);
  Task* const unparked = next.get();
  FleetWaits::Wake wake = [core = &core_, lifeline = core_.lifeline,
                           next = std::move(next)]() mutable {
    // On the tier's thread (a change) or FleetWaits' (a time): the next
    // step runs on the executor. A cache being destroyed gets nothing:
    // `next` then ends touching nothing of it.
    const Lifeline::Pass pass = lifeline->Enter();
    if (pass) Refresh(*core).Schedule(std::move(*next));
  };
  const auto at =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(park.wait);
  bool parked = false;
  try {
    parked =
        FleetWaits::Process().Park(core_.tier, park.progress.key_bytes,
                                   core_.lifeline.get(), park.since, at, wake);
  } catch (...) {
    unparked->Disarm();  // The load goes on here: `next` must not end it.
    throw;
  }
  if (!parked) unparked->Disarm();
  return parked;
}

template <typename Core>
void Engine<Core>::Refresh::RefreshStoredEntry(const Load& load,
                                               const RefreshStored& stored) {
  // Stored now, unless a write superseded it: refresh that very entry.
  if (core_.lifeline->closing()) return;
  std::optional<Task> refresh;
  {
    Shard& shard = core_.ShardFor(load.hash);
    EpochGuard guard;
    Entry* n = shard.Find(load.hash, load.key, core_.lookup_eq());
    const std::string* version = n != nullptr ? n->shared_version() : nullptr;
    if (version != nullptr && *version == stored.version &&
        !n->refreshing.exchange(true)) {
      try {
        Prepare(shard, load.key, load.hash, n, refresh);
      } catch (...) {
        // No refresh (Prepare unmarked the entry): the next stale hit
        // starts one.
      }
    }
  }
  if (refresh.has_value()) Schedule(*std::move(refresh));
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_REFRESH_H_
