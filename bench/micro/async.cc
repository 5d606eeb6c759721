// paddock's asynchronous lookups in paddock_micro (paddock only: the other
// competitors have no asynchronous API). Names follow workloads.cc,
// `BM_<Workload><paddock_<Policy>>`, so scripts/bench-table puts them in
// its own rows:
//
//  - BM_AsyncHotKeyHit: `GetAsync` with an inline callback on one fresh key,
//    the counterpart of BM_HotKeyHit. On one thread it also times `Get` on
//    the same cache right after, and reports `vs_get`, the ratio of the two
//    (the target is at most 1.2).
//  - BM_AsyncColdKeyHerd: 10,000 coroutines (`co_await cache.Await(key)` in
//    a minimal coroutine type) started on one thread onto one cold key whose
//    load takes 1 ms, as BM_ColdKeyHerd's threads are. An iteration's time
//    is from the first coroutine's start until the last has resumed;
//    `loader_calls` is per herd, and more than one fails the run.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "cache_adapter.h"
#include "impl_paddock.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock_bench {
namespace {

// As in workloads.cc: keys spread over 64 bits.
constexpr uint64_t ScrambleKey(uint64_t i) {
  return (i + 1) * 0x9e3779b97f4a7c15ULL;
}
constexpr uint64_t kHotKey = ScrambleKey(0);

constexpr int kCoroutineHerd = 10000;
constexpr absl::Duration kHerdLoadTime = absl::Milliseconds(1);

template <typename Policy>
using PaddockOf = typename PaddockCache<Policy>::Cache;

template <typename Policy>
std::string NameOf(const std::string& workload) {
  return workload + "<" + std::string(kPaddockName<Policy>) + ">";
}

// The cache as the paddock adapters build it (AdapterConfig's defaults).
template <typename Policy>
std::unique_ptr<PaddockOf<Policy>> MakeCache(Loader loader) {
  const AdapterConfig config;
  return std::make_unique<PaddockOf<Policy>>(
      [loader](const uint64_t& key) -> absl::StatusOr<uint64_t> {
        return loader(key);
      },
      paddock::Options{.ttl = config.ttl, .max_entries = config.capacity});
}

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// BM_AsyncHotKeyHit

template <typename Policy>
struct AsyncHotKeyHit {
  static inline std::unique_ptr<PaddockOf<Policy>> cache;

  static void Setup(const benchmark::State&) {
    cache = MakeCache<Policy>(Loader{});
    (void)cache->Get(kHotKey);
  }
  static void Teardown(const benchmark::State&) { cache.reset(); }

  static void Run(benchmark::State& state) {
    PaddockOf<Policy>& c = *cache;
    uint64_t key = kHotKey;
    uint64_t sink = 0;
    const int64_t async_start = SteadyNanos();
    for (auto _ : state) {
      // An opaque key, as in BM_HotKeyHit.
      benchmark::DoNotOptimize(key);
      c.GetAsync(key, [&sink](absl::StatusOr<uint64_t> v) { sink = *v; });
      benchmark::DoNotOptimize(sink);
    }
    const int64_t async_nanos = SteadyNanos() - async_start;
    state.SetItemsProcessed(state.iterations());
    if (sink != ValueFor(kHotKey)) {
      state.SkipWithError("GetAsync did not call back inline with the value");
      return;
    }
    if (state.threads() != 1) return;
    // The same number of `Get` hits on the same cache, right after.
    const int64_t get_start = SteadyNanos();
    for (benchmark::IterationCount i = 0; i < state.iterations(); ++i) {
      benchmark::DoNotOptimize(key);
      benchmark::DoNotOptimize(c.Get(key));
    }
    const int64_t get_nanos = SteadyNanos() - get_start;
    const double iterations = static_cast<double>(state.iterations());
    state.counters["get_ns"] = static_cast<double>(get_nanos) / iterations;
    state.counters["vs_get"] =
        static_cast<double>(async_nanos) /
        static_cast<double>(std::max<int64_t>(get_nanos, 1));
  }
};

// ---------------------------------------------------------------------------
// BM_AsyncColdKeyHerd

// The herd's meeting point, alive for the whole run (a late notify of one
// iteration must find it, and the cache goes first): how many coroutines still
// wait, when the last one resumed, and whether any got a wrong value.
struct HerdRound {
  std::atomic<int> waiting{0};
  std::atomic<int64_t> last_resumed{0};
  std::atomic<bool> wrong_value{false};

  void Resumed(bool right) {
    if (!right) wrong_value.store(true, std::memory_order_relaxed);
    // Before counting down, so that the count reaching 0 covers it.
    const int64_t now = SteadyNanos();
    int64_t last = last_resumed.load(std::memory_order_relaxed);
    while (last < now && !last_resumed.compare_exchange_weak(last, now)) {
    }
    if (waiting.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      waiting.notify_one();
    }
  }
};

// A coroutine that starts at once and frees itself when it ends.
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

template <typename Policy>
Detached AwaitOne(PaddockOf<Policy>& cache, uint64_t key, HerdRound* round) {
  const absl::StatusOr<uint64_t> value = co_await cache.Await(key);
  round->Resumed(value.ok() && *value == ValueFor(key));
}

template <typename Policy>
void BM_AsyncColdKeyHerd(benchmark::State& state) {
  const int herd = static_cast<int>(state.range(0));
  std::atomic<uint64_t> loader_calls{0};
  // Outlives the cache, whose destructor waits for the load that resumes
  // the herd (and so for the last notify).
  HerdRound round;
  auto cache =
      MakeCache<Policy>(Loader{.calls = &loader_calls, .delay = kHerdLoadTime});
  uint64_t key = ScrambleKey(uint64_t{1} << 41);
  uint64_t max_calls = 0;
  for (auto _ : state) {
    round.waiting.store(herd);
    round.last_resumed.store(0);
    const uint64_t calls_before = loader_calls.load();
    ++key;
    const int64_t start = SteadyNanos();
    for (int i = 0; i < herd; ++i) AwaitOne<Policy>(*cache, key, &round);
    for (int left = round.waiting.load(); left != 0;
         left = round.waiting.load()) {
      round.waiting.wait(left);
    }
    state.SetIterationTime(
        static_cast<double>(round.last_resumed.load() - start) * 1e-9);
    const uint64_t calls = loader_calls.load() - calls_before;
    max_calls = std::max(max_calls, calls);
    if (calls != 1) {
      const std::string error = std::string(kPaddockName<Policy>) +
                                " coalesces, yet a herd of coroutines made " +
                                std::to_string(calls) + " loader calls";
      state.SkipWithError(error.c_str());
      break;
    }
  }
  if (round.wrong_value.load() && !state.error_occurred()) {
    state.SkipWithError("a coroutine got a wrong value");
  }
  state.counters["loader_calls"] =
      benchmark::Counter(static_cast<double>(loader_calls.load()),
                         benchmark::Counter::kAvgIterations);
  state.counters["loader_calls_max"] = static_cast<double>(max_calls);
}

// ---------------------------------------------------------------------------
// Registration. scripts/bench-table orders its columns by workloads.cc's
// registrations, whichever file's initialiser runs first.

template <typename Policy>
void RegisterAsync() {
  benchmark::RegisterBenchmark(NameOf<Policy>("BM_AsyncHotKeyHit").c_str(),
                               AsyncHotKeyHit<Policy>::Run)
      ->Setup(AsyncHotKeyHit<Policy>::Setup)
      ->Teardown(AsyncHotKeyHit<Policy>::Teardown)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
  if constexpr (Policy::kCoalesceLoads) {
    // An uncoalescing policy would make 10,000 loads of 1 ms per herd.
    benchmark::RegisterBenchmark(NameOf<Policy>("BM_AsyncColdKeyHerd").c_str(),
                                 BM_AsyncColdKeyHerd<Policy>)
        ->ArgName("herd")
        ->Arg(kCoroutineHerd)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

const bool registered = [] {
  RegisterAsync<paddock::SingleFlight>();
  RegisterAsync<paddock::XFetch>();
  RegisterAsync<paddock::SoftTtl>();
  RegisterAsync<paddock::NaiveJitter>();
  return true;
}();

}  // namespace
}  // namespace paddock_bench
