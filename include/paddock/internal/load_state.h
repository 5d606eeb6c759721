// File: paddock/internal/load_state.h
// -----------------------------------------------------------------------------
// What a load carries between the stages of a cache's engine: `Outcome`, its
// result as its waiters get it; `Load`, one load of one key from its
// registration to its completion; `Lease`, the shared tier's permission to
// fill the key; `FleetProgress`, where a load that asks the tier stands
// between two lookups; and `TierFill`, what filling the tier left for storing
// the outcome locally.

#ifndef PADDOCK_INTERNAL_LOAD_STATE_H_
#define PADDOCK_INTERNAL_LOAD_STATE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/internal/in_flight_set.h"
#include "paddock/internal/load_slots.h"
#include "paddock/listener.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// One load's result, shared by its waiters.
template <typename V>
struct Outcome {
  absl::StatusOr<V> value;
  bool stale = false;           // A stale value standing in for a failure.
  int64_t stale_loaded_at = 0;  // When that stale value was loaded.
};

// Whether a load runs on its caller's thread (a blocking Get waits there for
// another process's fill) or in a task on the executor (which parks such a
// wait and gives the thread back, internal/fleet_waits.h).
enum class Where : uint8_t { kCallerThread, kExecutorTask };

// What filling the tier with a load's result leaves for storing it here.
struct TierFill {
  std::optional<Lifetime> lifetime;  // The schedule written, if a value.
  std::string version;               // The filled record's, if filled.
  bool lease_lost = false;           // Another writer won: store nothing.
};

// Who waits for a load's outcome. It decides how long a wait for another
// process's fill may last and what a failure falls back to.
enum class Awaited : uint8_t {
  kByNobody,  // A background refresh.
  // A caller: a failure falls back to a value the policy serves on errors.
  kByCaller,
  // A caller whose wait for another process's fill ran out: a failure falls
  // back to any value the policy still keeps, as for a timed-out wait on
  // this process's own load.
  kByCallerPastItsWait,
};

// One load of one key, from its registration to its completion: the key, its
// flight (registered in the key's shard), why it runs and the load slot it
// holds (0: none yet). `Core` is the cache's internal::CacheCore.
template <typename Core>
struct Load {
  using Flight = typename Core::Flight;

  const typename Core::Key& key;
  size_t hash;
  std::shared_ptr<Flight> flight;
  LoadKind kind;
  LoadSlots::Ticket slot = 0;
  Awaited awaited = Awaited::kByNobody;
  // What the shared-tier path learned, for storing the outcome: the record
  // the value came from, or what filling the tier with it left.
  const SharedRecord* from_tier = nullptr;
  TierFill filled = {};
  // An uncoalesced load's own rendezvous with its caller (its registered
  // flight is shared with the key's other loads).
  std::shared_ptr<Flight> delivery = nullptr;
  // When the load starts, if its caller read the clock just before with
  // nothing to wait for in between (saves a clock read per miss).
  std::optional<int64_t> starts_at = std::nullopt;
  // Instead of `flight`: a foreground load registered without one, which
  // the first caller to join makes (internal/shard.h).
  PendingLoad<Flight>* pending = nullptr;

  bool caller_waits() const { return awaited != Awaited::kByNobody; }

  // The flight this load publishes to: its own, or its pending load's if
  // anyone joined (else null).
  Flight* Rendezvous() const {
    return pending != nullptr ? pending->flight.get() : flight.get();
  }
};

// The shared tier's lease on a key, held by the load that fills it.
struct Lease {
  std::string key_bytes;
  std::string token;
  // Granted over a record whose value still stands in for errors: a failure
  // is not filled over it (FleetPath::Fill).
  bool record_stands_in = false;
};

// Where a load that asks the shared tier stands between two lookups, so
// that one parked for another process's fill resumes where it left off.
struct FleetProgress {
  std::string key_bytes;
  std::string have_version;  // The version this process holds, if any.
  absl::Duration budget;     // How long it waits for another's fill.
  std::chrono::steady_clock::time_point deadline;
  bool waited = false;  // Counted in lease_waits already.
  bool asked_past_bad_record = false;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_STATE_H_
