// File: paddock/internal/load_pipeline.h
// -----------------------------------------------------------------------------
// One load from its start to its outcome: with a shared tier, ask it first
// (internal/fleet_path.h) and carry out its verdict; take a load slot once the
// loader is to run; call the loader here (or start the asynchronous one);
// fill the tier under the lease; complete the load (internal/outcome_store.h).
//
// The pipeline never schedules work of its own. What is left to do on another
// thread comes back as the `LoadEnd`'s follow-up, for its caller (the refresh
// room, internal/refresh.h) to carry out: park the load until another
// process's fill, or refresh the stale record it served.
//
// `Engine<Core>::LoadPipeline` is made on the spot over a cache's
// internal::CacheCore; thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_LOAD_PIPELINE_H_
#define PADDOCK_INTERNAL_LOAD_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/completion.h"
#include "paddock/internal/async_load.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/fleet_path.h"
#include "paddock/internal/lifeline.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/loader_call.h"
#include "paddock/internal/outcome_store.h"
#include "paddock/listener.h"

namespace paddock::internal {

// A stale record from the tier was served and stored: refresh that entry.
struct RefreshStored {
  std::string version;  // The record's: refresh only if it is still stored.
};
// Another process fills the key: park the load (run by a task on the
// executor) from `progress` until the key changes or `wait` passes. `since`:
// the change sequence read before the lookup.
struct ParkLoad {
  FleetProgress progress;
  uint64_t since;
  absl::Duration wait;
};

// How a run of the pipeline ended.
template <typename V>
struct LoadEnd {
  // The load's outcome; nullopt if it goes on elsewhere (an asynchronous
  // loader completes it, or it is to be parked).
  std::optional<Outcome<V>> outcome;
  std::variant<std::monostate, RefreshStored, ParkLoad> follow_up = {};
};

template <typename Core>
class Engine<Core>::LoadPipeline {
 public:
  using End = LoadEnd<V>;

  explicit LoadPipeline(Core& core) : core_(core) {}

  // Runs `load` (through the shared tier, if any) on this thread, `where`.
  // Never waits for another process's fill on an executor task (ParkLoad).
  // Throws only std::bad_alloc.
  End Run(Load& load, Where where) {
    if constexpr (Core::kShareable) {
      if (core_.tier != nullptr) return RunFleet(load, where);
    }
    return {LoadHere(load, nullptr)};
  }
  // A load that asked the tier, from `progress` on (after a park, say).
  End ResumeFleet(Load& load, FleetProgress& progress, Where where);
  // The load without the tier (it failed, or could not help).
  End LoadAlone(Load& load) { return {LoadWithSlot(load, nullptr)}; }

  // Calls the loader on this thread (an asynchronous one: starts it,
  // returning nullopt); with a lease, writes the result to the shared tier
  // before storing it.
  std::optional<Outcome> LoadHere(Load& load, const Lease* lease);
  // The loader's result, from `started` on: the rest of LoadHere.
  // `verdict`: an error is the key's answer, which error_ttl shares with the
  // fleet; false for an error of this process's own (a dropped completion,
  // a load that could not start), which gives the lease back instead.
  Outcome Finish(Load& load, absl::StatusOr<V> result, int64_t started,
                 const Lease* lease, bool verdict = true);
  // Starts the asynchronous loader for `load`, which it takes over. Never
  // throws: if the loader cannot be started, the load ends with an error.
  void StartAsync(Load& load, const Lease* lease);

 private:
  using State = AsyncLoadState<Core>;

  End RunFleet(Load& load, Where where);
  // Carries out a verdict of the tier.
  End Apply(Load& load, FleetProgress& progress, FleetVerdict<V>& verdict);
  // LoadHere for a load that asked the tier: takes its load slot first,
  // which it held during no wait for another process. A refresh nobody
  // waits for that finds none is skipped; otherwise it waits for one
  // within wait_timeout. A load that ends without one gives its lease back.
  std::optional<Outcome> LoadWithSlot(Load& load, const Lease* lease);
  // What the completion of an asynchronous load does. `core` is touched
  // only if it still lives (the completion may come after it is gone).
  static void FinishAsync(Core* core, const std::shared_ptr<State>& state,
                          absl::StatusOr<V> result, bool dropped,
                          const absl::Status& thrown);

  Core& core_;
};

template <typename Core>
typename Engine<Core>::LoadPipeline::End Engine<Core>::LoadPipeline::RunFleet(
    Load& load, Where where) {
  std::optional<FleetProgress> progress = FleetPath(core_).Begin(load);
  if (!progress.has_value()) return LoadAlone(load);
  return ResumeFleet(load, *progress, where);
}

template <typename Core>
typename Engine<Core>::LoadPipeline::End
Engine<Core>::LoadPipeline::ResumeFleet(Load& load, FleetProgress& progress,
                                        Where where) {
  FleetVerdict<V> verdict = FleetPath(core_).Ask(load, progress, where);
  return Apply(load, progress, verdict);
}

template <typename Core>
typename Engine<Core>::LoadPipeline::End Engine<Core>::LoadPipeline::Apply(
    Load& load, FleetProgress& progress, FleetVerdict<V>& verdict) {
  OutcomeStore outcomes(core_);
  if (auto* answer = std::get_if<TierAnswer<V>>(&verdict)) {
    load.from_tier = &answer->record;
    const bool remembered_error = !answer->value.ok();
    return {outcomes.Complete(load, std::move(answer->value),
                              /*loader_ran=*/remembered_error, answer->now,
                              answer->now)};
  }
  if (auto* stale = std::get_if<ServeStale<V>>(&verdict)) {
    // The lease goes back first: the refresh asks the tier again, as one
    // that a stale hit starts does (and finds another process refreshing,
    // if one took the lease meanwhile). Kept, the refresh would wait for it.
    FleetPath(core_).GiveBack(&stale->lease);
    load.from_tier = &stale->record;
    return {outcomes.Complete(load, std::move(stale->stale),
                              /*loader_ran=*/false, stale->now, stale->now),
            RefreshStored{stale->record.version}};
  }
  if (auto* leased = std::get_if<LoadUnderLease>(&verdict)) {
    return {LoadWithSlot(load, &leased->lease)};
  }
  if (auto* park = std::get_if<ParkFor>(&verdict)) {
    return {std::nullopt,
            ParkLoad{std::move(progress), park->since, park->wait}};
  }
  if (auto* give_up = std::get_if<GiveUp>(&verdict)) {
    if (give_up->stale_until_keep) {
      load.awaited = Awaited::kByCallerPastItsWait;
    }
    return {outcomes.Complete(load, std::move(give_up->error),
                              /*loader_ran=*/false, give_up->now,
                              give_up->now)};
  }
  return LoadAlone(load);
}

template <typename Core>
std::optional<typename Core::Outcome> Engine<Core>::LoadPipeline::LoadWithSlot(
    Load& load, const Lease* lease) {
  OutcomeStore outcomes(core_);
  if (load.slot == 0 && !load.caller_waits() &&
      load.kind == LoadKind::kRefresh) {
    // Only a refresh: skipped if no slot is free and nobody waits for it.
    load.slot = core_.slots.TryAcquire(core_.NowNanos());
    if (load.slot == 0 && outcomes.SkipRefresh(load)) {
      FleetPath(core_).GiveBack(lease);
      return std::nullopt;
    }
  }
  if (load.slot == 0) {
    load.slot = core_.AcquireSlot();
    if (load.slot == 0) {
      FleetPath(core_).GiveBack(lease);
      return outcomes.Fail(
          load, core_.lifeline->closing()
                    ? absl::CancelledError(
                          "paddock: cache destroyed before this load took a "
                          "load slot")
                    : core_.NoSlotError());
    }
  }
  return LoadHere(load, lease);
}

template <typename Core>
std::optional<typename Core::Outcome> Engine<Core>::LoadPipeline::LoadHere(
    Load& load, const Lease* lease) {
  if (core_.async_loader) {
    StartAsync(load, lease);
    return std::nullopt;
  }
  // The slot goes back however the load ends.
  absl::Cleanup release_slot = [&] {
    core_.slots.Release(std::exchange(load.slot, 0));
  };
  core_.recorder.LoadStarted(load.kind);
  const int64_t started =
      load.starts_at.has_value() ? *load.starts_at : core_.NowNanos();
  absl::StatusOr<V> result = LoaderCall(core_).Call(load.key, load.hash);
  std::move(release_slot).Cancel();  // Finish releases it.
  return Finish(load, std::move(result), started, lease);
}

template <typename Core>
typename Core::Outcome Engine<Core>::LoadPipeline::Finish(
    Load& load, absl::StatusOr<V> result, int64_t started, const Lease* lease,
    bool verdict) {
  const int64_t finished = core_.NowNanos();
  core_.slots.Release(std::exchange(load.slot, 0));
  core_.recorder.LoadFinished(load.kind, finished - started, result.status());
  if constexpr (Core::kShareable) {
    if (lease != nullptr) {
      load.filled = FleetPath(core_).Fill(load, *lease, result, started,
                                          finished, verdict);
    }
  }
  return OutcomeStore(core_).Complete(load, std::move(result),
                                      /*loader_ran=*/true, started, finished);
}

template <typename Core>
void Engine<Core>::LoadPipeline::StartAsync(Load& load, const Lease* lease) {
  core_.recorder.LoadStarted(load.kind);
  const int64_t started = core_.NowNanos();
  std::shared_ptr<State> state;
  std::optional<Completion<V>> completion;
  try {
    state = std::make_shared<State>(core_, load, lease, started);
    completion.emplace([core = &core_, state](absl::StatusOr<V> result,
                                              bool dropped) mutable {
      FinishAsync(core, state, std::move(result), dropped, absl::OkStatus());
    });
  } catch (...) {
    // Nothing started (a copy of the key threw, an allocation failed): the
    // load ends here, as one whose loader failed at once. Never throws, so
    // that no caller (a task under noexcept among them) is left with a
    // registered load that nobody runs.
    Finish(
        state != nullptr ? state->load : load,
        absl::InternalError("paddock: could not start the asynchronous load"),
        started, lease, /*verdict=*/false);
    return;
  }
  if (std::optional<SettleNow> now =
          AsyncLoads<Core>::Call(core_, *state, *std::move(completion))) {
    FinishAsync(&core_, state, std::move(now->result), /*dropped=*/false,
                now->thrown);
  }
}

template <typename Core>
void Engine<Core>::LoadPipeline::FinishAsync(
    Core* core, const std::shared_ptr<State>& state, absl::StatusOr<V> result,
    bool dropped, const absl::Status& thrown) {
  std::optional<absl::StatusOr<V>> settled =
      AsyncLoads<Core>::Settle(*state, std::move(result), dropped, thrown);
  if (!settled.has_value()) return;
  const Lifeline::Pass pass = state->lifeline->Enter();
  if (!pass) {
    AsyncLoads<Core>::ReleaseOrphanLease(*state);
    return;
  }
  // A dropped completion (a loader shedding work, or shutting down with
  // this process) says nothing about the key: the fleet does not remember
  // it, and another process may load the key at once.
  LoadPipeline(*core).Finish(state->load, *std::move(settled), state->started,
                             state->lease ? &*state->lease : nullptr,
                             /*verdict=*/!dropped);
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_PIPELINE_H_
