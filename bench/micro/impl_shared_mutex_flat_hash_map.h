// File: bench/micro/impl_shared_mutex_flat_hash_map.h
// -----------------------------------------------------------------------------
// `shared_mutex_flat_hash_map`: std::shared_mutex + absl::flat_hash_map.
// Readers share the lock, so a hit writes only the lock word; misses load
// outside the lock and each call the loader.

#ifndef PADDOCK_BENCH_MICRO_IMPL_SHARED_MUTEX_FLAT_HASH_MAP_H_
#define PADDOCK_BENCH_MICRO_IMPL_SHARED_MUTEX_FLAT_HASH_MAP_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "cache_adapter.h"
#include "fifo_eviction.h"

namespace paddock_bench {

class SharedMutexFlatHashMap {
 public:
  static constexpr std::string_view kName = "shared_mutex_flat_hash_map";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = false;

  explicit SharedMutexFlatHashMap(const AdapterConfig& config)
      : loader_(config.loader), eviction_(config.capacity) {}

  uint64_t Get(uint64_t key) {
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    const uint64_t value = loader_(key);
    Put(key, value);
    return value;
  }

  void Put(uint64_t key, uint64_t value) {
    std::lock_guard<std::shared_mutex> lock(mu_);
    auto [it, inserted] = map_.insert_or_assign(key, value);
    if (!inserted) return;
    if (auto victim = eviction_.Inserted(key)) map_.erase(*victim);
  }

  size_t size() const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return map_.size();
  }

 private:
  const Loader loader_;
  mutable std::shared_mutex mu_;
  absl::flat_hash_map<uint64_t, uint64_t> map_;  // Guarded by mu_.
  FifoEviction eviction_;                        // Guarded by mu_.
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_SHARED_MUTEX_FLAT_HASH_MAP_H_
