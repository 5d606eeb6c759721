// Negative caching: when the backend fails, `Options::error_ttl` remembers the
// error for a while, so a failing backend is asked once per error_ttl instead
// of once per request (which would pile retries onto a service that is
// already down).
//
// A simulation on a ManualClock: one request every 10 ms for 5 s against a
// backend that always fails, first with error_ttl = 1 s, then without it.
// Exits 1 unless the backend was called exactly once per error_ttl and every
// request still received the backend's error.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace {

constexpr absl::Duration kRequestEvery = absl::Milliseconds(10);
constexpr absl::Duration kRun = absl::Seconds(5);
constexpr absl::Duration kErrorTtl = absl::Seconds(1);

struct RunResult {
  int backend_calls = 0;
  int requests = 0;
  int unavailable = 0;  // Requests answered with the backend's error.
  paddock::Stats stats;
};

RunResult Run(absl::Duration error_ttl) {
  paddock::ManualClock clock;
  RunResult result;
  paddock::Cache<std::string, std::string, paddock::SingleFlight> cache(
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        ++result.backend_calls;
        return absl::UnavailableError(
            fmt::format("exhibition service is down (loading {})", key));
      },
      paddock::Options{
          .ttl = absl::Seconds(10), .clock = &clock, .error_ttl = error_ttl});
  while (clock.Now() - absl::UnixEpoch() < kRun) {
    const absl::StatusOr<std::string> page = cache.Get("exhibition:42");
    ++result.requests;
    if (absl::IsUnavailable(page.status())) ++result.unavailable;
    clock.Advance(kRequestEvery);
  }
  result.stats = cache.stats();
  return result;
}

}  // namespace

int main() {
  const RunResult with = Run(kErrorTtl);
  const RunResult without = Run(absl::ZeroDuration());
  fmt::print("backend always fails; {} requests, one every {}, over {}\n",
             with.requests, absl::FormatDuration(kRequestEvery),
             absl::FormatDuration(kRun));
  fmt::print(
      "  error_ttl = {}: {} backend calls, {} requests answered from "
      "the cached error\n",
      absl::FormatDuration(kErrorTtl), with.backend_calls,
      with.stats.negative_hits);
  fmt::print("  error_ttl = 0:  {} backend calls\n", without.backend_calls);
  fmt::print("stats with error_ttl: {}\n", with.stats);

  const int64_t expected_calls = kRun / kErrorTtl;
  bool ok = true;
  if (with.backend_calls != expected_calls) {
    fmt::print("FAIL: {} backend calls, expected one per error_ttl: {}\n",
               with.backend_calls, expected_calls);
    ok = false;
  }
  if (with.unavailable != with.requests) {
    fmt::print("FAIL: only {} of {} requests received the backend's error\n",
               with.unavailable, with.requests);
    ok = false;
  }
  if (with.stats.negative_hits !=
      static_cast<uint64_t>(with.requests - with.backend_calls)) {
    fmt::print("FAIL: {} negative hits, expected {}\n",
               with.stats.negative_hits, with.requests - with.backend_calls);
    ok = false;
  }
  if (without.backend_calls != without.requests) {
    fmt::print("FAIL: without error_ttl, {} calls for {} requests\n",
               without.backend_calls, without.requests);
    ok = false;
  }
  if (ok) {
    fmt::print(
        "OK: the backend was called once per error_ttl ({} times), "
        "not once per request ({} times)\n",
        with.backend_calls, without.backend_calls);
  }
  return ok ? 0 : 1;
}
