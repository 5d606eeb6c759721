// XFetch: probabilistic early refresh. As a value nears its expiry, each hit
// has a growing chance (faster for slow loads) to start one background
// refresh, so the value is normally replaced before it expires and no caller
// waits for a load.
//
// A simulation on a ManualClock, with a fixed seed so it repeats exactly: one
// request every 5 ms for 10 s, ttl 1 s, a load takes 80 ms. Refreshes run on
// a ManualExecutor between requests. Prints when each early refresh started.
// Exits 1 if there was no early refresh, or if any caller waited for a load
// after the first.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace {

constexpr absl::Duration kTtl = absl::Seconds(1);
constexpr absl::Duration kLoad = absl::Milliseconds(80);
constexpr absl::Duration kRequestEvery = absl::Milliseconds(5);
constexpr absl::Duration kRun = absl::Seconds(10);

// Counts foreground loads: a caller waited for each of them.
class ForegroundLoads : public paddock::Listener {
 public:
  void OnLoadStart(paddock::LoadKind kind) override {
    if (kind == paddock::LoadKind::kForeground) ++count;
  }
  int count = 0;  // Single-threaded simulation: no synchronisation needed.
};

}  // namespace

int main() {
  paddock::ManualClock clock;
  paddock::ManualExecutor executor;
  ForegroundLoads foreground;
  absl::Time loaded_at;  // When the value being served was loaded.
  int loads = 0;
  struct Refresh {
    absl::Duration age;  // Of the value it replaced, at the refresh's start.
  };
  std::vector<Refresh> refreshes;

  paddock::Cache<std::string, int, paddock::XFetch> cache(
      [&](const std::string&) -> absl::StatusOr<int> {
        if (loads++ > 0) refreshes.push_back({clock.Now() - loaded_at});
        clock.Advance(kLoad);  // The backend takes kLoad of simulated time.
        loaded_at = clock.Now();
        return loads;
      },
      paddock::Options{.ttl = kTtl,
                       .clock = &clock,
                       .executor = &executor,
                       .seed = 2015,
                       .listener = &foreground},
      paddock::XFetch{.beta = 1.0});

  int requests = 0;
  while (clock.Now() - absl::UnixEpoch() < kRun) {
    if (!cache.Get("exhibition").ok()) return 1;
    ++requests;
    executor.RunAll();  // A refresh a request started runs now.
    clock.Advance(kRequestEvery);
  }

  fmt::print("{} requests over {}, ttl {}, each load {}\n", requests,
             absl::FormatDuration(kRun), absl::FormatDuration(kTtl),
             absl::FormatDuration(kLoad));
  for (size_t i = 0; i < refreshes.size(); ++i) {
    fmt::print(
        "  early refresh {:>2} at value age {:>3} ms ({} ms before expiry)\n",
        i + 1, absl::ToInt64Milliseconds(refreshes[i].age),
        absl::ToInt64Milliseconds(kTtl - refreshes[i].age));
  }
  const paddock::Stats stats = cache.stats();
  fmt::print("stats: {}\n", stats);

  bool ok = true;
  if (stats.refreshes == 0) {
    fmt::print("FAIL: no early refresh\n");
    ok = false;
  }
  // The first Get loads in the foreground; none after it may.
  if (foreground.count != 1 || stats.misses != 1) {
    fmt::print("FAIL: {} foreground loads, {} misses: a caller waited\n",
               foreground.count, stats.misses);
    ok = false;
  }
  if (ok) {
    fmt::print(
        "OK: {} early refreshes, no caller waited after the first load\n",
        stats.refreshes);
  }
  return ok ? 0 : 1;
}
