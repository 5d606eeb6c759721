// File: bench/micro/impl_mutex_unordered_map.h
// -----------------------------------------------------------------------------
// `mutex_unordered_map`: std::mutex + std::unordered_map, the usual
// hand-written cache. A miss loads outside the lock, so concurrent misses of
// one key each call the loader.

#ifndef PADDOCK_BENCH_MICRO_IMPL_MUTEX_UNORDERED_MAP_H_
#define PADDOCK_BENCH_MICRO_IMPL_MUTEX_UNORDERED_MAP_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "cache_adapter.h"
#include "fifo_eviction.h"

namespace paddock_bench {

class MutexUnorderedMap {
 public:
  static constexpr std::string_view kName = "mutex_unordered_map";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = false;

  explicit MutexUnorderedMap(const AdapterConfig& config)
      : loader_(config.loader), eviction_(config.capacity) {}

  uint64_t Get(uint64_t key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    const uint64_t value = loader_(key);
    Put(key, value);
    return value;
  }

  void Put(uint64_t key, uint64_t value) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = map_.insert_or_assign(key, value);
    if (!inserted) return;
    if (auto victim = eviction_.Inserted(key)) map_.erase(*victim);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  const Loader loader_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> map_;  // Guarded by mu_.
  FifoEviction eviction_;                       // Guarded by mu_.
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_MUTEX_UNORDERED_MAP_H_
