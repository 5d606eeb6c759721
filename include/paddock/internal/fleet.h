// File: paddock/internal/fleet.h
// -----------------------------------------------------------------------------
// Small pieces of a cache's shared-tier path (`Options::shared`): whether a
// cache's types can cross the wire, the versions a cache gives what it
// writes, and how long it asks to hold a lease.

#ifndef PADDOCK_INTERNAL_FLEET_H_
#define PADDOCK_INTERNAL_FLEET_H_

#include <algorithm>
#include <string>

#include "absl/time/time.h"
#include "paddock/codec.h"

namespace paddock::internal {

// Whether a cache of K to V can use a shared tier: keys are written, values
// written and read back.
template <typename K, typename V>
inline constexpr bool kShareable = Encodable<K>&& Encodable<V>&& Decodable<V>;

// A new version for a record this process writes: the pid and 128 random
// bits in hex, so no other writer in the fleet picks the same (a forked
// child included). Thread-safe.
std::string NewSharedVersion();

// The lease time a loader asks for: as long as a local load may run before
// it stops blocking its key (`Options::max_load_age`), within an hour.
inline absl::Duration LeaseHoldFor(absl::Duration max_load_age) {
  return std::min(max_load_age, absl::Hours(1));
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FLEET_H_
