// File: bench/micro/impl_tbb_concurrent_lru_cache.h
// -----------------------------------------------------------------------------
// `tbb_concurrent_lru_cache`: oneTBB's concurrent_lru_cache (a preview
// feature), the one packaged C++ peer that coalesces misses: the first caller
// runs the value function, later callers of that key spin until it is ready.
// Every lookup and every handle release is an operation on one aggregator
// that serialises them over a std::map and an LRU list. It has no TTL and no
// way to store a value without loading it, so it sits out the read/write mix.
// Built only when CMake found TBB (PADDOCK_HAVE_TBB).

#ifndef PADDOCK_BENCH_MICRO_IMPL_TBB_CONCURRENT_LRU_CACHE_H_
#define PADDOCK_BENCH_MICRO_IMPL_TBB_CONCURRENT_LRU_CACHE_H_

#if PADDOCK_HAVE_TBB

#include <cstdint>
#include <string_view>

#include "cache_adapter.h"

// The header refuses to compile without the preview switch.
#define TBB_PREVIEW_CONCURRENT_LRU_CACHE 1
#include <tbb/concurrent_lru_cache.h>

namespace paddock_bench {

class TbbConcurrentLruCache {
 public:
  static constexpr std::string_view kName = "tbb_concurrent_lru_cache";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = true;

  // `capacity` bounds the entries no handle refers to; handles here live only
  // inside `Get`, so it bounds the entries.
  explicit TbbConcurrentLruCache(const AdapterConfig& config)
      : cache_(config.loader, config.capacity) {}

  uint64_t Get(uint64_t key) { return cache_[key].value(); }

 private:
  tbb::concurrent_lru_cache<uint64_t, uint64_t, Loader> cache_;
};

}  // namespace paddock_bench

#endif  // PADDOCK_HAVE_TBB

#endif  // PADDOCK_BENCH_MICRO_IMPL_TBB_CONCURRENT_LRU_CACHE_H_
