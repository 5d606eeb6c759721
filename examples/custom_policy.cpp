// A refresh policy written outside the library: `RefreshAhead`
// (refresh_ahead_policy.h) refreshes a value in the background once it has
// lived 75% of its ttl. It satisfies `paddock::RefreshPolicy`, so it plugs
// into `paddock::Cache` like the built-in policies.
//
// A simulation on a ManualClock: one request every 50 ms for 5 s, ttl 1 s, a
// load takes 40 ms; refreshes run on a ManualExecutor between requests. The
// same traffic against SingleFlight, which reloads only on expiry, shows the
// difference. Exits 1 unless RefreshAhead refreshed at 75% of the ttl every
// time and no caller waited for a load after the first.

#include <string>
#include <vector>

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
#include "refresh_ahead_policy.h"

namespace {

using paddock_examples::RefreshAhead;

static_assert(paddock::RefreshPolicy<RefreshAhead>,
              "RefreshAhead must satisfy the RefreshPolicy concept");

constexpr absl::Duration kTtl = absl::Seconds(1);
constexpr double kRefreshAt = 0.75;
constexpr absl::Duration kLoad = absl::Milliseconds(40);
constexpr absl::Duration kRequestEvery = absl::Milliseconds(50);
constexpr absl::Duration kRun = absl::Seconds(5);

// Counts foreground loads: a caller waited for each of them.
class ForegroundLoads : public paddock::Listener {
 public:
  void OnLoadStart(paddock::LoadKind kind) override {
    if (kind == paddock::LoadKind::kForeground) ++count;
  }
  int count = 0;  // Single-threaded simulation: no synchronisation needed.
};

struct RunResult {
  std::vector<absl::Duration> reload_ages;  // Age of the value replaced.
  int foreground_loads = 0;
  paddock::Stats stats;
};

template <typename Policy>
RunResult Simulate(Policy policy) {
  paddock::ManualClock clock;
  paddock::ManualExecutor executor;
  ForegroundLoads foreground;
  RunResult result;
  int loads = 0;
  absl::Time loaded_at;
  paddock::Cache<std::string, int, Policy> cache(
      [&](const std::string&) -> absl::StatusOr<int> {
        if (loads++ > 0) result.reload_ages.push_back(clock.Now() - loaded_at);
        clock.Advance(kLoad);
        loaded_at = clock.Now();
        return loads;
      },
      paddock::Options{.ttl = kTtl,
                       .clock = &clock,
                       .executor = &executor,
                       .listener = &foreground},
      policy);
  while (clock.Now() - absl::UnixEpoch() < kRun) {
    if (!cache.Get("exhibition").ok()) break;
    executor.RunAll();
    clock.Advance(kRequestEvery);
  }
  result.foreground_loads = foreground.count;
  result.stats = cache.stats();
  return result;
}

void Print(const char* name, const RunResult& r) {
  fmt::print("{}: {} loads, {} in the foreground (a caller waited)\n", name,
             r.stats.loads, r.foreground_loads);
  std::string ages;
  for (const absl::Duration age : r.reload_ages) {
    ages += fmt::format(" {}", absl::FormatDuration(age));
  }
  fmt::print("  reloaded at value ages:{}\n", ages);
  fmt::print("  stats: {}\n", r.stats);
}

}  // namespace

int main() {
  fmt::print("one request every {} for {}, ttl {}, each load {}\n",
             absl::FormatDuration(kRequestEvery), absl::FormatDuration(kRun),
             absl::FormatDuration(kTtl), absl::FormatDuration(kLoad));
  const RunResult ahead = Simulate(RefreshAhead{.refresh_at = kRefreshAt});
  const RunResult single = Simulate(paddock::SingleFlight{});
  Print("RefreshAhead{.refresh_at = 0.75}", ahead);
  Print("SingleFlight", single);

  bool ok = true;
  if (ahead.stats.refreshes == 0 || ahead.foreground_loads != 1) {
    fmt::print("FAIL: RefreshAhead made {} refreshes and {} foreground loads\n",
               ahead.stats.refreshes, ahead.foreground_loads);
    ok = false;
  }
  for (const absl::Duration age : ahead.reload_ages) {
    // The first request at or after 75% of the ttl refreshes.
    if (age < kTtl * kRefreshAt || age >= kTtl * kRefreshAt + kRequestEvery) {
      fmt::print("FAIL: a refresh at value age {}\n",
                 absl::FormatDuration(age));
      ok = false;
    }
  }
  if (ok) {
    fmt::print(
        "OK: RefreshAhead refreshed every {} of value age in the "
        "background; no caller waited after the first load\n",
        absl::FormatDuration(kTtl * kRefreshAt));
  }
  return ok ? 0 : 1;
}
