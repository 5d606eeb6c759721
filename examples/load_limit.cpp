// Bounding backend load on a cold start: after a deploy every key is missing
// at once, and without a limit the cache would run as many loader calls as
// there are request threads. `Options::max_concurrent_loads = N` makes the
// cache run at most N at a time; the other callers wait for a slot.
//
// 16 request threads each ask for the same 200 keys (in different orders)
// from an empty cache; each load takes 10 ms. Prints the peak number of
// loader calls in flight with a limit of 4 and without one. Exits 1 if the
// limit was ever exceeded or a request failed.

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace {

constexpr int kThreads = 16;
constexpr int kKeys = 200;
constexpr int kLimit = 4;
constexpr absl::Duration kLoad = absl::Milliseconds(10);

struct RunResult {
  int peak_in_flight = 0;
  int failures = 0;
  absl::Duration elapsed;
  paddock::Stats stats;
};

RunResult ColdStart(int max_concurrent_loads) {
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};
  paddock::Cache<int, std::string, paddock::SingleFlight> cache(
      [&](const int& key) -> absl::StatusOr<std::string> {
        const int now = in_flight.fetch_add(1) + 1;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        absl::SleepFor(kLoad);
        in_flight.fetch_sub(1);
        return fmt::format("exhibition {}", key);
      },
      paddock::Options{.ttl = absl::Minutes(5),
                       .wait_timeout = absl::Seconds(60),
                       .max_concurrent_loads = max_concurrent_loads});

  std::atomic<int> failures{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int> keys(kKeys);
      for (int k = 0; k < kKeys; ++k) keys[k] = k;
      std::shuffle(keys.begin(), keys.end(), std::mt19937(t));
      for (const int key : keys) {
        absl::StatusOr<std::string> v = cache.Get(key);
        if (!v.ok() || *v != fmt::format("exhibition {}", key)) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return {peak.load(), failures.load(), absl::Now() - start, cache.stats()};
}

}  // namespace

int main() {
  const RunResult limited = ColdStart(kLimit);
  const RunResult unlimited = ColdStart(0);
  fmt::print("cold start: {} threads x {} keys, each load {}\n", kThreads,
             kKeys, absl::FormatDuration(kLoad));
  fmt::print(
      "  max_concurrent_loads = {}: peak {} loads in flight, {} loads, "
      "took {}\n",
      kLimit, limited.peak_in_flight, limited.stats.loads,
      absl::FormatDuration(
          absl::Trunc(limited.elapsed, absl::Milliseconds(1))));
  fmt::print(
      "  no limit:                 peak {} loads in flight, {} loads, "
      "took {}\n",
      unlimited.peak_in_flight, unlimited.stats.loads,
      absl::FormatDuration(
          absl::Trunc(unlimited.elapsed, absl::Milliseconds(1))));
  fmt::print("stats with the limit: {}\n", limited.stats);

  bool ok = true;
  if (limited.peak_in_flight > kLimit) {
    fmt::print("FAIL: {} loads ran at once, limit {}\n", limited.peak_in_flight,
               kLimit);
    ok = false;
  }
  if (limited.failures != 0 || unlimited.failures != 0) {
    fmt::print("FAIL: {} requests failed\n",
               limited.failures + unlimited.failures);
    ok = false;
  }
  if (limited.stats.loads != kKeys) {
    fmt::print("FAIL: {} loads for {} keys\n", limited.stats.loads, kKeys);
    ok = false;
  }
  if (ok) {
    fmt::print("OK: never more than {} loads at once (peak {})\n", kLimit,
               limited.peak_in_flight);
  }
  return ok ? 0 : 1;
}
