// The Prometheus text exposition of paddock::Stats.

#include "paddock/prometheus.h"

#include <cmath>
#include <cstdint>
#include <iterator>

#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/internal/stats_fields.h"

namespace paddock {
namespace {

constexpr const char* kLoadSecondsName = "paddock_load_seconds_total";
constexpr const char* kLoadSecondsHelp =
    "Time spent in the loader, summed over all loads, in seconds.";

// Escapes a label value: backslash, double quote and newline.
void AppendLabelValue(std::string_view value, std::string* out) {
  for (const char c : value) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void AppendHeader(std::string_view name, std::string_view help,
                  std::string* out) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} counter\n",
                 name, help, name);
}

void AppendSampleStart(std::string_view name, std::string_view cache_name,
                       std::string* out) {
  out->append(name);
  out->append("{cache=\"");
  AppendLabelValue(cache_name, out);
  out->append("\"} ");
}

// Seconds as a Prometheus float: shortest round-trip decimal, `+Inf` for an
// infinite duration.
void AppendSeconds(absl::Duration d, std::string* out) {
  const double seconds = absl::ToDoubleSeconds(d);
  if (std::isinf(seconds)) {
    out->append(seconds > 0 ? "+Inf" : "-Inf");
  } else {
    fmt::format_to(std::back_inserter(*out), "{}", seconds);
  }
}

}  // namespace

std::string ToPrometheus(const Stats& stats, std::string_view cache_name) {
  std::string out;
  const NamedStats one[] = {{cache_name, stats}};
  AppendPrometheus(one, &out);
  return out;
}

void AppendPrometheus(std::span<const NamedStats> caches, std::string* out) {
  if (caches.empty()) return;
  std::string name;
  for (const internal::StatsField& field : internal::kStatsFields) {
    name.assign("paddock_").append(field.name).append("_total");
    AppendHeader(name, field.help, out);
    for (const NamedStats& cache : caches) {
      AppendSampleStart(name, cache.cache_name, out);
      fmt::format_to(std::back_inserter(*out), "{}\n",
                     cache.stats.*field.field);
    }
  }
  AppendHeader(kLoadSecondsName, kLoadSecondsHelp, out);
  for (const NamedStats& cache : caches) {
    AppendSampleStart(kLoadSecondsName, cache.cache_name, out);
    AppendSeconds(cache.stats.total_load_time, out);
    out->push_back('\n');
  }
}

}  // namespace paddock
