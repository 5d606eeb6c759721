// File: bench/micro/cache_adapter.h
// -----------------------------------------------------------------------------
// The one small interface every competitor in `paddock_micro` sits behind (the
// way Caffeine's jmh suite keeps its `cache/impl` adapters): a cache of
// `uint64_t` to `uint64_t` that loads a missing key with a `Loader`. Each
// implementation lives in its own `impl_*.h`; `adapters.h` lists them.
//
// The interface is a concept, not a virtual base: a workload is a template
// over the adapter, so a hit costs what the implementation costs and no
// indirect call is added to a 1.6 ns floor.

#ifndef PADDOCK_BENCH_MICRO_CACHE_ADAPTER_H_
#define PADDOCK_BENCH_MICRO_CACHE_ADAPTER_H_

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <thread>

#include "absl/time/time.h"
#include "paddock/clock.h"

namespace paddock_bench {

// The value every loader returns for `key`, so a workload can check a result.
constexpr uint64_t ValueFor(uint64_t key) { return key * 2 + 1; }

// Loader
//
// What every adapter calls on a miss. Copyable and cheap to call: a load
// counts itself (if `calls` is set), computes for `work` rounds (a value
// that costs CPU, as an assembled page does), and then takes `delay`, either
// in real time (a sleep, as a remote backend would) or, when `clock` is set,
// by advancing that clock, so a cache on a `ManualClock` measures a load
// duration without anyone waiting.
struct Loader {
  std::atomic<uint64_t>* calls = nullptr;
  // Rounds of a dependent multiply-xorshift chain: each waits for the one
  // before, so their time does not depend on the loop being vectorised, and
  // a sleep could not be as short (a microsecond's sleep takes tens).
  uint32_t work = 0;
  absl::Duration delay = absl::ZeroDuration();
  paddock::ManualClock* clock = nullptr;

  uint64_t operator()(uint64_t key) const {
    if (calls != nullptr) calls->fetch_add(1, std::memory_order_relaxed);
    if (work != 0) {
      uint64_t x = key;
      for (uint32_t i = 0; i < work; ++i) {
        x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15;
      }
      // An empty use of the result, so that the chain is not dead code.
      asm volatile("" : : "r"(x));
    }
    if (delay > absl::ZeroDuration()) {
      if (clock != nullptr) {
        clock->Advance(delay);
      } else {
        std::this_thread::sleep_for(absl::ToChronoNanoseconds(delay));
      }
    }
    return ValueFor(key);
  }
};

// How a workload configures an adapter. Adapters ignore what they cannot
// express (the hand-written maps and TBB have no TTL; only paddock reads a
// clock).
struct AdapterConfig {
  // The most entries kept; every adapter evicts beyond it.
  size_t capacity = 65536;
  // How long a loaded value is fresh.
  absl::Duration ttl = absl::Hours(1);
  Loader loader = {};
  // paddock only: the time source; nullptr is paddock's default clock.
  paddock::Clock* clock = nullptr;
};

// CacheAdapter
//
//  - `C::kName`: the tag in benchmark names and table columns.
//  - `C::kConcurrent`: `Get` and `Put` may be called from several threads.
//  - `C::kCoalesces`: concurrent misses of one key share one loader call.
//  - `C(config)`; `c.Get(key)` returns the stored value or loads it.
template <typename C>
concept CacheAdapter = std::constructible_from<C, const AdapterConfig&> &&
    requires(C& c, uint64_t key) {
  { C::kName } -> std::convertible_to<std::string_view>;
  { C::kConcurrent } -> std::convertible_to<bool>;
  { C::kCoalesces } -> std::convertible_to<bool>;
  { c.Get(key) } -> std::same_as<uint64_t>;
};

// An adapter that can also store a value without loading it.
template <typename C>
concept WritableCacheAdapter = CacheAdapter<C> &&
    requires(C& c, uint64_t key, uint64_t value) {
  c.Put(key, value);
};

// An adapter that can say how many entries it holds.
template <typename C>
concept SizedCacheAdapter = CacheAdapter<C> && requires(const C& c) {
  { c.size() } -> std::convertible_to<size_t>;
};

// An adapter that defers freeing memory and can be told to catch up.
template <typename C>
concept QuiescentCacheAdapter = CacheAdapter<C> && requires {
  C::Quiesce();
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_CACHE_ADAPTER_H_
