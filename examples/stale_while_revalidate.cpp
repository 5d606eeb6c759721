// Stale-while-revalidate (SoftTtl): once a value has been loaded, callers are
// never made to wait for the slow backend again. When the value's ttl passes,
// the next caller is served the stale value at once and one background
// refresh fetches a new one.
//
// Prints the first load's latency, then the worst latency any caller saw
// afterwards. Exits 1 if any caller waited for a load after the first.

#include <algorithm>
#include <atomic>
#include <chrono>
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

constexpr int kThreads = 8;
constexpr absl::Duration kBackend = absl::Milliseconds(150);
constexpr absl::Duration kTtl = absl::Milliseconds(100);
constexpr absl::Duration kRun = absl::Milliseconds(1200);

}  // namespace

int main() {
  std::atomic<int> version{0};
  paddock::Cache<std::string, int, paddock::SoftTtl> cache(
      [&](const std::string&) -> absl::StatusOr<int> {
        absl::SleepFor(kBackend);  // A slow backend.
        return version.fetch_add(1) + 1;
      },
      paddock::Options{.ttl = kTtl},
      paddock::SoftTtl{.stale_for = absl::Minutes(1)});

  const absl::Time first_start = absl::Now();
  if (!cache.Get("exhibition").ok()) return 1;
  const absl::Duration first_latency = absl::Now() - first_start;
  fmt::print("first load: {} (backend takes {}, ttl {})\n",
             absl::FormatDuration(first_latency),
             absl::FormatDuration(kBackend), absl::FormatDuration(kTtl));

  // Every Get after the first load, timed.
  std::vector<absl::Duration> worst(kThreads);
  std::vector<int> newest_seen(kThreads);
  std::atomic<int> failures{0};
  const absl::Time deadline = absl::Now() + kRun;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (absl::Now() < deadline) {
        const absl::Time start = absl::Now();
        absl::StatusOr<int> v = cache.Get("exhibition");
        worst[i] = std::max(worst[i], absl::Now() - start);
        if (!v.ok()) {
          failures.fetch_add(1);
        } else {
          newest_seen[i] = std::max(newest_seen[i], *v);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  for (std::thread& t : threads) t.join();

  const absl::Duration max_latency =
      *std::max_element(worst.begin(), worst.end());
  const paddock::Stats stats = cache.stats();
  fmt::print("after the first load: max latency {} over {} of traffic\n",
             absl::FormatDuration(max_latency), absl::FormatDuration(kRun));
  fmt::print("served values up to version {} ({} background refreshes)\n",
             *std::max_element(newest_seen.begin(), newest_seen.end()),
             stats.refreshes);
  fmt::print("stats: {}\n", stats);

  bool ok = true;
  // One miss: the first Get. Any other would have waited for the backend.
  if (stats.misses != 1 || stats.coalesced_waits != 0) {
    fmt::print("FAIL: {} misses and {} waits after the first load\n",
               stats.misses - 1, stats.coalesced_waits);
    ok = false;
  }
  if (max_latency >= kBackend) {
    fmt::print("FAIL: a caller took {}, as long as the backend\n",
               absl::FormatDuration(max_latency));
    ok = false;
  }
  if (stats.refreshes < 3 || stats.stale_hits == 0) {
    fmt::print("FAIL: expected stale serves and several refreshes\n");
    ok = false;
  }
  if (failures.load() != 0) {
    fmt::print("FAIL: {} Get calls failed\n", failures.load());
    ok = false;
  }
  if (ok) {
    fmt::print("OK: no caller waited for the backend after the first load\n");
  }
  return ok ? 0 : 1;
}
