// The {fmt} formatter of paddock::Stats.

#include "paddock/stats.h"

#include "absl/time/time.h"
#include "paddock/internal/stats_fields.h"

fmt::format_context::iterator fmt::formatter<paddock::Stats>::format(
    const paddock::Stats& s, fmt::format_context& ctx) const {
  auto out = ctx.out();
  for (const paddock::internal::StatsField& field :
       paddock::internal::kStatsFields) {
    out = fmt::format_to(out, "{}={} ", field.name, s.*field.field);
  }
  return fmt::format_to(out, "total_load_time={}",
                        absl::FormatDuration(s.total_load_time));
}
