// A launch-day hot key: 200 request threads hammer one exhibition page whose
// rebuild takes ~80 ms. With plain cache-aside (NaiveJitter) every request
// that finds the page expired rebuilds it; with SingleFlight one request per
// expiry rebuilds it while the others wait for that one result.
//
// Prints each SingleFlight load (when, how many requests that value served)
// and both caches' stats. Exits 1 if SingleFlight ever ran two loads at once
// or more than one load per ttl.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
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

constexpr int kThreads = 200;
constexpr absl::Duration kTtl = absl::Milliseconds(200);
constexpr absl::Duration kRebuild = absl::Milliseconds(80);
constexpr absl::Duration kRun = absl::Seconds(1);
// Each request thread pauses this long between requests.
constexpr auto kThink = std::chrono::milliseconds(5);

// The page's backend: slow, and counts how many rebuilds overlap.
class ExhibitionBackend {
 public:
  struct Page {
    int version;
  };

  absl::StatusOr<Page> Rebuild(const std::string& key) {
    (void)key;
    const int running = running_.fetch_add(1) + 1;
    int peak = peak_.load();
    while (running > peak && !peak_.compare_exchange_weak(peak, running)) {
    }
    const absl::Time started = absl::Now();
    absl::SleepFor(kRebuild);  // The expensive aggregation.
    running_.fetch_sub(1);
    std::lock_guard<std::mutex> lock(mu_);
    starts_.push_back(started);
    return Page{static_cast<int>(starts_.size())};
  }

  int peak_concurrent() const { return peak_.load(); }
  std::vector<absl::Time> starts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return starts_;
  }

 private:
  std::atomic<int> running_{0};
  std::atomic<int> peak_{0};
  mutable std::mutex mu_;
  std::vector<absl::Time> starts_;  // Guarded by mu_.
};

struct RunResult {
  paddock::Stats stats;
  std::vector<absl::Time> load_starts;
  std::vector<int> served_per_version;  // Index: page version - 1.
  int peak_concurrent = 0;
  int errors = 0;
  absl::Time began;
  absl::Duration elapsed;
};

template <typename Policy>
RunResult Run() {
  ExhibitionBackend backend;
  paddock::Cache<std::string, ExhibitionBackend::Page, Policy> cache(
      [&](const std::string& key) { return backend.Rebuild(key); },
      paddock::Options{.ttl = kTtl, .wait_timeout = absl::Seconds(10)});

  RunResult result;
  std::mutex mu;
  std::vector<std::thread> threads;
  result.began = absl::Now();
  const absl::Time deadline = result.began + kRun;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<int> served;
      int errors = 0;
      while (absl::Now() < deadline) {
        absl::StatusOr<ExhibitionBackend::Page> page =
            cache.Get("exhibition:launch-day");
        if (page.ok()) {
          if (static_cast<size_t>(page->version) > served.size()) {
            served.resize(page->version);
          }
          ++served[page->version - 1];
        } else {
          ++errors;
        }
        std::this_thread::sleep_for(kThink);
      }
      std::lock_guard<std::mutex> lock(mu);
      result.errors += errors;
      if (served.size() > result.served_per_version.size()) {
        result.served_per_version.resize(served.size());
      }
      for (size_t v = 0; v < served.size(); ++v) {
        result.served_per_version[v] += served[v];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  result.elapsed = absl::Now() - result.began;
  result.stats = cache.stats();
  result.load_starts = backend.starts();
  result.peak_concurrent = backend.peak_concurrent();
  return result;
}

}  // namespace

int main() {
  fmt::print(
      "{} threads, one hot key, rebuild {}, ttl {}, {} of traffic each\n\n",
      kThreads, absl::FormatDuration(kRebuild), absl::FormatDuration(kTtl),
      absl::FormatDuration(kRun));

  const RunResult naive = Run<paddock::NaiveJitter>();
  fmt::print("NaiveJitter (cache-aside): {} rebuilds, up to {} at once\n",
             naive.stats.loads, naive.peak_concurrent);
  fmt::print("  stats: {}\n\n", naive.stats);

  const RunResult single = Run<paddock::SingleFlight>();
  fmt::print("SingleFlight: {} rebuilds, up to {} at once\n",
             single.stats.loads, single.peak_concurrent);
  for (size_t i = 0; i < single.load_starts.size(); ++i) {
    const int served =
        i < single.served_per_version.size() ? single.served_per_version[i] : 0;
    const std::string gap =
        i == 0
            ? std::string()
            : fmt::format(" ({} ms after the previous one)",
                          absl::ToInt64Milliseconds(single.load_starts[i] -
                                                    single.load_starts[i - 1]));
    fmt::print("  load {} at {:>4} ms{}, served {} requests\n", i + 1,
               absl::ToInt64Milliseconds(single.load_starts[i] - single.began),
               gap, served);
  }
  fmt::print("  stats: {}\n", single.stats);

  // A value is fresh for ttl after its load ends, so loads start at least
  // ttl + rebuild apart: never more than one per ttl period.
  const int64_t max_loads = single.elapsed / kTtl;
  bool ok = true;
  if (single.peak_concurrent != 1) {
    fmt::print("FAIL: SingleFlight ran {} rebuilds at once\n",
               single.peak_concurrent);
    ok = false;
  }
  if (static_cast<int64_t>(single.stats.loads) > max_loads) {
    fmt::print("FAIL: SingleFlight ran {} rebuilds in {} (at most {})\n",
               single.stats.loads, absl::FormatDuration(single.elapsed),
               max_loads);
    ok = false;
  }
  if (single.errors != 0) {
    fmt::print("FAIL: {} requests failed\n", single.errors);
    ok = false;
  }
  if (ok) {
    fmt::print(
        "\nOK: SingleFlight made {} rebuilds, one at a time, at most one per "
        "ttl; NaiveJitter made {}\n",
        single.stats.loads, naive.stats.loads);
  }
  return ok ? 0 : 1;
}
