// File: paddock/internal/waiting.h
// -----------------------------------------------------------------------------
// Callers waiting for a load: a blocking caller waits on the load's flight on
// its own thread (Wait); a GetAsync caller is an `AsyncWaiter` on the flight,
// completed once, by the load's outcome (Deliver), its wait_timeout (the
// timer thread of internal/async_waiters.h) or the cache's destructor.
//
// `Engine<Core>::Waiting` is made on the spot over a cache's
// internal::CacheCore; thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_WAITING_H_
#define PADDOCK_INTERNAL_WAITING_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/internal/async_waiters.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/lifeline.h"
#include "paddock/internal/lookup.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

// Calls `done` with `result`, dropping what it throws: a GetAsync
// callback's exception is documented as dropped.
template <typename F, typename T>
void CallDropping(F&& done, T&& result) noexcept {
  try {
    std::forward<F>(done)(std::forward<T>(result));
  } catch (...) {
  }
}

// A GetAsync caller waiting for a load. After the cache is gone it touches
// nothing of it.
template <typename Core>
class AsyncWaiter final : public AsyncWaiterBase {
 public:
  using K = typename Core::Key;
  using V = typename Core::Value;
  using Callback = typename Core::Callback;

  // `joined`: it waits for another caller's load (its timeout is counted as
  // a wait timeout), not for one it started.
  AsyncWaiter(Core* core, const K& key, size_t hash, Callback done,
              SteadyTime deadline, bool joined)
      : AsyncWaiterBase(deadline),
        core_(core),
        lifeline_(core->lifeline),
        key_(key),
        hash_(hash),
        joined_(joined),
        done_(std::move(done)) {}

  // The waiter's own copy of its key: valid as long as the waiter, after
  // its callback has run (and freed the caller's). Thread-safe.
  const K& key() const { return key_; }

  // Calls back with `result`; for the waiter's claimer only.
  void Run(absl::StatusOr<V> result) noexcept {
    // Destroying the cache from inside `done` is caught (internal/lifeline.h).
    const Lifeline::CallbackScope scope(lifeline_.get());
    // Moved out, so that what the callback holds is destroyed once it has
    // run, not with the waiter (which its load's flight may hold on to).
    Callback done = std::move(done_);
    CallDropping(std::move(done), std::move(result));
  }

  bool Expire() override {
    const Lifeline::Pass pass = lifeline_->Enter();
    if (!pass) return false;  // ~Cache cancels it, on its own thread.
    absl::StatusOr<V> result = absl::InternalError("paddock: timed out");
    try {
      result =
          typename Engine<Core>::Lookup(*core_).TimedOut(key_, hash_, joined_);
    } catch (...) {
      // A copy of V threw: the caller gets the timeout's Internal error.
    }
    Run(std::move(result));
    return true;
  }

  void Cancel() override {
    Run(absl::CancelledError("paddock: cache destroyed"));
  }

 private:
  Core* const core_;
  const std::shared_ptr<Lifeline> lifeline_;
  const K key_;
  const size_t hash_;
  const bool joined_;
  Callback done_;
};

template <typename Core>
class Engine<Core>::Waiting {
 public:
  using Waiter = AsyncWaiter<Core>;

  explicit Waiting(Core& core) : core_(core) {}

  // Blocks until `flight` publishes or wait_timeout passes; returns what the
  // caller gets (see Lookup::Serve, Lookup::TimedOut). `counted`: a
  // coalesced waiter, whose timeout counts in the stats.
  absl::StatusOr<V> Wait(const std::shared_ptr<Flight>& flight, const K& key,
                         size_t hash, bool counted = true) {
    if (const Outcome* outcome = flight->WaitFor(core_.options.wait_timeout);
        outcome != nullptr) {
      return Lookup(core_).Serve(*outcome);
    }
    return Lookup(core_).TimedOut(key, hash, counted);
  }

  // Makes `waiter` (it copies `key`) and enlists it on `rendezvous`, with a
  // timer for wait_timeout; answers it at once if wait_timeout is zero, no
  // timer can be set, or the flight published meanwhile. `joined`: it waits
  // for another caller's load. `waiter` is set as soon as it exists, so that
  // the caller reads its key, not the caller's, whatever happens next.
  // Throws, with `done` not called and nothing enlisted, what the key's copy
  // or an allocation throws.
  void Enlist(Flight& rendezvous, const K& key, size_t hash, Callback done,
              bool joined, std::shared_ptr<Waiter>& waiter) {
    const absl::Duration timeout = core_.options.wait_timeout;
    waiter = std::make_shared<Waiter>(
        &core_, key, hash, std::move(done),
        IsForever(timeout) ? AsyncWaiterBase::SteadyTime::max()
                           : std::chrono::steady_clock::now() +
                                 absl::ToChronoNanoseconds(timeout),
        joined);
    if (timeout <= absl::ZeroDuration()) {
      // Never waits: the answer a timeout gives, now. (The load, if this
      // caller started one, still runs and stores.)
      waiter->Claim();
      waiter->Run(Lookup(core_).TimedOut(waiter->key(), hash, joined));
      return;
    }
    try {
      core_.async_waiters.Add(waiter);
    } catch (...) {
      // No timer thread: this caller gets the timeout's answer at once.
      waiter->Claim();
      waiter->Run(Lookup(core_).TimedOut(waiter->key(), hash, joined));
    }
    bool added = true;
    try {
      added = waiter->claimed() || rendezvous.AddAsyncWaiter(waiter);
    } catch (...) {
      // Not added (out of memory): forget it before its timer answers, so
      // that `done` is not called after this caller gets the exception. If
      // the timer has claimed it already, that answer stands and this
      // caller gets no exception.
      if (waiter->Claim()) {
        core_.async_waiters.Remove(waiter.get());
        throw;
      }
    }
    if (!added) Deliver(waiter, *rendezvous.published());  // Published.
  }

  // Completes an asynchronous waiter of this core with `outcome`, if nobody
  // else did. Never throws: a copy of V that throws gives it an Internal
  // error.
  void Deliver(const std::shared_ptr<AsyncWaiterBase>& base,
               const Outcome& outcome) noexcept {
    // Only this core's waiters are ever added to its flights.
    auto* waiter = static_cast<Waiter*>(base.get());
    if (!waiter->Claim()) return;  // Timed out or cancelled first.
    core_.async_waiters.Remove(waiter);
    absl::StatusOr<V> result = absl::InternalError(
        "paddock: copying the loaded value for a waiter failed");
    try {
      result = Lookup(core_).Serve(outcome);
    } catch (...) {
      // A copy of V threw: this waiter gets the Internal error.
    }
    waiter->Run(std::move(result));
  }

 private:
  Core& core_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_WAITING_H_
