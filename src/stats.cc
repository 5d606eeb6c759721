// The {fmt} formatter of paddock::Stats.

#include "paddock/stats.h"

#include "absl/time/time.h"

fmt::format_context::iterator fmt::formatter<paddock::Stats>::format(
    const paddock::Stats& s, fmt::format_context& ctx) const {
  return fmt::format_to(
      ctx.out(),
      "hits={} stale_hits={} misses={} loads={} load_failures={} "
      "coalesced_waits={} refreshes={} wait_timeouts={} evictions={} "
      "negative_hits={} stale_fallbacks={} refreshes_skipped={} "
      "total_load_time={}",
      s.hits, s.stale_hits, s.misses, s.loads, s.load_failures,
      s.coalesced_waits, s.refreshes, s.wait_timeouts, s.evictions,
      s.negative_hits, s.stale_fallbacks, s.refreshes_skipped,
      absl::FormatDuration(s.total_load_time));
}
