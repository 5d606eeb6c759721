// File: paddock/internal/cache_core.h
// -----------------------------------------------------------------------------
// The state every stage of a cache's engine shares: options, policy, clock,
// shards, load slots, recorder, lifeline, executor, async waiters and the
// shared tier, and the few operations on them that every stage needs (hash a
// key, find its shard, read the clock, time a load, ask the policy for a
// lifetime, take a load slot). `paddock::Cache` holds one `CacheCore` by
// value and nothing else; the stages of a load (docs/design/engine-rooms.md)
// reach the state through it.
//
// Thread-safety of the fields, each tagged where it is declared:
// - Immutable: set by the constructor, read by any thread.
// - Synchronized: the type synchronizes itself (Shard, LoadSlots, Recorder,
//   Lifeline, AsyncWaiters, Random's per-thread streams).
// - Once: written once (constructor, std::call_once), then read only; reset by
//   the destructor, when no other thread reads it.
//
// The destructor ends the cache in this order: no tier callback runs after its
// first line; it then waits for every load (Lifeline::CloseAndWait), drops
// loads parked for another process's fill, cancels whatever still waits,
// joins the default executor (queued tasks run and find the cache closed),
// frees the shards and reclaims what it can.

#ifndef PADDOCK_INTERNAL_CACHE_CORE_H_
#define PADDOCK_INTERNAL_CACHE_CORE_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/clock.h"
#include "paddock/codec.h"
#include "paddock/completion.h"
#include "paddock/executor.h"
#include "paddock/internal/async_waiters.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet.h"
#include "paddock/internal/fleet_waits.h"
#include "paddock/internal/flight.h"
#include "paddock/internal/hash_mix.h"
#include "paddock/internal/lifeline.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/load_state.h"
#include "paddock/internal/recorder.h"
#include "paddock/internal/seed.h"
#include "paddock/internal/shard.h"
#include "paddock/internal/ticks.h"
#include "paddock/internal/time_math.h"
#include "paddock/key_hash.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/random.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// `given` when it is a `Lookup` already, else a stateless `Lookup` standing in
// for it (a transparent hash or equality in place of the default one).
template <typename Lookup, typename Given>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline const Lookup& GivenOrStateless(
    const Given& given) {
  if constexpr (std::is_same_v<Lookup, Given>) {
    return given;
  } else {
    static constexpr Lookup kStateless{};
    return kStateless;
  }
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
class CacheCore {
 public:
  using Key = K;
  using Value = V;
  using Loader = absl::AnyInvocable<absl::StatusOr<V>(const K&) const>;
  using AsyncLoader = absl::AnyInvocable<void(const K&, Completion<V>) const>;
  using Callback = absl::AnyInvocable<void(absl::StatusOr<V>) &&>;

  static constexpr bool kFixedLifetime = requires {
    requires P::kFixedLifetime;
  };
  static constexpr bool kFixedExpiry = !kFixedLifetime && requires {
    requires P::kFixedExpiry;
  };
  // A fixed lifetime, or fixed offsets but the quiet window's, let entries
  // derive their times (entry.h).
  static constexpr EntryLayout kLayout = kFixedLifetime ? EntryLayout::kFixed
                                         : kFixedExpiry
                                             ? EntryLayout::kFixedExpiry
                                             : EntryLayout::kFull;
  static constexpr bool kShareable = internal::kShareable<K, V>;
  // Loads of a key coalesce into one (the policy's choice).
  static constexpr bool kCoalesce = P::kCoalesceLoads;

  // What lookups hash and compare keys with (see lookup_hash()).
  using LookupHash = typename LookupHashOf<K, H>::type;
  using LookupEq = typename LookupEqOf<K, E>::type;
  using Entry = internal::Entry<K, V, kLayout>;
  using Outcome = internal::Outcome<V>;
  using Flight = KeyedFlight<Outcome, K>;
  using Shard = internal::Shard<K, V, Flight, H, E, kLayout>;
  using Writer = typename Shard::Writer;

  // Resolves `options` (shards, clock) and validates them and the policy.
  // Throws std::invalid_argument naming what is wrong, as the Cache
  // constructors promise; also for a shared tier with K or V the tier cannot
  // encode (no Codec). The tier subscription is the Cache's to make.
  CacheCore(Loader loader, AsyncLoader async_loader, Options options, P policy,
            H hash, E eq);
  // Blocks until every load of the cache has ended (see the file comment).
  ~CacheCore();
  CacheCore(const CacheCore&) = delete;
  CacheCore& operator=(const CacheCore&) = delete;

  template <typename Q>
  ABSL_ATTRIBUTE_ALWAYS_INLINE size_t HashOf(const Q& key) const {
    return MixedHash(lookup_hash(), key);
  }
  // What lookups hash and compare keys with: `hash` and `eq`, or in place of
  // the default ones of string keys, their transparent equivalents
  // (key_hash.h), stateless.
  ABSL_ATTRIBUTE_ALWAYS_INLINE const LookupHash& lookup_hash() const {
    return GivenOrStateless<LookupHash>(hash);
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE const LookupEq& lookup_eq() const {
    return GivenOrStateless<LookupEq>(eq);
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE Shard& ShardFor(size_t key_hash) const {
    return shards[((key_hash >> 32) * shard_count) >> 32];
  }

  // When a foreground load starts: its time on the cache's clock and, on the
  // default clock once the tick rate is known (internal/ticks.h), a tick
  // count that times it, so that neither end reads the precise clock (two
  // vDSO reads per miss were 15 % of a Zipf run's time). `nanos` is then the
  // coarse time, never ahead of the precise one, and the load ends no later
  // than the coarse time at its end (internal::CountedLoadTimes): its
  // entry's times start up to a coarse tick early, never late.
  struct LoadStart {
    int64_t nanos = 0;
    uint64_t ticks = 0;
    uint64_t tick_q32 = 0;  // Nonzero: timed by ticks at this rate.
  };
  LoadStart StartLoadClock() const {
    if (system_clock) {
      const uint64_t q32 = TickNanosQ32();
      const int64_t coarse = CoarseNowNanosIfTicking();
      if (q32 != 0 && coarse != 0) [[likely]] {
        return {coarse, Ticks(), q32};
      }
    }
    return {NowNanos()};
  }
  // The start and end of a load started at `start`, on the same clock; a
  // counted load's start is its end less its counted time.
  LoadTimes EndLoadClock(const LoadStart& start) const {
    if (start.tick_q32 == 0) return {start.nanos, NowNanos()};
    return CountedLoadTimes(
        start.nanos, TicksToNanos(start.ticks, Ticks(), start.tick_q32),
        CoarseNowNanosIfTicking(), [] { return SystemClock::NowNanos(); });
  }
  // The time of a store that times nothing (a Put): the coarse time on the
  // default clock while it ticks, so that a write makes no precise read
  // (4 % of a two-thread ReadWrite run). Like a miss's LoadStart, never
  // ahead of NowNanos(): the entry's times start up to a coarse tick early.
  int64_t StoreNowNanos() const {
    if (system_clock) {
      if (const int64_t coarse = CoarseNowNanosIfTicking(); coarse != 0)
          [[likely]] {
        return coarse;
      }
    }
    return NowNanos();
  }
  // Precise time by `Options::clock`, in nanoseconds since the Unix epoch.
  int64_t NowNanos() const {
    return system_clock ? SystemClock::NowNanos()
                        : absl::ToUnixNanos(clock->Now());
  }
  // A time never ahead of NowNanos(): the coarse clock on the default clock.
  ABSL_ATTRIBUTE_ALWAYS_INLINE int64_t HitNowNanos() const {
    return system_clock ? SystemClock::CoarseNowNanos()
                        : absl::ToUnixNanos(clock->Now());
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE static void MarkVisited(const Entry* n) {
    auto& visited = const_cast<Entry*>(n)->visited;
    if (!visited.load(std::memory_order_relaxed)) {
      visited.store(true, std::memory_order_relaxed);
    }
  }

  // What the policy is told about `n`, whose times are `t`.
  static EntryState StateOf(const Entry* n, const EntryTimes& t) {
    return {absl::FromUnixNanos(t.loaded_at), absl::FromUnixNanos(t.expires_at),
            absl::Nanoseconds(t.load_duration),
            n->refreshing.load(std::memory_order_relaxed)};
  }
  EntryState StateOf(const Entry* n) const {
    return StateOf(n, n->times(fixed_times));
  }
  // The policy's lifetime of a value that took `load_duration` to load: with
  // kFixedLifetime, the one it gave at construction (saves a call and its
  // Duration arithmetic on every store).
  Lifetime LifetimeFor(absl::Duration load_duration) const {
    if constexpr (kFixedLifetime) {
      return fixed_lifetime;
    } else {
      return policy.OnStore(options.ttl, load_duration, rng);
    }
  }

  // Whether loads ask a shared tier first.
  bool fleet() const {
    if constexpr (kShareable) {
      return tier != nullptr;
    } else {
      return false;
    }
  }
  // A load slot for a load that needs one now: waits within wait_timeout,
  // and stops once the destructor begins. 0 if none came.
  LoadSlots::Ticket AcquireSlot() {
    return slots.AcquireFor(
        options.wait_timeout, [this] { return NowNanos(); },
        [this] { return lifeline->closing(); });
  }
  // What a load gets when no slot came free within wait_timeout.
  absl::Status NoSlotError() const {
    return absl::DeadlineExceededError(
        absl::StrCat("paddock: no load slot came free within wait_timeout (",
                     absl::FormatDuration(options.wait_timeout), ")"));
  }
  // Options::executor, or the default pool, made on first use. Thread-safe.
  Executor* executor();
  // The number of entries, shard by shard (each exact when read).
  size_t Size() const {
    size_t total = 0;
    for (size_t i = 0; i < shard_count; ++i) total += shards[i].size();
    return total;
  }
  // The number of keys with a coalesced load registered, taking each shard's
  // lock briefly; 0 for a policy that does not coalesce (its loads register
  // only to see writes).
  size_t LoadsInFlight() const {
    if constexpr (!kCoalesce) {
      return 0;
    } else {
      size_t total = 0;
      for (size_t i = 0; i < shard_count; ++i) {
        Writer w(shards[i]);
        total += shards[i].live_flights();
      }
      return total;
    }
  }

  // Immutable.
  const Loader loader;
  const AsyncLoader async_loader;  // Set instead of `loader`.
  const Options options;           // Resolved: shards and clock are set.
  const P policy;
  Clock* const clock;
  const bool system_clock;  // `clock` is SystemClock: the coarse clock works.
  const int64_t max_load_age;
  const H hash;
  const E eq;
  const size_t shard_count;
  // Synchronized (each Shard; the array itself is fixed). Freed first by the
  // destructor, so not const.
  std::unique_ptr<Shard[]> shards;
  // Synchronized: per-thread streams.
  mutable Random rng;
  // Immutable. The lifetime of every value, for a policy with kFixedLifetime
  // (with kFixedExpiry: of every value but for its quiet window), and its
  // offsets in nanoseconds (what compact entries derive their times from);
  // `fixed_times_exact`: they give the times AddSaturated would for every
  // load time (all four durations finite and not negative).
  const Lifetime fixed_lifetime;
  const FixedTimes fixed_times;
  const bool fixed_times_exact;
  // Synchronized.
  LoadSlots slots;
  mutable Recorder recorder;
  // Immutable pointer; Lifeline synchronizes itself. Shared with the tasks
  // and completions that may outlive the cache.
  const std::shared_ptr<Lifeline> lifeline = std::make_shared<Lifeline>();
  // Once: the default executor, made lazily by executor().
  std::once_flag pool_once;
  std::unique_ptr<ThreadPool> pool;
  // Synchronized.
  AsyncWaiters async_waiters;
  // Immutable: the shared tier (Options::shared).
  SharedTier* const tier;
  // Once: this cache's subscription to other caches' writes, made by the
  // Cache's constructor (the subscriber calls into it); destroyed first.
  std::unique_ptr<SharedTier::Subscriber> subscriber;
  std::unique_ptr<SharedTier::Subscription> subscription;

 private:
  static Options Resolve(Options options);
  static bool FiniteAndNotNegative(const Lifetime& life);
};

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
Options CacheCore<K, V, P, H, E>::Resolve(Options options) {
  if (absl::Status s = options.Validate(); !s.ok()) {
    throw std::invalid_argument(std::string(s.message()));
  }
  if (options.shards == 0) {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    options.shards =
        static_cast<int>(std::min<unsigned>(std::bit_ceil(4 * cpus), 256));
  }
  options.shards = static_cast<int>(std::min<size_t>(
      static_cast<size_t>(options.shards), options.max_entries));
  if (options.clock == nullptr) options.clock = SystemClock::Get();
  return options;
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
bool CacheCore<K, V, P, H, E>::FiniteAndNotNegative(const Lifetime& life) {
  for (absl::Duration d : {life.quiet_for, life.expires_after, life.keep_for,
                           life.serve_on_error_for}) {
    if (d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return false;
    }
  }
  return true;
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
CacheCore<K, V, P, H, E>::CacheCore(Loader loader, AsyncLoader async_loader,
                                    Options options, P policy, H hash, E eq)
    : loader(std::move(loader)),
      async_loader(std::move(async_loader)),
      options(Resolve(std::move(options))),
      policy(std::move(policy)),
      clock(this->options.clock),
      system_clock(clock == SystemClock::Get()),
      max_load_age(ToNanosSaturated(this->options.max_load_age)),
      hash(std::move(hash)),
      eq(std::move(eq)),
      shard_count(static_cast<size_t>(this->options.shards)),
      shards(new Shard[shard_count]),
      rng(SeedOrRandom(this->options.seed),
          /*reseed_after_fork=*/this->options.seed == 0),
      fixed_lifetime(kFixedLifetime || kFixedExpiry
                         ? this->policy.OnStore(this->options.ttl,
                                                absl::ZeroDuration(), rng)
                         : Lifetime{}),
      fixed_times{.quiet = ToNanosSaturated(fixed_lifetime.quiet_for),
                  .expires = ToNanosSaturated(fixed_lifetime.expires_after),
                  .keep = ToNanosSaturated(fixed_lifetime.keep_for),
                  .serve_on_error =
                      ToNanosSaturated(fixed_lifetime.serve_on_error_for)},
      fixed_times_exact(FiniteAndNotNegative(fixed_lifetime)),
      slots(this->options.max_concurrent_loads, this->options.max_load_age),
      recorder(this->options.listener),
      tier(this->options.shared.get()) {
  if (!this->loader && !this->async_loader) {
    throw std::invalid_argument("paddock::Cache: loader must not be empty");
  }
  if constexpr (requires { this->policy.Validate(); }) {
    if (absl::Status s = this->policy.Validate(); !s.ok()) {
      throw std::invalid_argument(std::string(s.message()));
    }
  }
  if constexpr (!kShareable) {
    if (tier != nullptr) {
      throw std::invalid_argument(
          "paddock::Cache: Options::shared needs paddock::Codec<V> with "
          "Encode and Decode, and paddock::Codec<K> with Encode "
          "(paddock/codec.h), for this cache's key and value types");
    }
  }
  const size_t base = this->options.max_entries / shard_count;
  const size_t extra = this->options.max_entries % shard_count;
  for (size_t i = 0; i < shard_count; ++i) {
    shards[i].set_capacity(base + (i < extra ? 1 : 0), fixed_times);
    shards[i].set_key_eq(&this->eq);
  }
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
CacheCore<K, V, P, H, E>::~CacheCore() {
  subscription.reset();  // No tier callback runs after this.
  lifeline->CloseAndWait();
  // Loads parked for another process's fill end here, touching nothing of
  // the cache (LoadTask::Resume); their waiters are cancelled below.
  if (tier != nullptr) FleetWaits::Process().Drop(lifeline.get());
  // No load completes any more: what still waits gets Cancelled, once.
  async_waiters.CancelAll();
  pool.reset();    // Runs queued tasks, which now skip the closed cache.
  shards.reset();  // No reader can be inside: entries are freed directly.
  // Free what this cache retired, unless a reader elsewhere still holds an
  // epoch; whatever remains is freed by later retirements.
  TryReclaim();
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
Executor* CacheCore<K, V, P, H, E>::executor() {
  if (options.executor != nullptr) return options.executor;
  std::call_once(pool_once, [&] {
    const int threads = static_cast<int>(
        std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
    pool = std::make_unique<ThreadPool>(threads);
  });
  return pool.get();
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_CACHE_CORE_H_
