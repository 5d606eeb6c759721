// The Prometheus text exposition of paddock::Stats.

#include "paddock/prometheus.h"

#include <cmath>
#include <cstdint>
#include <iterator>

#include "absl/time/time.h"
#include "fmt/format.h"

namespace paddock {
namespace {

// One counter of `Stats`. HELP texts contain no `\` and no newline, so they
// need no escaping.
struct Counter {
  const char* name;
  const char* help;
  uint64_t Stats::*field;
};

constexpr Counter kCounters[] = {
    {"paddock_hits_total",
     "Get calls answered from a fresh value (or a cached error) without "
     "waiting.",
     &Stats::hits},
    {"paddock_stale_hits_total",
     "Get calls answered at once with a stale value while a refresh runs.",
     &Stats::stale_hits},
    {"paddock_misses_total",
     "Get calls that found nothing servable and ran or waited for a load.",
     &Stats::misses},
    {"paddock_loads_total", "Loader calls started, foreground and background.",
     &Stats::loads},
    {"paddock_load_failures_total",
     "Loader calls that returned an error or threw.", &Stats::load_failures},
    {"paddock_coalesced_waits_total",
     "Get calls that waited on a load another caller started.",
     &Stats::coalesced_waits},
    {"paddock_refreshes_total", "Background refreshes started.",
     &Stats::refreshes},
    {"paddock_wait_timeouts_total", "Waits that reached wait_timeout.",
     &Stats::wait_timeouts},
    {"paddock_evictions_total", "Entries removed to stay within max_entries.",
     &Stats::evictions},
    {"paddock_negative_hits_total",
     "Get calls answered with a negatively cached error.",
     &Stats::negative_hits},
    {"paddock_stale_fallbacks_total",
     "Get calls that received a stale value instead of an error or a "
     "timeout.",
     &Stats::stale_fallbacks},
    {"paddock_refreshes_skipped_total",
     "Background refreshes not started for lack of a load slot.",
     &Stats::refreshes_skipped},
};

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

void AppendHeader(const char* name, const char* help, std::string* out) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} counter\n",
                 name, help, name);
}

void AppendSampleStart(const char* name, std::string_view cache_name,
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
  for (const Counter& counter : kCounters) {
    AppendHeader(counter.name, counter.help, out);
    for (const NamedStats& cache : caches) {
      AppendSampleStart(counter.name, cache.cache_name, out);
      fmt::format_to(std::back_inserter(*out), "{}\n",
                     cache.stats.*counter.field);
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
