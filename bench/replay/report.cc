// The table, JSON and CSV outputs.

#include "report.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backend.h"
#include "fmt/format.h"
#include "metrics.h"
#include "replay.h"

namespace paddock::replay {
namespace {

// A latency for the table: "850us", "12.3ms", "4.21s".
std::string Millis(double ms) {
  if (ms < 1) return fmt::format("{:.0f}us", ms * 1e3);
  if (ms < 100) return fmt::format("{:.1f}ms", ms);
  if (ms < 1000) return fmt::format("{:.0f}ms", ms);
  return fmt::format("{:.2f}s", ms / 1e3);
}

std::string Json(const Percentiles& p) {
  return fmt::format(
      R"({{"p50": {:.3f}, "p95": {:.3f}, "p99": {:.3f}, "max": {:.3f}}})",
      p.p50, p.p95, p.p99, p.max);
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("paddock_replay: cannot write ", path));
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("paddock_replay: cannot write ", path));
  }
  return absl::OkStatus();
}

// A share as JSON: null when unknown (negative).
std::string ShareOrNull(double share) {
  return share >= 0 ? fmt::format("{:.4f}", share) : "null";
}

// The fleet and the backend, one row per policy.
std::string FormatFleetTable(const RunConfig& config,
                             const std::vector<PolicyResult>& results) {
  const double seconds = absl::ToDoubleSeconds(config.scenario.Duration());
  std::string out =
      fmt::format("{:<13}{:>5}{:>14}{:>7}{:>7} | {:>9}{:>8}{:>8}{:>8}{:>7}\n",
                  "fleet", "pods", "shared", "loads", "/exp", "queries", "q/s",
                  "db max", "db cpu", "other");
  for (const PolicyResult& r : results) {
    out += fmt::format(
        "{:<13}{:>5}{:>14}{:>7}{:>7} | {:>9}{:>8.3g}{:>8}{:>8}{:>7}\n",
        r.policy, r.fleet.pods, r.fleet.shared, r.fleet.loads,
        r.expiries > 0
            ? fmt::format("{:.1f}", static_cast<double>(r.fleet.loads) /
                                        static_cast<double>(r.expiries))
            : "-",
        r.backend.queries, static_cast<double>(r.backend.queries) / seconds,
        r.backend.max_busy,
        r.backend.cpu_db >= 0 ? fmt::format("{:.0f}%", 100 * r.backend.cpu_db)
                              : "-",
        r.backend.cpu_db >= 0
            ? fmt::format("{:.0f}%", 100 * std::max(0.0, r.backend.cpu_busy -
                                                             r.backend.cpu_db))
            : "-");
  }
  out += fmt::format(
      "loads: the hot key's loader calls summed over the pods; /exp: per ttl "
      "period. queries: SQL statements run; q/s: per second of arrivals.\n"
      "db max: most pool connections in use at once over the fleet ({} per "
      "pod). db cpu: the database's processes' share of its CPU during the "
      "arrivals; other: the rest of that CPU's use (the load generator, "
      "other processes).\n",
      config.db_pool);
  return out;
}

}  // namespace

std::string FormatTable(const RunConfig& config,
                        const std::vector<PolicyResult>& results) {
  const Scenario& s = config.scenario;
  const bool postgres = config.backend == BackendKind::kPostgres;
  std::string out = fmt::format(
      "{} (time-scale {:g}: {:g} s of arrivals, ttl {}, {}{} workers on CPU "
      "{}, load generator on CPU {}; backend {}{})\n",
      s.name, config.time_scale, absl::ToDoubleSeconds(s.Duration()),
      absl::FormatDuration(s.ttl),
      config.pods > 1 ? fmt::format("{} pods x ", config.pods) : "", s.workers,
      config.cpus.server_cpu, config.cpus.client_cpu,
      BackendName(config.backend),
      !postgres ? ""
      : config.db_cpu >= 0
          ? fmt::format(" on CPU {}, {} connections per pod", config.db_cpu,
                        config.db_pool)
          : fmt::format(", {} connections per pod", config.db_pool));
  out += fmt::format(
      "{:<13}{:>8}{:>8}{:>8} {:>8}{:>8}{:>8} | {:>8}{:>8}{:>8}{:>7}{:>6}{:>8}"
      "{:>7}{:>10}{:>7} |{:>5}{:>6}\n",
      "policy", "requests", "req/s", "failed", "p50", "p95", "p99", "hot p50",
      "hot p95", "hot p99", "loads", "/exp", "max inf", "stale", "max stale",
      "sat.", "cpu", "other");
  for (const PolicyResult& r : results) {
    const double failed_pct = r.requests > 0
                                  ? 100.0 * static_cast<double>(r.failed) /
                                        static_cast<double>(r.requests)
                                  : 0;
    const std::string per_expiry =
        r.expiries > 0
            ? fmt::format("{:.1f}", static_cast<double>(r.hot_key.loads) /
                                        static_cast<double>(r.expiries))
            : "-";
    out += fmt::format(
        "{:<13}{:>8}{:>8.1f}{:>7.1f}% {:>8}{:>8}{:>8} | {:>8}{:>8}{:>8}{:>7}"
        "{:>6}{:>8}{:>7}{:>10}{:>6.1f}% |{:>4.0f}%{:>5.0f}%\n",
        r.policy, r.requests, r.throughput_rps, failed_pct,
        Millis(r.latency.p50), Millis(r.latency.p95), Millis(r.latency.p99),
        Millis(r.hot_key.latency.p50), Millis(r.hot_key.latency.p95),
        Millis(r.hot_key.latency.p99), r.hot_key.loads, per_expiry,
        r.hot_key.max_concurrent_loads, r.hot_key.stale_served,
        r.hot_key.max_stale_age_ms > 0 ? Millis(r.hot_key.max_stale_age_ms)
                                       : "-",
        100 * r.worker_saturation, 100 * r.server_cpu_replay,
        100 * std::max(0.0, r.server_cpu_busy - r.server_cpu_replay));
  }
  out += fmt::format(
      "latency: from each request's scheduled arrival; a request not answered "
      "within the client timeout ({}) counts as failed, at the timeout.\n"
      "hot: the requests of the hot key. loads: its rebuilds; /exp: per ttl "
      "period; max inf: most rebuilds in flight at once.\n"
      "stale: stale values served; max stale: the oldest one's age. sat.: "
      "share of time with >= {:g}% of the workers busy.\n"
      "cpu: the server CPU used by the replay; other: used by other processes "
      "(interference).\n",
      absl::FormatDuration(s.client_timeout), 100 * s.saturation_share);
  if (postgres || config.pods > 1) out += FormatFleetTable(config, results);
  for (const PolicyResult& r : results) {
    if (r.generator_lag.p99 > 10) {
      out += fmt::format(
          "warning: the load generator issued 1% of the requests of {} more "
          "than {} late (max {}): arrivals came in bunches.\n",
          r.policy, Millis(r.generator_lag.p99), Millis(r.generator_lag.max));
    }
    const double other = r.server_cpu_busy - r.server_cpu_replay;
    if (other > 0.10) {
      out += fmt::format(
          "warning: other processes used {:.0f}% of the server CPU during "
          "{}; its numbers are disturbed (the CSV's server_cpu_other shows "
          "when).\n",
          100 * other, r.policy);
    }
  }
  return out;
}

absl::Status WriteJson(const std::string& path, const RunConfig& config,
                       const std::vector<PolicyResult>& results) {
  std::string out = fmt::format(
      "{{\"scenario\": \"{}\", \"time_scale\": {:g}, \"results\": [",
      config.scenario.name, config.time_scale);
  for (size_t i = 0; i < results.size(); ++i) {
    const PolicyResult& r = results[i];
    const PolicyResult::CacheCounters& c = r.cache;
    out += fmt::format(
        "{}\n  {{\"policy\": \"{}\", \"requests\": {}, \"completed\": {}, "
        "\"failed\": {}, \"throughput_rps\": {:.3f}, \"latency_ms\": {},\n"
        "   \"hot_key\": {{\"requests\": {}, \"failed\": {}, \"loads\": {}, "
        "\"max_concurrent_loads\": {}, \"stale_served\": {}, "
        "\"max_stale_age_ms\": {:.3f}, \"latency_ms\": {}}},\n"
        "   \"generator_lag_ms\": {}, \"expiries\": {}, "
        "\"worker_saturation\": {:.4f}, "
        "\"max_busy_workers\": {}, \"server_cpu\": {{\"busy\": {:.4f}, "
        "\"replay\": {:.4f}}},\n"
        "   \"cache\": {{\"hits\": {}, \"stale_hits\": {}, \"misses\": {}, "
        "\"loads\": {}, \"coalesced_waits\": {}, \"refreshes\": {}, "
        "\"wait_timeouts\": {}, \"stale_fallbacks\": {}}},\n"
        "   \"backend\": {{\"kind\": \"{}\", \"queries\": {}, "
        "\"max_busy\": {}, \"pool\": {}, \"cpu\": {{\"busy\": {}, "
        "\"db\": {}}}}},\n"
        "   \"fleet\": {{\"pods\": {}, \"shared\": \"{}\", \"loads\": {}, "
        "\"loads_per_expiry\": {}}}}}",
        i == 0 ? "" : ",", r.policy, r.requests, r.completed, r.failed,
        r.throughput_rps, Json(r.latency), r.hot_key.requests, r.hot_key.failed,
        r.hot_key.loads, r.hot_key.max_concurrent_loads, r.hot_key.stale_served,
        r.hot_key.max_stale_age_ms, Json(r.hot_key.latency),
        Json(r.generator_lag), r.expiries, r.worker_saturation,
        r.max_busy_workers, r.server_cpu_busy, r.server_cpu_replay, c.hits,
        c.stale_hits, c.misses, c.loads, c.coalesced_waits, c.refreshes,
        c.wait_timeouts, c.stale_fallbacks, r.backend.kind, r.backend.queries,
        r.backend.max_busy, r.backend.pool, ShareOrNull(r.backend.cpu_busy),
        ShareOrNull(r.backend.cpu_db), r.fleet.pods, r.fleet.shared,
        r.fleet.loads,
        r.expiries > 0
            ? fmt::format("{:.3f}", static_cast<double>(r.fleet.loads) /
                                        static_cast<double>(r.expiries))
            : "null");
  }
  out += "]}\n";
  return WriteFile(path, out);
}

absl::Status WriteCsv(const std::string& path,
                      const std::vector<PolicyResult>& results) {
  std::string out =
      "policy,time_s,arrivals,completed,failed,p95_ms,loads_in_flight_max,"
      "busy_workers_max,stale_served,server_cpu_replay,server_cpu_other,"
      "db_busy_max\n";
  for (const PolicyResult& r : results) {
    for (const SecondSummary& s : r.series) {
      out += fmt::format("{},{:g},{},{},{},{:.3f},{},{},{},{:.3f},{:.3f},{}\n",
                         r.policy, s.time_s, s.arrivals, s.completed, s.failed,
                         s.p95_ms, s.loads_in_flight_max, s.busy_workers_max,
                         s.stale_served, s.server_cpu_replay,
                         s.server_cpu_other, s.db_busy_max);
    }
  }
  return WriteFile(path, out);
}

}  // namespace paddock::replay
