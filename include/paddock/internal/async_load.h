// File: paddock/internal/async_load.h
// -----------------------------------------------------------------------------
// An asynchronous loader's load in progress (`Options` with an AsyncLoader):
// what its completion needs when it is called, on any thread, perhaps after
// the cache is gone, and the decisions that completion makes before the load
// is finished the usual way. A completion is honoured once; one dropped while
// the loader call unwinds is answered by the call's own catch (which knows
// the exception); and one that comes after the cache is gone only gives the
// shared tier's lease back.
//
// `AsyncLoadState<Core>` is shared by the load's starter and its completion;
// `AsyncLoads<Core>` holds the steps, as static functions.

#ifndef PADDOCK_INTERNAL_ASYNC_LOAD_H_
#define PADDOCK_INTERNAL_ASYNC_LOAD_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/completion.h"
#include "paddock/internal/lifeline.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/loader_call.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

template <typename Core>
struct AsyncLoadState {
  using K = typename Core::Key;

  // Parameters named apart from the members: public headers stay quiet
  // under a user's -Wshadow.
  AsyncLoadState(Core& core, Load<Core>& from, const Lease* held,
                 int64_t started_at)
      : lifeline(core.lifeline),
        key(from.key),
        load{key, from.hash, from.flight, from.kind, /*slot=*/0},
        lease(held != nullptr ? std::optional<Lease>(*held) : std::nullopt),
        tier(held != nullptr ? core.options.shared : nullptr),
        started(started_at) {
    // The load slot moves last, once nothing can throw: a copy above that
    // throws leaves it with `from`, whose failure gives it back (taken
    // first, it went down with this half-made object, held until
    // max_load_age).
    load.slot = std::exchange(from.slot, 0);
    load.awaited = from.awaited;
    load.delivery = from.delivery;
  }

  const std::shared_ptr<Lifeline> lifeline;
  const K key;
  Load<Core> load;
  const std::optional<Lease> lease;
  // With a lease: the tier, to give it back if the cache is gone when the
  // load ends (the tier may outlive the cache, and would extend the lease
  // for hold_for meanwhile).
  const std::shared_ptr<SharedTier> tier;
  const int64_t started;
  std::atomic<bool> finished{false};
  // Set while the loader call is on the stack of `caller`: a completion
  // destroyed there by an exception leaves the answer to the catch, or, if
  // the loader catches that exception itself, to its return
  // (`dropped_in_call`, read and written on `caller` only).
  std::atomic<bool> in_call{false};
  std::optional<absl::Status> dropped_in_call;
  std::thread::id caller;
  int uncaught = 0;
};

// What the starter settles itself once the loader call returned: the loader
// threw (`thrown`), or its completion was dropped by an exception it caught.
struct SettleNow {
  absl::Status result;
  absl::Status thrown;
};

template <typename Core>
class AsyncLoads {
 public:
  using V = typename Core::Value;
  using State = AsyncLoadState<Core>;

  // Calls the asynchronous loader with `done` (a completion of `state`).
  // Returns what the caller must settle at once, or nullopt if the
  // completion will. Throws only std::bad_alloc.
  static std::optional<SettleNow> Call(const Core& core, State& state,
                                       Completion<V> done) {
    state.caller = std::this_thread::get_id();
    state.uncaught = std::uncaught_exceptions();
    state.in_call.store(true, std::memory_order_release);
    // Called as a Loader is: a Get of this key from inside the call is
    // refused at once, instead of waiting for a completion that cannot come
    // before the call returns.
    absl::Status thrown = typename Engine<Core>::LoaderCall(core).CallAsync(
        state.key, state.load.hash, std::move(done));
    state.in_call.store(false, std::memory_order_release);
    if (!thrown.ok()) return SettleNow{thrown, thrown};
    if (state.dropped_in_call.has_value()) {
      // Dropped by an exception the loader caught: a drop all the same.
      return SettleNow{*state.dropped_in_call, absl::OkStatus()};
    }
    return std::nullopt;
  }

  // A completion's call with `result` (`dropped`: the completion was
  // destroyed uncalled; `thrown`: the loader threw). Returns the load's
  // result, once; nullopt if this call is to be ignored (a second one, or
  // one made while the loader call unwinds, which its catch answers).
  static std::optional<absl::StatusOr<V>> Settle(State& state,
                                                 absl::StatusOr<V> result,
                                                 bool dropped,
                                                 const absl::Status& thrown) {
    if (dropped && state.in_call.load(std::memory_order_acquire) &&
        std::this_thread::get_id() == state.caller &&
        std::uncaught_exceptions() > state.uncaught) {
      // Unwinding from the loader: the catch answers, with what().
      state.dropped_in_call = result.status();
      return std::nullopt;
    }
    if (!thrown.ok()) result = thrown;
    if (state.finished.exchange(true, std::memory_order_acq_rel)) {
      return std::nullopt;
    }
    return result;
  }

  // The cache is gone when the load ends: nobody is answered (the
  // destructor answered every waiter), but a lease goes back.
  static void ReleaseOrphanLease(const State& state) noexcept {
    if (state.tier == nullptr) return;
    try {
      (void)state.tier->Release(state.lease->key_bytes, state.lease->token);
    } catch (...) {
      // A tier that throws: the lease lapses.
    }
  }
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ASYNC_LOAD_H_
