// File: bench/replay/report.h
// -----------------------------------------------------------------------------
// The replay's outputs: the table (one row per policy, like seed 000's
// snapshot 15), the JSON summary and the per-second CSV series.

#ifndef PADDOCK_BENCH_REPLAY_REPORT_H_
#define PADDOCK_BENCH_REPLAY_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "metrics.h"
#include "replay.h"

namespace paddock::replay {

// Returns the table of `results`, with a header line naming the scenario,
// the scale, the pods, the CPUs and the backend; with the postgres backend
// or several pods, a second table of the fleet's loads and the database.
std::string FormatTable(const RunConfig& config,
                        const std::vector<PolicyResult>& results);

// Writes the JSON summary (docs/replay.md shows its shape) to `path`.
absl::Status WriteJson(const std::string& path, const RunConfig& config,
                       const std::vector<PolicyResult>& results);

// Writes one CSV row per policy and second: policy, time_s, arrivals,
// completed, failed, p95_ms, loads_in_flight_max, busy_workers_max (in the
// busiest pod), stale_served, server_cpu_replay, server_cpu_other (shares of
// the server CPU used by the replay and by other processes), db_busy_max
// (most database connections in use at once over the fleet).
absl::Status WriteCsv(const std::string& path,
                      const std::vector<PolicyResult>& results);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_REPORT_H_
