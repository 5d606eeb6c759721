// File: paddock/internal/flight.h
// -----------------------------------------------------------------------------
// `Flight<T>`: the rendezvous of one load of one key. Whoever runs the load
// publishes its outcome once; callers that joined block until it does or
// their timeout passes.
//
// A flight is queued (a background refresh scheduled on an executor, not yet
// started), running, or done. Whoever claims a queued flight runs it: the
// executor's task, or a caller that needs the value now, so that no caller
// ever waits for a task queued behind its own on the same executor. A done
// flight is never joined again, so a flight left registered by an exception
// cannot wedge its key.
//
// One allocation (with its std::shared_ptr control block); the owner counts
// who joined, so a load nobody joined, the common miss, publishes nothing.

#ifndef PADDOCK_INTERNAL_FLIGHT_H_
#define PADDOCK_INTERNAL_FLIGHT_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "paddock/internal/async_waiters.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

template <typename T>
class Flight {
 public:
  // kClaiming: between a claim and its new `started_at` being stored; still
  // counts as queued, so that nobody takes the flight for one that started
  // long ago.
  enum class State : uint8_t { kQueued, kClaiming, kRunning, kDone };

  // `started_at`: when the flight was registered, on the cache's clock.
  // `slot`: the load slot it already holds (a refresh takes one when it is
  // scheduled), or 0.
  explicit Flight(int64_t started_at, State state = State::kRunning,
                  LoadSlots::Ticket slot = 0)
      : slot_(slot), started_at_(started_at), state_(state) {}
  Flight(const Flight&) = delete;
  Flight& operator=(const Flight&) = delete;

  // When the flight was registered or, once claimed, when its load started.
  int64_t started_at() const {
    return started_at_.load(std::memory_order_relaxed);
  }
  LoadSlots::Ticket slot() const { return slot_; }

  // Takes a queued flight to run it, from `now` on. True for exactly one
  // caller. Lock-free; whoever sees the flight running (`queued()` false)
  // afterwards sees its new `started_at()`.
  bool TryClaim(int64_t now) {
    State expected = State::kQueued;
    if (!state_.compare_exchange_strong(expected, State::kClaiming,
                                        std::memory_order_acq_rel)) {
      return false;
    }
    started_at_.store(now, std::memory_order_relaxed);
    state_.store(State::kRunning, std::memory_order_release);
    return true;
  }
  // Not yet running: queued, or being claimed. Thread-safe.
  bool queued() const {
    const State state = state_.load(std::memory_order_acquire);
    return state == State::kQueued || state == State::kClaiming;
  }
  // Marks a claimed flight as run by a blocking loader on an executor
  // thread (which it holds until the loader returns). Thread-safe.
  void MarkOnExecutor() { on_executor_.store(true, std::memory_order_release); }
  bool on_executor() const {
    return on_executor_.load(std::memory_order_acquire);
  }
  bool done() const {
    return state_.load(std::memory_order_acquire) == State::kDone;
  }

  // Counts one more caller that will wait. The owner calls this and
  // `joined()` under the lock that guards where the flight can be found, so
  // that once the flight is no longer findable `joined()` is final.
  void Join() { joined_.fetch_add(1, std::memory_order_relaxed); }
  // 64 bits: a load hung for hours can be joined more than 2^31 times.
  int64_t joined() const { return joined_.load(std::memory_order_relaxed); }

  // Uncoalesced loads of one key share a flight only to learn whether a
  // write superseded them; these count them, under the same lock.
  void AddRunner() { runners_.fetch_add(1, std::memory_order_relaxed); }
  // Returns how many runners remain.
  int RemoveRunner() {
    return runners_.fetch_sub(1, std::memory_order_relaxed) - 1;
  }

  // Adds a waiter without a thread (joined like any waiter). Returns false if
  // the outcome is already published: the caller completes it itself from
  // `published()`. Amortised O(1); a waiter claimed meanwhile (timed out) is
  // forgotten when the list would grow, so that a load that hangs for good
  // holds only the waiters still waiting, not every caller since it began.
  // Thread-safe.
  bool AddAsyncWaiter(std::shared_ptr<AsyncWaiterBase> waiter) {
    std::vector<std::shared_ptr<AsyncWaiterBase>> answered;  // Freed unlocked.
    std::lock_guard<std::mutex> lock(mu_);
    if (outcome_.has_value()) return false;
    if (async_waiters_.size() == async_waiters_.capacity()) {
      // Claimed is final here: whoever claimed it completes it (or, if the
      // cache is closing, its destructor cancels it from its own list).
      size_t claimed = 0;
      for (const auto& w : async_waiters_)
        claimed += w->claimed() ? size_t{1} : size_t{0};
      answered.reserve(claimed);  // Throws before anything moved.
      // In order, so that the load answers its waiters first come first.
      size_t kept = 0;
      for (size_t i = 0; i < async_waiters_.size(); ++i) {
        if (answered.size() < claimed && async_waiters_[i]->claimed()) {
          answered.push_back(std::move(async_waiters_[i]));
        } else if (kept != i) {
          async_waiters_[kept++] = std::move(async_waiters_[i]);
        } else {
          ++kept;
        }
      }
      async_waiters_.resize(kept);
      // At least half free again, so that pruning stays amortised O(1).
      if (2 * kept > async_waiters_.capacity()) {
        async_waiters_.reserve(2 * async_waiters_.capacity());
      }
    }
    async_waiters_.push_back(std::move(waiter));
    return true;
  }
  // How many asynchronous waiters the flight holds (some perhaps answered
  // already); for tests. Thread-safe.
  size_t async_waiters_held() {
    std::lock_guard<std::mutex> lock(mu_);
    return async_waiters_.size();
  }

  // Stores the outcome, marks the flight done and wakes every blocked
  // waiter; returns the asynchronous waiters, for the caller to complete
  // (outside its locks). Call at most once. Never blocks beyond a short
  // internal lock. Thread-safe.
  std::vector<std::shared_ptr<AsyncWaiterBase>> Publish(T outcome) {
    std::vector<std::shared_ptr<AsyncWaiterBase>> waiters;
    {
      std::lock_guard<std::mutex> lock(mu_);
      outcome_.emplace(std::move(outcome));
      state_.store(State::kDone, std::memory_order_release);
      waiters.swap(async_waiters_);
    }
    cv_.notify_all();
    return waiters;
  }

  // The published outcome, or nullptr. Thread-safe; valid as long as the
  // flight.
  const T* published() {
    std::lock_guard<std::mutex> lock(mu_);
    return outcome_.has_value() ? &*outcome_ : nullptr;
  }

  // Marks the flight done without an outcome: for a load nobody joined.
  void Abandon() { state_.store(State::kDone, std::memory_order_release); }

  // Blocks until the outcome is published or `timeout` (real time) passes;
  // a timeout of a century or more waits without limit. Returns the
  // outcome, valid as long as the flight, or nullptr on timeout.
  // Thread-safe.
  const T* WaitFor(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    auto published = [this] { return outcome_.has_value(); };
    if (IsForever(timeout)) {
      cv_.wait(lock, published);
    } else if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                             published)) {
      return nullptr;
    }
    // Never written again once published: readable without the lock.
    return &*outcome_;
  }

 private:
  const LoadSlots::Ticket slot_;
  std::atomic<int64_t> started_at_;
  std::atomic<State> state_;
  std::atomic<bool> on_executor_{false};
  std::atomic<int64_t> joined_{0};
  std::atomic<int> runners_{1};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> outcome_;  // Guarded by mu_ until published.
  std::vector<std::shared_ptr<AsyncWaiterBase>> async_waiters_;  // By mu_.
};

// A flight that carries its key and the key's hash, so that the shard can
// find it by key without keeping a copy of the key of its own.
template <typename T, typename K>
class KeyedFlight : public Flight<T> {
 public:
  using State = typename Flight<T>::State;

  KeyedFlight(const K& key, size_t hash, int64_t started_at,
              State state = State::kRunning, LoadSlots::Ticket slot = 0)
      : Flight<T>(started_at, state, slot), key_(key), hash_(hash) {}

  const K& key() const { return key_; }
  size_t hash() const { return hash_; }

 private:
  const K key_;
  const size_t hash_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FLIGHT_H_
