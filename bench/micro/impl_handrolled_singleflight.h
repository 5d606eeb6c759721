// File: bench/micro/impl_handrolled_singleflight.h
// -----------------------------------------------------------------------------
// `handrolled_singleflight`: map + mutex + map of std::shared_future, the
// pattern both seeds wrote by hand. One mutex guards the values and the loads
// in flight; the first caller to miss a key loads it outside the lock, the
// others wait on its future. Every hit takes the mutex.

#ifndef PADDOCK_BENCH_MICRO_IMPL_HANDROLLED_SINGLEFLIGHT_H_
#define PADDOCK_BENCH_MICRO_IMPL_HANDROLLED_SINGLEFLIGHT_H_

#include <cstddef>
#include <cstdint>
#include <future>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "cache_adapter.h"
#include "fifo_eviction.h"

namespace paddock_bench {

class HandrolledSingleflight {
 public:
  static constexpr std::string_view kName = "handrolled_singleflight";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = true;

  explicit HandrolledSingleflight(const AdapterConfig& config)
      : loader_(config.loader), eviction_(config.capacity) {}

  uint64_t Get(uint64_t key) {
    // Made on a miss only, as the seeds' code does: a promise allocates its
    // shared state, which a hit has no use for.
    std::optional<std::promise<uint64_t>> promise;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (auto it = values_.find(key); it != values_.end()) return it->second;
      if (auto it = in_flight_.find(key); it != in_flight_.end()) {
        std::shared_future<uint64_t> result = it->second;
        lock.unlock();
        return result.get();
      }
      promise.emplace();
      in_flight_.emplace(key, promise->get_future().share());
    }
    const uint64_t value = loader_(key);
    {
      std::lock_guard<std::mutex> lock(mu_);
      InsertLocked(key, value);
      in_flight_.erase(key);
    }
    promise->set_value(value);
    return value;
  }

  void Put(uint64_t key, uint64_t value) {
    std::lock_guard<std::mutex> lock(mu_);
    InsertLocked(key, value);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }

 private:
  void InsertLocked(uint64_t key, uint64_t value) {
    auto [it, inserted] = values_.insert_or_assign(key, value);
    if (!inserted) return;
    if (auto victim = eviction_.Inserted(key)) values_.erase(*victim);
  }

  const Loader loader_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> values_;  // Guarded by mu_.
  std::unordered_map<uint64_t, std::shared_future<uint64_t>>
      in_flight_;          // Guarded by mu_.
  FifoEviction eviction_;  // Guarded by mu_.
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_HANDROLLED_SINGLEFLIGHT_H_
