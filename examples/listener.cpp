// Observing a cache with a `paddock::Listener`: a subclass that keeps a
// histogram of load durations (foreground and background apart) and counts
// the other events, then the same counters as Prometheus would scrape them
// (`paddock::ToPrometheus`).
//
// 8 request threads read 50 exhibition pages (half the requests go to one hot
// page) for 1 s from a SoftTtl cache that holds at most 32 entries; loads take
// 5-54 ms and every 10th fails. Exits 1 if what the listener saw disagrees
// with `Cache::stats()`.

#include "paddock/listener.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/prometheus.h"
#include "paddock/stats.h"

namespace {

// Collects what a cache reports. Thread-safe: the cache calls it from request
// threads and from its refresh threads at once, so everything is atomic.
class LoadRecorder : public paddock::Listener {
 public:
  // Upper bounds of the histogram buckets; the last bucket has none.
  static constexpr std::array<absl::Duration, 5> kBounds = {
      absl::Milliseconds(10), absl::Milliseconds(20), absl::Milliseconds(40),
      absl::Milliseconds(80), absl::Milliseconds(160)};
  static constexpr size_t kBuckets = kBounds.size() + 1;

  void OnLoadStart(paddock::LoadKind kind) override { ++starts[Index(kind)]; }
  void OnLoadFinish(paddock::LoadKind kind, absl::Duration duration,
                    const absl::Status& status) override {
    size_t bucket = 0;
    while (bucket < kBounds.size() && duration > kBounds[bucket]) ++bucket;
    ++histogram[Index(kind)][bucket];
    ++finishes[Index(kind)];
    if (!status.ok()) ++failures;
  }
  void OnStaleServed(absl::Duration age) override {
    ++stale_served;
    int64_t ms = absl::ToInt64Milliseconds(age);
    int64_t seen = max_stale_age_ms.load();
    while (ms > seen && !max_stale_age_ms.compare_exchange_weak(seen, ms)) {
    }
  }
  void OnCoalescedWait() override { ++coalesced_waits; }
  void OnWaitTimeout() override { ++wait_timeouts; }
  void OnEviction() override { ++evictions; }

  static size_t Index(paddock::LoadKind kind) {
    return kind == paddock::LoadKind::kForeground ? 0 : 1;
  }

  std::atomic<uint64_t> starts[2] = {};
  std::atomic<uint64_t> finishes[2] = {};
  std::atomic<uint64_t> histogram[2][kBuckets] = {};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> stale_served{0};
  std::atomic<int64_t> max_stale_age_ms{0};
  std::atomic<uint64_t> coalesced_waits{0};
  std::atomic<uint64_t> wait_timeouts{0};
  std::atomic<uint64_t> evictions{0};
};

constexpr int kThreads = 8;
constexpr int kPages = 50;
constexpr absl::Duration kRun = absl::Seconds(1);

void PrintHistogram(const LoadRecorder& recorder) {
  uint64_t largest = 1;
  for (size_t b = 0; b < LoadRecorder::kBuckets; ++b) {
    largest = std::max(largest, recorder.histogram[0][b].load() +
                                    recorder.histogram[1][b].load());
  }
  fmt::print("load durations      foreground  refresh\n");
  for (size_t b = 0; b < LoadRecorder::kBuckets; ++b) {
    const std::string label =
        b < LoadRecorder::kBounds.size()
            ? fmt::format("<= {}",
                          absl::FormatDuration(LoadRecorder::kBounds[b]))
            : std::string("longer");
    const uint64_t fg = recorder.histogram[0][b].load();
    const uint64_t bg = recorder.histogram[1][b].load();
    fmt::print("  {:<10} {:>15} {:>8}  {}\n", label, fg, bg,
               std::string((fg + bg) * 40 / largest, '#'));
  }
}

}  // namespace

int main() {
  LoadRecorder recorder;
  std::atomic<uint64_t> calls{0};
  paddock::Cache<int, std::string, paddock::SoftTtl> cache(
      [&](const int& page) -> absl::StatusOr<std::string> {
        absl::SleepFor(absl::Milliseconds(5 + (page * 7) % 50));
        if (calls.fetch_add(1) % 10 == 9) {
          return absl::UnavailableError("exhibition backend timed out");
        }
        return fmt::format("exhibition page {}", page);
      },
      paddock::Options{.ttl = absl::Milliseconds(100),
                       .max_entries = 32,
                       .listener = &recorder},
      paddock::SoftTtl{.stale_for = absl::Milliseconds(400)});

  std::atomic<uint64_t> errors{0};
  const absl::Time deadline = absl::Now() + kRun;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::uniform_int_distribution<int> any_page(1, kPages - 1);
      while (absl::Now() < deadline) {
        const int page = rng() % 2 == 0 ? 0 : any_page(rng);
        if (!cache.Get(page).ok()) errors.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  // Refreshes started before the deadline may still run: wait for them, so
  // that the listener and the stats describe the same loads.
  paddock::Stats stats = cache.stats();
  for (int i = 0; i < 1000; ++i) {
    stats = cache.stats();
    if (recorder.finishes[0] + recorder.finishes[1] == stats.loads &&
        recorder.finishes[1] == stats.refreshes) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }

  PrintHistogram(recorder);
  fmt::print(
      "events: {} loads ({} foreground, {} refresh), {} failed; {} stale "
      "serves (oldest {} ms); {} coalesced waits; {} wait timeouts; {} "
      "evictions; {} Get errors\n\n",
      recorder.starts[0] + recorder.starts[1], recorder.starts[0].load(),
      recorder.starts[1].load(), recorder.failures.load(),
      recorder.stale_served.load(), recorder.max_stale_age_ms.load(),
      recorder.coalesced_waits.load(), recorder.wait_timeouts.load(),
      recorder.evictions.load(), errors.load());
  fmt::print("{}", paddock::ToPrometheus(stats, "exhibition"));

  struct Check {
    const char* what;
    uint64_t listener;
    uint64_t stats;
  };
  const Check checks[] = {
      {"load starts vs loads", recorder.starts[0] + recorder.starts[1],
       stats.loads},
      {"load finishes vs loads", recorder.finishes[0] + recorder.finishes[1],
       stats.loads},
      {"refresh loads vs refreshes", recorder.starts[1].load(),
       stats.refreshes},
      {"failed loads vs load_failures", recorder.failures.load(),
       stats.load_failures},
      {"stale serves vs stale_hits + stale_fallbacks",
       recorder.stale_served.load(), stats.stale_hits + stats.stale_fallbacks},
      {"coalesced waits", recorder.coalesced_waits.load(),
       stats.coalesced_waits},
      {"wait timeouts", recorder.wait_timeouts.load(), stats.wait_timeouts},
      {"evictions", recorder.evictions.load(), stats.evictions},
  };
  bool ok = stats.loads > 0 && stats.stale_hits > 0 && stats.evictions > 0;
  if (!ok) fmt::print("FAIL: expected loads, stale hits and evictions\n");
  for (const Check& c : checks) {
    if (c.listener != c.stats) {
      fmt::print("FAIL: {}: the listener saw {}, stats say {}\n", c.what,
                 c.listener, c.stats);
      ok = false;
    }
  }
  if (ok) fmt::print("\nOK: the listener saw every event the stats counted\n");
  return ok ? 0 : 1;
}
