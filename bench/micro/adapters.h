// File: bench/micro/adapters.h
// -----------------------------------------------------------------------------
// The competitors, in table order. Adding a peer means one `impl_*.h` and one
// line here.

#ifndef PADDOCK_BENCH_MICRO_ADAPTERS_H_
#define PADDOCK_BENCH_MICRO_ADAPTERS_H_

#include "cache_adapter.h"
#include "impl_handrolled_singleflight.h"
#include "impl_libcuckoo.h"
#include "impl_mutex_unordered_map.h"
#include "impl_paddock.h"
#include "impl_sharded_mutex_flat_hash_map.h"
#include "impl_shared_mutex_flat_hash_map.h"
#include "impl_tbb_concurrent_lru_cache.h"
#include "impl_unsync_flat_hash_map.h"

namespace paddock_bench {

template <CacheAdapter... Adapters>
struct AdapterList {};

using AllAdapters =
    AdapterList<UnsyncFlatHashMap, MutexUnorderedMap, SharedMutexFlatHashMap,
                ShardedMutexFlatHashMap, HandrolledSingleflight,
#if PADDOCK_HAVE_TBB
                TbbConcurrentLruCache,
#endif
#if PADDOCK_HAVE_LIBCUCKOO
                Libcuckoo,
#endif
                PaddockSingleFlight, PaddockXFetch, PaddockSoftTtl,
                PaddockNaiveJitter>;

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_ADAPTERS_H_
