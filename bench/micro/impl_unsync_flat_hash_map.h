// File: bench/micro/impl_unsync_flat_hash_map.h
// -----------------------------------------------------------------------------
// `unsync_flat_hash_map`: absl::flat_hash_map with no synchronisation, the
// physical floor of a hit. Not thread-safe; the workloads run it on one thread,
// except for hot-key reads, where nothing writes once the threads start.

#ifndef PADDOCK_BENCH_MICRO_IMPL_UNSYNC_FLAT_HASH_MAP_H_
#define PADDOCK_BENCH_MICRO_IMPL_UNSYNC_FLAT_HASH_MAP_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "cache_adapter.h"
#include "fifo_eviction.h"

namespace paddock_bench {

class UnsyncFlatHashMap {
 public:
  static constexpr std::string_view kName = "unsync_flat_hash_map";
  static constexpr bool kConcurrent = false;
  static constexpr bool kCoalesces = false;

  explicit UnsyncFlatHashMap(const AdapterConfig& config)
      : loader_(config.loader), eviction_(config.capacity) {}

  uint64_t Get(uint64_t key) {
    if (auto it = map_.find(key); it != map_.end()) [[likely]] {
      return it->second;
    }
    const uint64_t value = loader_(key);
    Put(key, value);
    return value;
  }

  void Put(uint64_t key, uint64_t value) {
    auto [it, inserted] = map_.insert_or_assign(key, value);
    if (!inserted) return;
    if (auto victim = eviction_.Inserted(key)) map_.erase(*victim);
  }

  size_t size() const { return map_.size(); }

 private:
  const Loader loader_;
  absl::flat_hash_map<uint64_t, uint64_t> map_;
  FifoEviction eviction_;
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_UNSYNC_FLAT_HASH_MAP_H_
