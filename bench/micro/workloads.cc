// The workloads of paddock_micro, registered for every adapter that can run
// them. A benchmark's name is `BM_<Workload><<adapter tag>>`, followed by
// Google Benchmark's own suffixes (`/threads:2`, `/herd:64`, ...), which is
// what scripts/bench-table parses.
//
// Shared state per run lives in a `Fixture<A>`: its `Setup` builds and warms
// the cache on one thread before the benchmark threads start, `Teardown`
// destroys it after they have stopped, so the timed loop only reads a local
// reference.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "adapters.h"
#include "benchmark/benchmark.h"
#include "cache_adapter.h"
#include "heap_bytes.h"
#include "paddock/clock.h"
#include "traces.h"

namespace paddock_bench {
namespace {

// ---------------------------------------------------------------------------
// Keys and traces.

constexpr uint64_t kHotKey = ScrambleKey(0);

// Zipf: 2^20 keys into a cache of 2^16 entries.
constexpr size_t kZipfKeys = size_t{1} << 20;
constexpr double kZipfSkew = 0.99;
constexpr size_t kZipfCapacity = size_t{1} << 16;
constexpr size_t kZipfTraceLength = size_t{1} << 21;  // Per thread and run.

// Read/write: 2^16 keys, all resident (the capacity leaves room for sharding
// imbalance), so the mix measures hits and stores, not eviction.
constexpr size_t kReadWriteKeys = size_t{1} << 16;
constexpr size_t kReadWriteCapacity = 2 * kReadWriteKeys;
constexpr size_t kReadWriteTraceLength = size_t{1} << 20;
constexpr int kWritesPerTen = 1;

// Zipf with a costly load: rounds of Loader::work, about a microsecond of
// one core's time, so that the hit ratio weighs as well as the lookup.
constexpr uint32_t kCostlyLoadWork = 600;

// Cold-key herd: the load a herd piles up on, as a remote backend would take.
constexpr absl::Duration kHerdLoadTime = absl::Milliseconds(1);

// XFetch near expiry: a load takes kNearLoadTime on a ManualClock, so XFetch's
// draw window opens kNearLoadTime * beta * XFetch::kCap = 210 ms before expiry.
// The clock stands 200 ms before expiry: every hit draws, and the chance that
// one starts a refresh is e^-20 (2e-9), so the entry stays where it is.
constexpr absl::Duration kNearTtl = absl::Seconds(1);
constexpr absl::Duration kNearLoadTime = absl::Milliseconds(10);
constexpr absl::Duration kNearTimeLeft = absl::Milliseconds(200);

// Memory: entries at which bytes per entry are measured.
constexpr size_t kMemoryEntries = size_t{1} << 16;

const std::vector<uint64_t>& MeasuredZipfTrace() {
  static const auto* const trace = new std::vector<uint64_t>(
      ZipfTrace(kZipfKeys, kZipfSkew, kZipfTraceLength, /*seed=*/1));
  return *trace;
}

const std::vector<uint64_t>& WarmupZipfTrace() {
  static const auto* const trace = new std::vector<uint64_t>(
      ZipfTrace(kZipfKeys, kZipfSkew, kZipfTraceLength, /*seed=*/2));
  return *trace;
}

const std::vector<uint64_t>& ReadWriteTrace() {
  static const auto* const trace = [] {
    auto* keys = new std::vector<uint64_t>(kReadWriteTraceLength);
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<uint64_t> index(0, kReadWriteKeys - 1);
    for (uint64_t& key : *keys) key = ScrambleKey(index(rng));
    return keys;
  }();
  return *trace;
}

// Where thread `thread` of `threads` starts in a trace of `length`.
size_t StartOf(const benchmark::State& state, size_t length) {
  return static_cast<size_t>(state.thread_index()) *
         (length / static_cast<size_t>(state.threads()));
}

// The cache of one run and what its loader counted.
template <CacheAdapter A>
struct Fixture {
  static inline std::unique_ptr<A> cache;
  static inline std::atomic<uint64_t> loader_calls{0};

  static void Teardown(const benchmark::State&) { cache.reset(); }
};

// ---------------------------------------------------------------------------
// BM_HotKeyHit: one fresh key read by every thread. Also run, for paddock's
// XFetch and SingleFlight, as BM_XFetchFarFromExpiry: with a ttl of 1h the
// entry is far outside XFetch's draw window.

template <CacheAdapter A>
struct HotKeyHit : Fixture<A> {
  static void Setup(const benchmark::State&) {
    HotKeyHit::cache = std::make_unique<A>(AdapterConfig{});
    HotKeyHit::cache->Get(kHotKey);
  }
  static void Run(benchmark::State& state) {
    A& cache = *HotKeyHit::cache;
    uint64_t key = kHotKey;
    for (auto _ : state) {
      // An opaque key: no implementation may hoist its hashing out of the loop.
      benchmark::DoNotOptimize(key);
      benchmark::DoNotOptimize(cache.Get(key));
    }
    state.SetItemsProcessed(state.iterations());
  }
};

// ---------------------------------------------------------------------------
// BM_Zipf: reads with load-on-miss of a trivial loader; `hit_ratio` shows the
// eviction policy. The cache is warmed with an independent trace first.
// BM_ZipfCostlyLoad is the same with a load that computes for
// kCostlyLoadWork rounds (`Loader::work`), so that a miss costs what a
// cached computation would: there the hit ratio weighs, not only the
// lookup.

template <CacheAdapter A, uint32_t kLoadWork = 0>
struct Zipf : Fixture<A> {
  static void Setup(const benchmark::State&) {
    Zipf::cache = std::make_unique<A>(AdapterConfig{
        .capacity = kZipfCapacity,
        .loader = {.calls = &Zipf::loader_calls, .work = kLoadWork}});
    for (uint64_t key : WarmupZipfTrace()) Zipf::cache->Get(key);
    Zipf::loader_calls.store(0);
    MeasuredZipfTrace();  // Built here, not in the first run's thread.
  }
  static void Run(benchmark::State& state) {
    A& cache = *Zipf::cache;
    const std::vector<uint64_t>& trace = MeasuredZipfTrace();
    size_t i = StartOf(state, trace.size());
    for (auto _ : state) {
      benchmark::DoNotOptimize(cache.Get(trace[i]));
      if (++i == trace.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
      // Past the loop every thread has stopped (Google Benchmark's barrier).
      const double gets =
          static_cast<double>(state.iterations()) * state.threads();
      state.counters["hit_ratio"] =
          1.0 - static_cast<double>(Zipf::loader_calls.load()) / gets;
    }
  }
};

// ---------------------------------------------------------------------------
// BM_ReadWrite: 90 % Get, 10 % Put, uniform over 64k resident keys.

template <WritableCacheAdapter A>
struct ReadWrite : Fixture<A> {
  static void Setup(const benchmark::State&) {
    ReadWrite::cache =
        std::make_unique<A>(AdapterConfig{.capacity = kReadWriteCapacity});
    for (size_t i = 0; i < kReadWriteKeys; ++i) {
      ReadWrite::cache->Get(ScrambleKey(i));
    }
    ReadWriteTrace();  // Built here, not in the first run's thread.
  }
  static void Run(benchmark::State& state) {
    A& cache = *ReadWrite::cache;
    const std::vector<uint64_t>& trace = ReadWriteTrace();
    size_t i = StartOf(state, trace.size());
    int op = 0;
    for (auto _ : state) {
      if (op < kWritesPerTen) {
        cache.Put(trace[i], i);
      } else {
        benchmark::DoNotOptimize(cache.Get(trace[i]));
      }
      if (++op == 10) op = 0;
      if (++i == trace.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
  }
};

// ---------------------------------------------------------------------------
// BM_ColdKeyHerd: `herd` threads, parked, are released at once onto one cold
// key whose load takes kHerdLoadTime. An iteration's time is from the release
// until the last thread has the value; `loader_calls` is per herd. A
// coalescing adapter that calls the loader more than once fails the run.

template <CacheAdapter A>
class Herd {
 public:
  Herd(A& cache, int size) : cache_(cache), size_(size) {
    threads_.reserve(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Herd() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Herd(const Herd&) = delete;
  Herd& operator=(const Herd&) = delete;

  // Releases the herd onto `key`; returns the time until the last thread had
  // its value. Sets `wrong_value()` if any thread got another value.
  std::chrono::nanoseconds Run(uint64_t key) {
    key_ = key;
    done_.store(0);
    last_finish_.store(0);
    const int64_t start = Now();
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (int done = done_.load(); done != size_; done = done_.load()) {
      done_.wait(done);
    }
    return std::chrono::nanoseconds(last_finish_.load() - start);
  }

  bool wrong_value() const { return wrong_value_.load(); }

 private:
  static int64_t Now() {
    return std::chrono::steady_clock::now().time_since_epoch().count();
  }

  void Work() {
    uint32_t seen = 0;
    for (;;) {
      generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      const uint64_t key = key_;
      if (cache_.Get(key) != ValueFor(key)) wrong_value_.store(true);
      const int64_t finish = Now();
      int64_t last = last_finish_.load();
      while (last < finish &&
             !last_finish_.compare_exchange_weak(last, finish)) {
      }
      if (done_.fetch_add(1) + 1 == size_) done_.notify_one();
    }
  }

  A& cache_;
  const int size_;
  std::vector<std::thread> threads_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  uint64_t key_ = 0;  // Written before a release, read after it.
  std::atomic<int> done_{0};
  std::atomic<int64_t> last_finish_{0};
  std::atomic<bool> wrong_value_{false};
};

template <CacheAdapter A>
void BM_ColdKeyHerd(benchmark::State& state) {
  std::atomic<uint64_t> loader_calls{0};
  A cache(AdapterConfig{
      .loader = {.calls = &loader_calls, .delay = kHerdLoadTime}});
  Herd<A> herd(cache, static_cast<int>(state.range(0)));
  uint64_t key = ScrambleKey(uint64_t{1} << 40);
  uint64_t max_calls = 0;
  for (auto _ : state) {
    const uint64_t calls_before = loader_calls.load();
    state.SetIterationTime(
        std::chrono::duration<double>(herd.Run(++key)).count());
    const uint64_t calls = loader_calls.load() - calls_before;
    max_calls = std::max(max_calls, calls);
    if (A::kCoalesces && calls != 1) {
      const std::string error = std::string(A::kName) +
                                " coalesces, yet a herd made " +
                                std::to_string(calls) + " loader calls";
      state.SkipWithError(error.c_str());
      break;
    }
  }
  if (herd.wrong_value() && !state.error_occurred()) {
    state.SkipWithError("a caller got a wrong value");
  }
  state.counters["loader_calls"] =
      benchmark::Counter(static_cast<double>(loader_calls.load()),
                         benchmark::Counter::kAvgIterations);
  state.counters["loader_calls_max"] = static_cast<double>(max_calls);
}

// ---------------------------------------------------------------------------
// BM_XFetchNearExpiry: a hot key inside XFetch's draw window, on a
// ManualClock; SingleFlight on the same clock and entry is the comparison.
// `refreshes` counts background refreshes started (expected 0).

template <typename A>
struct NearExpiry : Fixture<A> {
  static inline std::unique_ptr<paddock::ManualClock> clock;

  static void Setup(const benchmark::State&) {
    clock = std::make_unique<paddock::ManualClock>(absl::UnixEpoch() +
                                                   absl::Hours(24));
    NearExpiry::cache = std::make_unique<A>(
        AdapterConfig{.ttl = kNearTtl,
                      .loader = {.delay = kNearLoadTime, .clock = clock.get()},
                      .clock = clock.get()});
    NearExpiry::cache->Get(kHotKey);  // Loads; the loader advances the clock.
    clock->Advance(kNearTtl - kNearTimeLeft);
  }
  static void Teardown(const benchmark::State& state) {
    Fixture<A>::Teardown(state);
    clock.reset();
  }
  static void Run(benchmark::State& state) {
    A& cache = *NearExpiry::cache;
    uint64_t key = kHotKey;
    for (auto _ : state) {
      benchmark::DoNotOptimize(key);
      benchmark::DoNotOptimize(cache.Get(key));
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
      state.counters["refreshes"] =
          static_cast<double>(cache.cache().stats().refreshes);
    }
  }
};

// ---------------------------------------------------------------------------
// BM_Memory: heap bytes per entry after loading 64k keys into a fresh cache
// of 64k entries (glibc's count of bytes in use, so allocator overhead is
// included), once memory awaiting deferred reclamation is freed.
// `flat_hash_map` is a bare absl::flat_hash_map<uint64_t,
// uint64_t>, the reference; the hand-written adapters add their FIFO ring.

template <CacheAdapter A>
void BM_Memory(benchmark::State& state) {
  auto quiesce = [] {
    if constexpr (QuiescentCacheAdapter<A>) A::Quiesce();
  };
  for (auto _ : state) {
    quiesce();
    const size_t before = HeapBytesInUse();
    auto cache = std::make_unique<A>(AdapterConfig{.capacity = kMemoryEntries});
    for (size_t i = 0; i < kMemoryEntries; ++i) cache->Get(ScrambleKey(i));
    quiesce();
    const size_t after = HeapBytesInUse();
    size_t entries = kMemoryEntries;
    if constexpr (SizedCacheAdapter<A>) entries = cache->size();
    state.counters["bytes_per_entry"] =
        static_cast<double>(after - before) / static_cast<double>(entries);
    state.counters["entries"] = static_cast<double>(entries);
  }
}

void BM_MemoryFlatHashMap(benchmark::State& state) {
  for (auto _ : state) {
    const size_t before = HeapBytesInUse();
    auto map = std::make_unique<absl::flat_hash_map<uint64_t, uint64_t>>();
    for (size_t i = 0; i < kMemoryEntries; ++i) {
      map->emplace(ScrambleKey(i), ValueFor(ScrambleKey(i)));
    }
    const size_t after = HeapBytesInUse();
    state.counters["bytes_per_entry"] =
        static_cast<double>(after - before) / static_cast<double>(map->size());
    state.counters["entries"] = static_cast<double>(map->size());
  }
}

// ---------------------------------------------------------------------------
// Registration.

template <CacheAdapter A>
std::string NameOf(std::string_view workload) {
  return std::string(workload) + "<" + std::string(A::kName) + ">";
}

template <typename Workload>
benchmark::internal::Benchmark* RegisterFixture(const std::string& name) {
  return benchmark::RegisterBenchmark(name.c_str(), Workload::Run)
      ->Setup(Workload::Setup)
      ->Teardown(Workload::Teardown);
}

template <CacheAdapter A>
void RegisterHotKeyHit() {
  // Without writers, concurrent finds in an absl::flat_hash_map are safe: the
  // floor runs at 2 threads as well.
  RegisterFixture<HotKeyHit<A>>(NameOf<A>("BM_HotKeyHit"))
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
}

template <CacheAdapter A, uint32_t kLoadWork>
void RegisterZipf(std::string_view workload) {
  auto* b = RegisterFixture<Zipf<A, kLoadWork>>(NameOf<A>(workload))
                ->Iterations(kZipfTraceLength)
                ->Threads(1);
  if (A::kConcurrent) b->Threads(2);
  b->UseRealTime();
}

template <CacheAdapter A>
void RegisterReadWrite() {
  if constexpr (WritableCacheAdapter<A>) {
    auto* b =
        RegisterFixture<ReadWrite<A>>(NameOf<A>("BM_ReadWrite"))->Threads(1);
    if (A::kConcurrent) b->Threads(2);
    b->UseRealTime();
  }
}

template <CacheAdapter A>
void RegisterColdKeyHerd() {
  if constexpr (A::kConcurrent) {
    benchmark::RegisterBenchmark(NameOf<A>("BM_ColdKeyHerd").c_str(),
                                 BM_ColdKeyHerd<A>)
        ->ArgName("herd")
        ->Arg(2)
        ->Arg(8)
        ->Arg(64)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

template <typename A>
void RegisterXFetch() {
  RegisterFixture<HotKeyHit<A>>(NameOf<A>("BM_XFetchFarFromExpiry"))
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
  RegisterFixture<NearExpiry<A>>(NameOf<A>("BM_XFetchNearExpiry"))
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
}

template <CacheAdapter A>
void RegisterMemory() {
  benchmark::RegisterBenchmark(NameOf<A>("BM_Memory").c_str(), BM_Memory<A>)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

template <CacheAdapter... As>
void RegisterAll(AdapterList<As...>) {
  // Grouped by workload, adapters in table order.
  (RegisterHotKeyHit<As>(), ...);
  (RegisterZipf<As, 0>("BM_Zipf"), ...);
  (RegisterZipf<As, kCostlyLoadWork>("BM_ZipfCostlyLoad"), ...);
  (RegisterReadWrite<As>(), ...);
  (RegisterColdKeyHerd<As>(), ...);
  RegisterXFetch<PaddockSingleFlight>();
  RegisterXFetch<PaddockXFetch>();
  benchmark::RegisterBenchmark("BM_Memory<flat_hash_map>", BM_MemoryFlatHashMap)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  (RegisterMemory<As>(), ...);
}

const bool registered = [] {
  RegisterAll(AllAdapters{});
  return true;
}();

}  // namespace
}  // namespace paddock_bench
