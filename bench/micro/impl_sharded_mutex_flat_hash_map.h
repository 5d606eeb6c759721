// File: bench/micro/impl_sharded_mutex_flat_hash_map.h
// -----------------------------------------------------------------------------
// `sharded_mutex_flat_hash_map`: N × (std::mutex + absl::flat_hash_map + FIFO
// ring), what a user writes next when one mutex contends. N and the shard of a
// key come from `Sharding` (on a machine with 2 hardware threads, 8 shards by
// the top 3 bits of the key's absl::Hash); each shard evicts first in, first
// out beyond its share of the capacity. Different keys rarely share a lock,
// one hot key still does; misses load outside the lock and each call the
// loader.

#ifndef PADDOCK_BENCH_MICRO_IMPL_SHARDED_MUTEX_FLAT_HASH_MAP_H_
#define PADDOCK_BENCH_MICRO_IMPL_SHARDED_MUTEX_FLAT_HASH_MAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "cache_adapter.h"
#include "fifo_eviction.h"
#include "sharding.h"

namespace paddock_bench {

class ShardedMutexFlatHashMap {
 public:
  static constexpr std::string_view kName = "sharded_mutex_flat_hash_map";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = false;

  explicit ShardedMutexFlatHashMap(const AdapterConfig& config)
      : loader_(config.loader),
        sharding_(config.capacity),
        shards_(std::make_unique<Shard[]>(sharding_.count())) {
    for (size_t i = 0; i < sharding_.count(); ++i) {
      shards_[i].eviction = FifoEviction(sharding_.CapacityOf(i));
    }
  }

  uint64_t Get(uint64_t key) {
    Shard& shard = ShardFor(key);
    {
      std::lock_guard<std::mutex> lock(shard.mu);
      if (auto it = shard.map.find(key); it != shard.map.end()) {
        return it->second;
      }
    }
    const uint64_t value = loader_(key);
    Store(shard, key, value);
    return value;
  }

  void Put(uint64_t key, uint64_t value) { Store(ShardFor(key), key, value); }

  size_t size() const {
    size_t entries = 0;
    for (size_t i = 0; i < sharding_.count(); ++i) {
      std::lock_guard<std::mutex> lock(shards_[i].mu);
      entries += shards_[i].map.size();
    }
    return entries;
  }

 private:
  // A line of its own, so that two shards' locks do not share a cache line.
  struct alignas(64) Shard {
    std::mutex mu;
    absl::flat_hash_map<uint64_t, uint64_t> map;  // Guarded by mu.
    // Guarded by mu. Sized by the constructor; a ring of 0 until then.
    FifoEviction eviction{0};
  };

  Shard& ShardFor(uint64_t key) {
    return shards_[sharding_.ShardOf(Sharding::Hash(key))];
  }

  static void Store(Shard& shard, uint64_t key, uint64_t value) {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto [it, inserted] = shard.map.insert_or_assign(key, value);
    if (!inserted) return;
    if (auto victim = shard.eviction.Inserted(key)) shard.map.erase(*victim);
  }

  const Loader loader_;
  const Sharding sharding_;
  const std::unique_ptr<Shard[]> shards_;
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_SHARDED_MUTEX_FLAT_HASH_MAP_H_
