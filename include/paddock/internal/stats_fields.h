// File: paddock/internal/stats_fields.h
// -----------------------------------------------------------------------------
// Every counter of `paddock::Stats` in one table: the recorder counts into an
// array indexed by `StatsCounter`, and the {fmt} formatter and the Prometheus
// exposition walk `kStatsFields`. Adding a counter means adding a `Stats`
// field, an enumerator and a row here, in the same order.

#ifndef PADDOCK_INTERNAL_STATS_FIELDS_H_
#define PADDOCK_INTERNAL_STATS_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "paddock/stats.h"

namespace paddock::internal {

enum StatsCounter : size_t {
  kHits,
  kStaleHits,
  kMisses,
  kLoads,
  kLoadFailures,
  kCoalescedWaits,
  kRefreshes,
  kWaitTimeouts,
  kEvictions,
  kNegativeHits,
  kStaleFallbacks,
  kRefreshesSkipped,
  kSharedHits,
  kLeasesAcquired,
  kLeaseWaits,
  kSharedErrors,
  kStatsCounters,
};

struct StatsField {
  std::string_view name;  // The `Stats` member's name.
  std::string_view help;  // One line, no `\` and no newline.
  uint64_t Stats::*field;
};

inline constexpr StatsField kStatsFields[kStatsCounters] = {
    {"hits",
     "Get calls answered from a fresh stored value without waiting (cached "
     "errors count in negative_hits).",
     &Stats::hits},
    {"stale_hits",
     "Get calls answered at once with a stale value while a refresh runs.",
     &Stats::stale_hits},
    {"misses",
     "Get calls that found nothing servable and ran or waited for a load.",
     &Stats::misses},
    {"loads", "Loader calls started, foreground and background.",
     &Stats::loads},
    {"load_failures", "Loader calls that returned an error or threw.",
     &Stats::load_failures},
    {"coalesced_waits",
     "Get calls that waited on a load another caller started.",
     &Stats::coalesced_waits},
    {"refreshes",
     "Background refreshes handed to the executor (one that then finds no "
     "load slot counts in refreshes_skipped too).",
     &Stats::refreshes},
    {"wait_timeouts", "Waits that reached wait_timeout.",
     &Stats::wait_timeouts},
    {"evictions", "Entries removed to stay within max_entries.",
     &Stats::evictions},
    {"negative_hits", "Get calls answered with a negatively cached error.",
     &Stats::negative_hits},
    {"stale_fallbacks",
     "Get calls that received a stale value instead of an error or a "
     "timeout.",
     &Stats::stale_fallbacks},
    {"refreshes_skipped",
     "Background refreshes not started for lack of a load slot.",
     &Stats::refreshes_skipped},
    {"shared_hits",
     "Loads answered from the shared tier without calling the loader.",
     &Stats::shared_hits},
    {"leases_acquired",
     "Shared-tier leases granted to this cache: loads made for the fleet.",
     &Stats::leases_acquired},
    {"lease_waits",
     "Times another process held the shared tier's lease for a key.",
     &Stats::lease_waits},
    {"shared_errors",
     "Shared-tier calls that failed and records that did not decode.",
     &Stats::shared_errors},
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_STATS_FIELDS_H_
