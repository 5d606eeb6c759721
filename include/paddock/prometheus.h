// File: paddock/prometheus.h
// -----------------------------------------------------------------------------
// Renders `paddock::Stats` in the Prometheus text exposition format (version
// 0.0.4), for a service's `/metrics` handler:
//
//   # HELP paddock_loads_total Loader calls started, foreground and background.
//   # TYPE paddock_loads_total counter
//   paddock_loads_total{cache="exhibition"} 22
//
// Every `Stats` field becomes one counter: `paddock_<field>_total`, and
// `total_load_time` becomes `paddock_load_seconds_total` in seconds. Each
// sample carries the label `cache="<name>"`.

#ifndef PADDOCK_PROMETHEUS_H_
#define PADDOCK_PROMETHEUS_H_

#include <span>
#include <string>
#include <string_view>

#include "paddock/stats.h"

namespace paddock {

// One cache's counters and the value of its `cache` label.
struct NamedStats {
  std::string_view cache_name;
  Stats stats;
};

// ToPrometheus()
//
// Returns the metrics of one cache: for each metric a `# HELP` line, a
// `# TYPE ... counter` line and one sample labelled `cache="<cache_name>"`.
// `cache_name` is escaped as the format requires (`\` as `\\`, `"` as `\"`,
// newline as `\n`); it should be valid UTF-8. Never blocks; no errors.
// Thread-safe (a pure function).
std::string ToPrometheus(const Stats& stats, std::string_view cache_name);

// AppendPrometheus()
//
// Appends the metrics of several caches to `*out`, grouped per metric: one
// `# HELP` and one `# TYPE` line, then one sample per cache, in the order
// given. The format allows each metric only once per scrape, so use this
// rather than concatenating `ToPrometheus` calls when a service exposes more
// than one cache. Cache names should be distinct (samples with equal labels
// are rejected by Prometheus). Appends nothing if `caches` is empty. Never
// blocks; no errors. Thread-safe as long as no other thread uses `*out`.
void AppendPrometheus(std::span<const NamedStats> caches, std::string* out);

}  // namespace paddock

#endif  // PADDOCK_PROMETHEUS_H_
