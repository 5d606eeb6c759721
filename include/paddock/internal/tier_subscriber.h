// File: paddock/internal/tier_subscriber.h
// -----------------------------------------------------------------------------
// A cache's subscription to the shared tier's change feed: other caches'
// writes become local invalidations, and every change wakes the loads of this
// process parked for that key (internal/fleet_waits.h). Runs on the tier's
// thread and never lets an exception into it.

#ifndef PADDOCK_INTERNAL_TIER_SUBSCRIBER_H_
#define PADDOCK_INTERNAL_TIER_SUBSCRIBER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "paddock/codec.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/internal/writes.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// Made by the cache's constructor over its internal::CacheCore, which
// destroys the subscription before anything else (so no callback runs on a
// cache being destroyed).
template <typename Core>
class TierSubscriber final : public SharedTier::Subscriber {
 public:
  using K = typename Core::Key;
  using Writes = typename Engine<Core>::Writes;

  explicit TierSubscriber(Core* core) : core_(core) {}

  void OnInvalidate(std::string_view key_bytes) override {
    try {
      if constexpr (Decodable<K>) {
        if (absl::StatusOr<K> key = Codec<K>::Decode(key_bytes); key.ok()) {
          Writes(*core_).InvalidateLocally(*key, core_->HashOf(*key));
          return;
        }
      }
      // A key this cache cannot read back: drop every copy, to be safe.
      Writes(*core_).InvalidateAllLocally();
    } catch (...) {
      // Out of memory, or the key's codec threw: drop every copy, to be
      // safe.
      OnMissedInvalidations();
    }
  }

  void OnMissedInvalidations() override {
    // Fills may have been missed too: every parked load asks again.
    FleetWaits::Process().NotifyAll(core_->tier);
    try {
      Writes(*core_).InvalidateAllLocally();
    } catch (...) {
      // Out of memory listing the entries: they expire on their own.
    }
  }

  void OnChange(std::string_view key_bytes) override {
    FleetWaits::Process().Notify(core_->tier, key_bytes);
  }

 private:
  Core* const core_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_TIER_SUBSCRIBER_H_
