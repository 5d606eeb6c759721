// File: bench/micro/impl_paddock.h
// -----------------------------------------------------------------------------
// `paddock_<Policy>`: `paddock::Cache<uint64_t, uint64_t, Policy>` with its
// defaults (shards from the CPU count, SIEVE eviction, the default clock
// unless a workload needs a `ManualClock`). One adapter per policy, so the
// four appear as four columns.

#ifndef PADDOCK_BENCH_MICRO_IMPL_PADDOCK_H_
#define PADDOCK_BENCH_MICRO_IMPL_PADDOCK_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/base/attributes.h"
#include "absl/status/statusor.h"
#include "cache_adapter.h"
#include "paddock/cache.h"
#include "paddock/internal/epoch.h"  // TryReclaim, for memory accounting.
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock_bench {

template <typename Policy>
inline constexpr std::string_view kPaddockName = "paddock_unknown";
template <>
inline constexpr std::string_view kPaddockName<paddock::SingleFlight> =
    "paddock_SingleFlight";
template <>
inline constexpr std::string_view kPaddockName<paddock::XFetch> =
    "paddock_XFetch";
template <>
inline constexpr std::string_view kPaddockName<paddock::SoftTtl> =
    "paddock_SoftTtl";
template <>
inline constexpr std::string_view kPaddockName<paddock::NaiveJitter> =
    "paddock_NaiveJitter";

template <typename Policy>
class PaddockCache {
 public:
  using Cache = paddock::Cache<uint64_t, uint64_t, Policy>;

  static constexpr std::string_view kName = kPaddockName<Policy>;
  static constexpr bool kConcurrent = true;
  static constexpr bool kCoalesces = Policy::kCoalesceLoads;

  explicit PaddockCache(const AdapterConfig& config)
      : cache_([loader = config.loader](const uint64_t& key)
                   -> absl::StatusOr<uint64_t> { return loader(key); },
               paddock::Options{.ttl = config.ttl,
                                .max_entries = config.capacity,
                                .clock = config.clock}) {}

  // `value()` checks the status; the loader never fails here. Inlined, so
  // that the loop sees `Cache::Get` as a caller's code does (its hit is
  // inlined there): left to GCC, this shim stayed a call and Get's hit with
  // it, 0.3-0.5 ns a hit.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Get(uint64_t key) {
    return cache_.Get(key).value();
  }

  void Put(uint64_t key, uint64_t value) { cache_.Put(key, value); }

  size_t size() const { return cache_.size(); }

  // Frees what epoch reclamation still holds (nodes and slot arrays replaced
  // while the table grew), so that a memory measurement sees the steady
  // state. Call with no other thread inside any paddock cache.
  static void Quiesce() { paddock::internal::TryReclaim(); }

  // For the paddock-only workloads (stats).
  const Cache& cache() const { return cache_; }

 private:
  Cache cache_;
};

using PaddockSingleFlight = PaddockCache<paddock::SingleFlight>;
using PaddockXFetch = PaddockCache<paddock::XFetch>;
using PaddockSoftTtl = PaddockCache<paddock::SoftTtl>;
using PaddockNaiveJitter = PaddockCache<paddock::NaiveJitter>;

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_IMPL_PADDOCK_H_
