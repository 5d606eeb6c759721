// File: bench/micro/sharding.h
// -----------------------------------------------------------------------------
// `Sharding`: how the sharded adapters split keys and capacity, chosen the way
// a careful user would, and the way paddock chooses its own default, so that
// a column compares the data structure and not the shard count:
//
//  - the number of shards is the power of two at or above 4 × the hardware
//    threads (at most 256, and at most `capacity`, so that no shard is empty);
//  - a key's shard is taken from the top bits of its `absl::Hash`, which are
//    well mixed and which neither `absl::flat_hash_map` (low bits for the
//    group, the lowest 7 for the control byte) nor libcuckoo (low bits for the
//    bucket) use inside a shard;
//  - each shard holds `capacity / shards` entries, the remainder spread over
//    the first shards, so that the shards hold at most `capacity` together.

#ifndef PADDOCK_BENCH_MICRO_SHARDING_H_
#define PADDOCK_BENCH_MICRO_SHARDING_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "absl/hash/hash.h"

namespace paddock_bench {

class Sharding {
 public:
  // The shard count for an unbounded cache on this machine.
  static size_t DefaultCount() {
    const size_t cpus = std::max(1u, std::thread::hardware_concurrency());
    return std::min<size_t>(std::bit_ceil(4 * cpus), 256);
  }

  explicit Sharding(size_t capacity)
      : capacity_(capacity),
        count_(std::min(DefaultCount(),
                        std::bit_floor(std::max<size_t>(capacity, 1)))) {}

  size_t count() const { return count_; }

  // The hash every sharded adapter uses, for the shard and inside it.
  static size_t Hash(uint64_t key) { return absl::Hash<uint64_t>{}(key); }

  // The shard of a key whose `Hash` is `hash`: its top 32 bits scaled to
  // [0, count), which for a power of two is the top log2(count) bits.
  size_t ShardOf(size_t hash) const { return ((hash >> 32) * count_) >> 32; }

  // The most entries shard `shard` keeps.
  size_t CapacityOf(size_t shard) const {
    return capacity_ / count_ + (shard < capacity_ % count_ ? 1 : 0);
  }

 private:
  size_t capacity_;
  size_t count_;
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_SHARDING_H_
