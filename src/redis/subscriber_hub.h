// File: src/redis/subscriber_hub.h
// -----------------------------------------------------------------------------
// `SubscriberHub`: the subscriptions of one tier and the delivery of their
// callbacks. Callbacks run on the delivering thread, one at a time per
// subscription; a subscription's destructor waits for its callback in
// progress (unless called from that callback). Shared with the
// subscriptions and the tier's feed thread, so that any may outlive the
// others.

#ifndef PADDOCK_SRC_REDIS_SUBSCRIBER_HUB_H_
#define PADDOCK_SRC_REDIS_SUBSCRIBER_HUB_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

class SubscriberHub : public std::enable_shared_from_this<SubscriberHub> {
 public:
  // SubscriberHub::Subscribe()
  //
  // Adds `subscriber` under a new id: random bits mixed with the process
  // id, never 0. Thread-safe.
  std::unique_ptr<SharedTier::Subscription> Subscribe(
      SharedTier::Subscriber* subscriber) ABSL_LOCKS_EXCLUDED(mu_);

  // SubscriberHub::DeliverInvalidate()
  //
  // Calls OnInvalidate(key) on every subscription but `origin`; one that
  // throws gets OnMissedInvalidations() instead (an exception out of that
  // is dropped). Call from one thread at a time.
  void DeliverInvalidate(std::string_view key, uint64_t origin)
      ABSL_LOCKS_EXCLUDED(mu_);

  // SubscriberHub::DeliverChange()
  //
  // Calls OnChange(key) on every subscription, dropping any exception (a
  // hint: nothing falls back). Call from one thread at a time.
  void DeliverChange(std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // SubscriberHub::DeliverMissed()
  //
  // Calls OnMissedInvalidations() on every subscription, dropping any
  // exception. Call from one thread at a time.
  void DeliverMissed() ABSL_LOCKS_EXCLUDED(mu_);

  // SubscriberHub::Close()
  //
  // Ends delivery, for the tier's destructor: Deliver* start no callback
  // once they see it, including one in progress (between two
  // subscriptions). Called from a callback, nothing more is delivered on
  // that thread once it returns. Thread-safe.
  void Close() { closed_.store(true, std::memory_order_release); }

  // The number of subscriptions. Thread-safe.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a subscription of this hub has the id `id`. Thread-safe.
  bool Has(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry;
  class SubscriptionImpl;
  using Entries = std::vector<std::shared_ptr<Entry>>;

  // Runs `callback(subscriber)` on each live entry but `skip`'s; if it
  // throws, and `fall_back` is set, OnMissedInvalidations(). Never throws:
  // it runs on the tier's thread, which an exception would end.
  template <typename Callback>
  void Deliver(uint64_t skip, bool fall_back, const Callback& callback)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const Entry* entry) ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<bool> closed_{false};
  mutable absl::Mutex mu_;
  // Copied on write: delivery takes a snapshot without blocking Subscribe.
  std::shared_ptr<const Entries> entries_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const Entries>();
};

// A subscription id: 64 random bits mixed with the process id, never 0.
uint64_t NewSubscriptionId();

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_SUBSCRIBER_HUB_H_
