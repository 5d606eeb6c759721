// paddock_fixed_ops: the single-thread loops of paddock_micro's BM_HotKeyHit,
// BM_Zipf and BM_ReadWrite, for a fixed number of operations, for profilers
// that count rather than time (cachegrind, callgrind). Wall time on a shared
// VM varies by tens of percent between runs; instruction and simulated
// cache-miss counts vary by a fraction of a percent (absl's hash seed, so
// each key's shard, changes with every process). scripts/profile-ops runs it
// under cachegrind at two sizes and reports the difference per operation, which
// cancels the setup (trace generation, warm-up).
//
//   paddock_fixed_ops <workload> <adapter> <ops>
//     workload: hot | zipf | readwrite
//     adapter:  paddock_SingleFlight | paddock_SoftTtl | paddock_NaiveJitter |
//               mutex_unordered_map | sharded_mutex_flat_hash_map
//
// Same keys, cache sizes and adapters as paddock_micro (bench/micro), one
// thread. Prints a checksum so that nothing is optimised away.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "cache_adapter.h"
#include "impl_mutex_unordered_map.h"
#include "impl_paddock.h"
#include "impl_sharded_mutex_flat_hash_map.h"
#include "traces.h"

namespace paddock_bench {
namespace {

// As in bench/micro/workloads.cc: Zipf(0.99) over 2^20 keys into 2^16
// entries; ReadWrite 90/10 over 2^16 resident keys in room for 2^17.
constexpr size_t kZipfKeys = size_t{1} << 20;
constexpr size_t kZipfCapacity = size_t{1} << 16;
constexpr size_t kTraceLength = size_t{1} << 20;
constexpr size_t kReadWriteKeys = size_t{1} << 16;

// Frees what the adapter deferred (paddock's epoch retirements), so that
// its idle reclaimer thread never frees them at a moment that differs from
// one process to the next: the measured loop starts and ends with nothing
// waiting, and the two runs profile-ops subtracts differ only in the loop.
template <typename A>
void Settle() {
  if constexpr (QuiescentCacheAdapter<A>) A::Quiesce();
}

// The warm-up (seed 2) and measured (seed 1) traces of BM_Zipf's sizes.
std::vector<uint64_t> ZipfTraceOf(uint64_t seed) {
  return ZipfTrace(kZipfKeys, 0.99, kTraceLength, seed);
}

template <typename A>
uint64_t Run(std::string_view workload, size_t ops) {
  uint64_t sum = 0;
  std::atomic<uint64_t> loads{0};
  if (workload == "hot") {
    A cache(AdapterConfig{});
    uint64_t key = ScrambleKey(0);
    cache.Get(key);
    Settle<A>();
    for (size_t i = 0; i < ops; ++i) {
      asm volatile("" : "+r"(key));  // An opaque key, as DoNotOptimize.
      sum += cache.Get(key);
    }
    Settle<A>();
  } else if (workload == "zipf") {
    A cache(
        AdapterConfig{.capacity = kZipfCapacity, .loader = {.calls = &loads}});
    for (uint64_t key : ZipfTraceOf(2)) sum += cache.Get(key);  // Warm-up.
    const std::vector<uint64_t> trace = ZipfTraceOf(1);
    Settle<A>();
    for (size_t i = 0; i < ops; ++i) sum += cache.Get(trace[i % trace.size()]);
    Settle<A>();
    // For per-miss figures from a profile of the whole run.
    std::fprintf(stderr, "loader calls: %llu\n",
                 static_cast<unsigned long long>(loads.load()));
  } else if (workload == "readwrite") {
    A cache(AdapterConfig{.capacity = 2 * kReadWriteKeys});
    for (size_t i = 0; i < kReadWriteKeys; ++i)
      sum += cache.Get(ScrambleKey(i));
    std::vector<uint64_t> trace(kTraceLength);
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<uint64_t> index(0, kReadWriteKeys - 1);
    for (uint64_t& key : trace) key = ScrambleKey(index(rng));
    Settle<A>();
    for (size_t i = 0; i < ops; ++i) {
      const uint64_t key = trace[i % trace.size()];
      if (i % 10 == 0) {
        cache.Put(key, i);
      } else {
        sum += cache.Get(key);
      }
    }
    Settle<A>();
  } else {
    std::fprintf(stderr, "unknown workload\n");
    std::exit(2);
  }
  return sum;
}

}  // namespace
}  // namespace paddock_bench

int main(int argc, char** argv) {
  using namespace paddock_bench;  // NOLINT(google-build-using-namespace)
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s hot|zipf|readwrite <adapter> <ops>\n",
                 argv[0]);
    return 2;
  }
  const std::string_view workload = argv[1];
  const std::string_view adapter = argv[2];
  const size_t ops = std::strtoull(argv[3], nullptr, 10);
  uint64_t sum;
  if (adapter == PaddockSingleFlight::kName) {
    sum = Run<PaddockSingleFlight>(workload, ops);
  } else if (adapter == PaddockXFetch::kName) {
    sum = Run<PaddockXFetch>(workload, ops);
  } else if (adapter == PaddockSoftTtl::kName) {
    sum = Run<PaddockSoftTtl>(workload, ops);
  } else if (adapter == PaddockNaiveJitter::kName) {
    sum = Run<PaddockNaiveJitter>(workload, ops);
  } else if (adapter == MutexUnorderedMap::kName) {
    sum = Run<MutexUnorderedMap>(workload, ops);
  } else if (adapter == ShardedMutexFlatHashMap::kName) {
    sum = Run<ShardedMutexFlatHashMap>(workload, ops);
  } else {
    std::fprintf(stderr, "unknown adapter\n");
    return 2;
  }
  std::printf("%llu\n", static_cast<unsigned long long>(sum));
  return 0;
}
