// File: paddock/stats.h
// -----------------------------------------------------------------------------
// `paddock::Stats`, a snapshot of a cache's counters, and its {fmt} formatter.

#ifndef PADDOCK_STATS_H_
#define PADDOCK_STATS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "fmt/format.h"

namespace paddock {

// Stats
//
// Counters since the cache was constructed. A snapshot taken while other
// threads use the cache is not atomic across fields: each field is exact on
// its own, fields may disagree by the operations in progress.
struct Stats {
  // `Get` calls answered from a fresh stored value without waiting for a
  // load. A cached error is not one: it counts in `negative_hits`.
  uint64_t hits = 0;
  // `Get` calls answered at once with a stale value while a refresh runs.
  uint64_t stale_hits = 0;
  // `Get` calls that found nothing servable and ran or waited for a load.
  uint64_t misses = 0;
  // Loader calls started, in the foreground and in the background.
  uint64_t loads = 0;
  // Loader calls that returned an error or threw.
  uint64_t load_failures = 0;
  // `Get` calls that waited on a load another caller started.
  uint64_t coalesced_waits = 0;
  // Background refreshes started: handed to the executor. One that then
  // finds its reserved load slot taken ends without calling the loader and
  // counts in `refreshes_skipped` too; one the executor drops calls no
  // loader either. `loads` counts the loader calls.
  uint64_t refreshes = 0;
  // Waits that reached `Options::wait_timeout`: for a load another caller of
  // this cache runs or, with a shared tier, for another process's fill.
  uint64_t wait_timeouts = 0;
  // Entries removed to stay within `Options::max_entries`.
  uint64_t evictions = 0;
  // `Get` calls answered with a negatively cached error (`Options::error_ttl`).
  uint64_t negative_hits = 0;
  // `Get` calls that received a stale value instead of an error or a timeout.
  uint64_t stale_fallbacks = 0;
  // Background refreshes not run for lack of a load slot
  // (`Options::max_concurrent_loads`), when asked for or, their reserved slot
  // taken by a load, when about to start; a later hit tries again.
  uint64_t refreshes_skipped = 0;
  // Loads answered from the shared tier (`Options::shared`), fresh or stale,
  // without calling the loader.
  uint64_t shared_hits = 0;
  // Shared-tier leases this cache was granted: it loaded for the fleet.
  uint64_t leases_acquired = 0;
  // Times this cache found another process holding the lease and waited for
  // its fill (or served the tier's stale value).
  uint64_t lease_waits = 0;
  // Shared-tier calls that failed (unreachable, timed out, breaker open) and
  // records that could not be decoded; each was answered as if there were no
  // shared tier.
  uint64_t shared_errors = 0;
  // Time spent in the loader, summed over all loads (by `Options::clock`).
  absl::Duration total_load_time = absl::ZeroDuration();

  friend bool operator==(const Stats&, const Stats&) = default;
};

}  // namespace paddock

// Formats as `hits=… stale_hits=… … total_load_time=1.5s` on one line.
template <>
struct fmt::formatter<paddock::Stats> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  fmt::format_context::iterator format(const paddock::Stats& s,
                                       fmt::format_context& ctx) const;
};

#endif  // PADDOCK_STATS_H_
