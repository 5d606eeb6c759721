// File: bench/micro/impl_libcuckoo.h
// -----------------------------------------------------------------------------
// `libcuckoo`: libcuckoo's `cuckoohash_map` (0.3.1, Debian's libcuckoo-dev), a
// concurrent cuckoo hash table with a spinlock per bucket stripe: a lookup
// spins on the locks of the key's two candidate buckets, a writer on the same
// two. A miss is what a user writes: `find`, then load outside any lock and
// `insert`, which keeps a value another thread stored meanwhile; concurrent
// misses of one key each call the loader. No TTL, like the hand-written maps.
//
// libcuckoo has no eviction, so the adapter bounds it the way the
// hand-written maps are bounded, a FIFO ring (`fifo_eviction.h`), split into
// `Sharding` shards under a mutex each, so that the bound adds no lock that
// every insertion contends on. Only a new key touches a ring: after an `insert`
// that added the key, its shard's ring records it and the key the ring drops is
// erased, under that shard's mutex. Hits and overwrites never take it. A key
// is in the table exactly while its shard's ring holds it, except between its
// insertion and its recording, so the table exceeds `capacity` by at most the
// number of threads inserting at that moment (none in `BM_Memory`).
//
// The table hashes with absl::Hash, as the flat_hash_map competitors do: with
// std::hash (the identity for integers) its bucket index would be the low bits
// of the workloads' keys, which are a bijection of the key's rank and so
// spread better than any hash would. It is sized for `capacity`, as a user
// would size it (libcuckoo's default reserves 2^18 slots); a cuckoo table
// cannot fill every slot, so it doubles at about 97 % full, and it keeps the
// lock array it outgrew until it is destroyed (a 64-byte spinlock per bucket,
// up to 2^16): in `BM_Memory` that old array is 16 of about 92 bytes per entry.
// Built only when CMake found libcuckoo (PADDOCK_HAVE_LIBCUCKOO).

#ifndef PADDOCK_BENCH_MICRO_IMPL_LIBCUCKOO_H_
#define PADDOCK_BENCH_MICRO_IMPL_LIBCUCKOO_H_

#if PADDOCK_HAVE_LIBCUCKOO

#include <cstddef>
#include <cstdint>
#include <libcuckoo/cuckoohash_map.hh>
#include <memory>
#include <mutex>
#include <string_view>

#include "absl/hash/hash.h"
#include "cache_adapter.h"
#include "fifo_eviction.h"
#include "sharding.h"

namespace paddock_bench {

class Libcuckoo {
 public:
  static constexpr std::string_view kName = "libcuckoo";
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = false;

  explicit Libcuckoo(const AdapterConfig& config)
      : loader_(config.loader),
        map_(config.capacity),
        sharding_(config.capacity),
        shards_(std::make_unique<EvictionShard[]>(sharding_.count())) {
    for (size_t i = 0; i < sharding_.count(); ++i) {
      shards_[i].eviction = FifoEviction(sharding_.CapacityOf(i));
    }
  }

  uint64_t Get(uint64_t key) {
    uint64_t value = 0;
    if (map_.find(key, value)) return value;
    value = loader_(key);
    if (map_.insert(key, value)) Inserted(key);
    return value;
  }

  void Put(uint64_t key, uint64_t value) {
    if (map_.insert_or_assign(key, value)) Inserted(key);
  }

  size_t size() const { return map_.size(); }

 private:
  // A line of its own, so that two shards' locks do not share a cache line.
  struct alignas(64) EvictionShard {
    std::mutex mu;
    // Guarded by mu. Sized by the constructor; a ring of 0 until then.
    FifoEviction eviction{0};
  };

  // Records `key`, just added to the table, and erases the key its shard's
  // ring drops, if any.
  void Inserted(uint64_t key) {
    EvictionShard& shard = shards_[sharding_.ShardOf(Sharding::Hash(key))];
    std::lock_guard<std::mutex> lock(shard.mu);
    if (auto victim = shard.eviction.Inserted(key)) map_.erase(*victim);
  }

  const Loader loader_;
  libcuckoo::cuckoohash_map<uint64_t, uint64_t, absl::Hash<uint64_t>> map_;
  const Sharding sharding_;
  const std::unique_ptr<EvictionShard[]> shards_;
};

}  // namespace paddock_bench

#endif  // PADDOCK_HAVE_LIBCUCKOO

#endif  // PADDOCK_BENCH_MICRO_IMPL_LIBCUCKOO_H_
