// File: paddock/internal/flight.h
// -----------------------------------------------------------------------------
// `Flight<T>`: the rendezvous of one coalesced load. The leader publishes its
// outcome once; callers that joined the load block until it does or their
// timeout passes.
//
// It replaces std::promise + std::shared_future, which cost two extra heap
// allocations, a std::call_once and a futex wake on every load. Here a flight
// is one allocation (with its std::shared_ptr control block), and the owner
// counts who joined: a load nobody joined, the common miss, need not publish
// at all.

#ifndef PADDOCK_INTERNAL_FLIGHT_H_
#define PADDOCK_INTERNAL_FLIGHT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/time/time.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

template <typename T>
class Flight {
 public:
  // `started_at`: when the load began, on the cache's clock.
  explicit Flight(int64_t started_at) : started_at_(started_at) {}
  Flight(const Flight&) = delete;
  Flight& operator=(const Flight&) = delete;

  int64_t started_at() const { return started_at_; }

  // Counts one more caller that will wait. The owner calls this and
  // `joined()` under the lock that guards where the flight can be found, so
  // that once the flight is no longer findable `joined()` is final.
  void Join() { joined_.fetch_add(1, std::memory_order_relaxed); }
  int joined() const { return joined_.load(std::memory_order_relaxed); }

  // Stores the outcome and wakes every waiter. Call at most once. Never
  // blocks beyond a short internal lock. Thread-safe.
  void Publish(T outcome) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      outcome_.emplace(std::move(outcome));
    }
    cv_.notify_all();
  }

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
  const int64_t started_at_;
  std::atomic<int> joined_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> outcome_;  // Guarded by mu_ until published.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FLIGHT_H_
