// File: paddock/cache.h
// -----------------------------------------------------------------------------
// `paddock::Cache<K, V, Policy>` keeps values produced by a loader and makes
// sure that, per key, at most one load runs at a time, whatever the number of
// callers (unless the policy asks otherwise). The refresh policy decides when
// a stored value is served, served while refreshed in the background, or
// reloaded.
//
//   paddock::Cache<std::string, Page, paddock::SingleFlight> cache(
//       [](const std::string& key) -> absl::StatusOr<Page> {
//         return LoadPageFromDb(key);
//       },
//       paddock::Options{.ttl = absl::Seconds(10)});
//   absl::StatusOr<Page> page = cache.Get("member:page:0:size:10");
//
// Structure (docs/design.md): keys hash to shards. Each shard has a lock-free
// table of immutable entries (readers never lock), a mutex for writers, an
// eviction queue and the map of loads in flight. A hit reads one entry under
// an epoch guard and writes nothing shared.
//
// Lifetime of values: an entry that is replaced, evicted or invalidated is
// destroyed once no reader can still see it (epoch-based reclamation), never
// under a cache lock, on a thread that later calls into a paddock cache or
// at the exit of the thread that removed it, which may hold back up to 15
// removed entries until then. Values must therefore not refer to anything
// that dies before the last paddock-using thread exits (own it, or share it).

#ifndef PADDOCK_CACHE_H_
#define PADDOCK_CACHE_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/expiry_heap.h"
#include "paddock/internal/flight.h"
#include "paddock/internal/load_slots.h"
#include "paddock/internal/load_stack.h"
#include "paddock/internal/node_table.h"
#include "paddock/internal/per_thread_counters.h"
#include "paddock/internal/seed.h"
#include "paddock/internal/sieve.h"
#include "paddock/internal/time_math.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace paddock {

template <typename K, typename V, typename Policy = SoftTtl,
          typename Hash = absl::Hash<K>, typename Eq = std::equal_to<K>>
requires RefreshPolicy<Policy>
class Cache {
 public:
  // Produces the value for a key, or an error. Called concurrently for
  // different keys (and for one key when the policy does not coalesce), so
  // it must be thread-safe. May throw: the exception becomes an
  // `absl::InternalError` for every caller of that load.
  using Loader = absl::AnyInvocable<absl::StatusOr<V>(const K&) const>;

  // Throws `std::invalid_argument` naming the field and the value if
  // `options` or `policy` is invalid (see `Options::Validate()`), or if
  // `loader` is empty.
  explicit Cache(Loader loader, Options options = {}, Policy policy = {});

  // Blocks until background loads of this cache that are running have
  // returned; queued ones are dropped without calling the loader. After it
  // returns the loader is never called again. Stored values are destroyed
  // here; removed ones awaiting reclamation may outlive it (see above). Must
  // not be called from inside this cache's loader, nor while another thread
  // is inside a method.
  ~Cache();

  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // Cache::Get()
  //
  // Returns the value for `key`. A servable value returns at once without
  // calling the loader (a stale one may start one background refresh, as the
  // policy decides). Otherwise, with a coalescing policy, at most one caller
  // runs the loader, on its own thread; the others wait for its result for at
  // most `Options::wait_timeout`, then receive a value the policy still keeps
  // or `absl::DeadlineExceededError` (the load carries on and its result is
  // stored). Errors:
  //  - the loader's error, passed to every caller of that load and cached
  //    only for `Options::error_ttl`; a stale value instead while the policy
  //    allows stale-if-error;
  //  - `absl::InternalError` with the exception's `what()` if the loader
  //    threw;
  //  - `absl::FailedPreconditionError` if called by the loader for the key it
  //    is loading (the call would wait for itself);
  //  - `absl::DeadlineExceededError` if no load slot
  //    (`Options::max_concurrent_loads`) came free within `wait_timeout`.
  //
  // Thread-safe. Never holds an internal lock while the loader runs. A hit
  // takes no lock and writes no memory another thread writes.
  absl::StatusOr<V> Get(const K& key);

  // Cache::GetIfPresent()
  //
  // Returns the value `Get` would return at once without loading (fresh, or
  // stale while the policy serves it), or nullopt. Never loads, never waits,
  // starts no refresh. Thread-safe, lock-free.
  std::optional<V> GetIfPresent(const K& key) const;

  // Cache::Put()
  //
  // Stores `value` for `key` as if it had just been loaded. A load of `key`
  // in flight still answers its waiters but no longer stores its result.
  // May evict an entry. Thread-safe; takes the key's shard lock briefly.
  void Put(const K& key, V value);

  // Cache::Invalidate()
  //
  // Removes `key`. A load of `key` in flight still answers its waiters but
  // no longer stores its result; the next `Get` loads anew. Thread-safe.
  void Invalidate(const K& key);

  // Cache::InvalidateAll()
  //
  // `Invalidate` for every key, one shard at a time. Thread-safe.
  void InvalidateAll();

  // Cache::size()
  //
  // Returns the number of entries (values and cached errors), at most
  // `Options::max_entries`. Thread-safe; a snapshot.
  size_t size() const;

  // Cache::stats()
  //
  // Returns the counters. Thread-safe; each field exact, fields not taken at
  // one instant.
  Stats stats() const;

  // Cache::loads_in_flight()
  //
  // Returns the number of keys with a coalesced load (foreground or
  // refresh) registered now; 0 whenever no such load runs. Thread-safe; takes
  // each shard lock briefly.
  size_t loads_in_flight() const;

  // Returns the options in effect, with `shards` and `clock` resolved.
  const Options& options() const { return options_; }

 private:
  struct Node {
    Node(size_t hash, const K& key) : hash(hash), key(key) {}

    // Read by lookups without a lock; never changes after publication.
    const size_t hash;
    int64_t quiet_until = std::numeric_limits<int64_t>::min();
    const K key;
    std::optional<V> value;  // Empty in a cached error.
    absl::Status error;      // Non-OK while `error_until` is ahead.
    int64_t loaded_at = 0;
    int64_t expires_at = 0;
    int64_t keep_until = 0;
    int64_t on_error_until = 0;
    int64_t error_until = std::numeric_limits<int64_t>::min();
    int64_t load_duration = 0;

    // Written by lookups, one-way and only when it changes.
    std::atomic<bool> visited{false};
    std::atomic<bool> refreshing{false};

    // Guarded by the shard's mutex. `heap_index` shares a word with the
    // flags above, which keeps a node of uint64_t key and value in a 128-byte
    // malloc chunk rather than a 144-byte one.
    uint32_t heap_index = 0;
    Node* older = nullptr;
    Node* newer = nullptr;
  };

  // One load's result, shared by its waiters.
  struct Outcome {
    absl::StatusOr<V> value;
    bool stale = false;           // A stale value standing in for a failure.
    int64_t stale_loaded_at = 0;  // When that stale value was loaded.
  };

  using Flight = internal::Flight<Outcome>;

  struct alignas(64) Shard {
    std::mutex mu;
    internal::NodeTable<Node> table;
    // Guarded by mu:
    internal::Sieve<Node> sieve;
    internal::ExpiryHeap<Node> expiry;
    absl::flat_hash_map<K, std::shared_ptr<Flight>, Hash, Eq> in_flight;
    size_t capacity = 0;
    // Bumped by Put and Invalidate; an uncoalesced load stores its result
    // only if it did not change meanwhile.
    uint64_t writes = 0;
    std::atomic<size_t> size{0};
  };

  // Tracks background tasks so the destructor can wait for them.
  struct Lifeline {
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false;  // Guarded by mu.
    int running = 0;      // Guarded by mu.

    bool Enter() {
      std::lock_guard<std::mutex> lock(mu);
      if (closed) return false;
      ++running;
      return true;
    }
    void Exit() {
      {
        std::lock_guard<std::mutex> lock(mu);
        --running;
      }
      cv.notify_all();
    }
    void CloseAndWait() {
      std::unique_lock<std::mutex> lock(mu);
      closed = true;
      cv.wait(lock, [&] { return running == 0; });
    }
  };

  // A scheduled background refresh. If destroyed without running (an
  // executor that drops tasks), it releases its slot and ends its flight.
  class RefreshTask {
   public:
    RefreshTask(Cache* cache, K key, size_t hash,
                std::shared_ptr<Flight> flight,
                internal::LoadSlots::Ticket slot)
        : cache_(cache),
          lifeline_(cache->lifeline_),
          key_(std::move(key)),
          hash_(hash),
          flight_(std::move(flight)),
          slot_(slot) {}
    RefreshTask(RefreshTask&& other) noexcept
        : cache_(std::exchange(other.cache_, nullptr)),
          lifeline_(std::move(other.lifeline_)),
          key_(std::move(other.key_)),
          hash_(other.hash_),
          flight_(std::move(other.flight_)),
          slot_(other.slot_) {}
    RefreshTask& operator=(RefreshTask&&) = delete;
    ~RefreshTask() {
      if (cache_ != nullptr) Finish(/*run=*/false);
    }
    void operator()() && { Finish(/*run=*/true); }

   private:
    void Finish(bool run) {
      Cache* cache = std::exchange(cache_, nullptr);
      if (!lifeline_->Enter()) {
        // The cache is gone; tell anyone still holding the flight.
        flight_->Publish(
            {absl::CancelledError("paddock: cache destroyed"), false});
        return;
      }
      if (run) {
        cache->RunLoad(key_, hash_, flight_, LoadKind::kRefresh, 0, slot_)
            .IgnoreError();
      } else {
        cache->slots_.Release(slot_);
        cache->Finish(key_, hash_, flight_, 0, LoadKind::kRefresh,
                      absl::CancelledError("paddock: refresh task dropped"),
                      /*loader_ran=*/false, cache->NowNanos(),
                      cache->NowNanos());
      }
      lifeline_->Exit();
    }

    Cache* cache_;
    std::shared_ptr<Lifeline> lifeline_;
    K key_;
    size_t hash_;
    std::shared_ptr<Flight> flight_;
    internal::LoadSlots::Ticket slot_;
  };

  // Counters on the hit path, one line per thread.
  enum HotCounter { kHits, kStaleHits, kHotCounters };

  // Counters off the hit path.
  struct ColdCounters {
    std::atomic<uint64_t> misses{0}, loads{0}, load_failures{0},
        coalesced_waits{0}, refreshes{0}, wait_timeouts{0}, evictions{0},
        negative_hits{0}, stale_fallbacks{0}, refreshes_skipped{0};
    std::atomic<int64_t> load_nanos{0};
  };

  // What a stored entry answers, decided without a lock.
  struct Answer {
    std::optional<absl::StatusOr<V>> result;  // Empty: a load is needed.
    bool refresh = false;  // Start a background refresh of this node.
  };

  // Retires nodes after the shard lock is released (destructors of V run
  // outside our locks). Declare before the lock.
  class DeferredRetire {
   public:
    DeferredRetire() = default;  // Allocates only past two nodes.
    DeferredRetire(const DeferredRetire&) = delete;
    DeferredRetire& operator=(const DeferredRetire&) = delete;
    ~DeferredRetire() {
      for (Node* n : nodes_) internal::RetireObject(n);
    }
    void Add(Node* n) { nodes_.push_back(n); }

   private:
    absl::InlinedVector<Node*, 2> nodes_;
  };

  static Options Resolve(Options options);

  ABSL_ATTRIBUTE_ALWAYS_INLINE Shard& ShardFor(size_t hash) const {
    return shards_[((hash >> 32) * shard_count_) >> 32];
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE Node* FindIn(const Shard& shard, size_t hash,
                                            const K& key) const {
    return shard.table.Find(hash,
                            [&](const Node* n) { return eq_(n->key, key); });
  }
  // Precise time by `Options::clock`, in nanoseconds since the Unix epoch.
  int64_t NowNanos() const {
    return system_clock_ ? SystemClock::NowNanos()
                         : absl::ToUnixNanos(clock_->Now());
  }
  // A time never ahead of NowNanos(): the coarse clock on the default clock.
  ABSL_ATTRIBUTE_ALWAYS_INLINE int64_t HitNowNanos() const {
    return system_clock_ ? SystemClock::CoarseNowNanos()
                         : absl::ToUnixNanos(clock_->Now());
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE static void MarkVisited(Node* n) {
    if (!n->visited.load(std::memory_order_relaxed)) {
      n->visited.store(true, std::memory_order_relaxed);
    }
  }
  EntryState StateOf(const Node* n) const {
    return {absl::FromUnixNanos(n->loaded_at),
            absl::FromUnixNanos(n->expires_at),
            absl::Nanoseconds(n->load_duration),
            n->refreshing.load(std::memory_order_relaxed)};
  }

  // Get() past the hit path: entries outside their quiet window, misses.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<V> GetUnquiet(Shard& shard,
                                                       const K& key,
                                                       size_t hash);
  Answer Examine(Node* n, int64_t now, bool count);
  absl::StatusOr<V> GetSlow(Shard& shard, const K& key, size_t hash);
  absl::StatusOr<V> Wait(const std::shared_ptr<Flight>& flight, Shard& shard,
                         const K& key, size_t hash);
  void StartRefresh(Shard& shard, const K& key, size_t hash, Node* n);
  absl::StatusOr<V> RunLoad(const K& key, size_t hash,
                            const std::shared_ptr<Flight>& flight,
                            LoadKind kind, uint64_t writes_seen,
                            internal::LoadSlots::Ticket slot);
  absl::StatusOr<V> CallLoader(const K& key);
  Outcome Finish(const K& key, size_t hash,
                 const std::shared_ptr<Flight>& flight, uint64_t writes_seen,
                 LoadKind kind, absl::StatusOr<V> result, bool loader_ran,
                 int64_t started, int64_t finished);
  // A node for `value` loaded (or put) at `now`, its lifetime set by the
  // policy. Needs no lock.
  std::unique_ptr<Node> NewNode(const K& key, size_t hash, V value,
                                int64_t load_duration, int64_t now);
  // Stores `n` in place of `previous` (may be null); returns evictions.
  int Store(Shard& shard, Node* previous, Node* n, int64_t now,
            DeferredRetire& retire);
  void Unlink(Shard& shard, Node* n, DeferredRetire& retire);
  // Records `evicted` evictions in stats and the listener; call unlocked.
  void CountEvictions(int evicted);
  Executor* executor();
  // A load's outcome as a caller's result; counts a stale fallback.
  absl::StatusOr<V> Serve(Outcome outcome);
  void ServeStale(const Node* n, int64_t now);

  Loader loader_;
  const Options options_;
  const Policy policy_;
  Clock* const clock_;
  const bool system_clock_;
  const Hash hash_{};
  const Eq eq_{};
  const size_t shard_count_;
  const std::unique_ptr<Shard[]> shards_;
  mutable Random rng_;
  internal::LoadSlots slots_;
  mutable internal::PerThreadCounters<kHotCounters> hot_;
  ColdCounters cold_;
  std::shared_ptr<Lifeline> lifeline_ = std::make_shared<Lifeline>();
  std::once_flag pool_once_;
  std::unique_ptr<ThreadPool> pool_;  // The default executor, made lazily.
};

// ---------------------------------------------------------------------------
// Implementation.

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> Options
Cache<K, V, P, H, E>::Resolve(Options options) {
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

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> Cache<K, V, P, H, E>::Cache(Loader loader,
                                                      Options options, P policy)
    : loader_(std::move(loader)),
      options_(Resolve(options)),
      policy_(std::move(policy)),
      clock_(options_.clock),
      system_clock_(clock_ == SystemClock::Get()),
      shard_count_(static_cast<size_t>(options_.shards)),
      shards_(new Shard[shard_count_]),
      rng_(internal::SeedOrRandom(options_.seed)),
      slots_(options_.max_concurrent_loads, options_.max_load_age) {
  if (!loader_) {
    throw std::invalid_argument("paddock::Cache: loader must not be empty");
  }
  if constexpr (requires { policy_.Validate(); }) {
    if (absl::Status s = policy_.Validate(); !s.ok()) {
      throw std::invalid_argument(std::string(s.message()));
    }
  }
  const size_t base = options_.max_entries / shard_count_;
  const size_t extra = options_.max_entries % shard_count_;
  for (size_t i = 0; i < shard_count_; ++i) {
    shards_[i].capacity = base + (i < extra ? 1 : 0);
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> Cache<K, V, P, H, E>::~Cache() {
  lifeline_->CloseAndWait();
  pool_.reset();  // Runs queued tasks, which now skip the closed cache.
  for (size_t i = 0; i < shard_count_; ++i) {
    // No reader can be inside: free directly.
    shards_[i].table.ForEach([](Node* n) { delete n; });
  }
  // Free what this cache retired, unless a reader elsewhere still holds an
  // epoch; whatever remains is freed by later retirements.
  internal::TryReclaim();
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::Get(
    const K& key) {
  const size_t hash = hash_(key);
  Shard& shard = ShardFor(hash);
  internal::ThreadRecord* const record = internal::CurrentThreadRecord();
  {
    internal::EpochGuard guard(record);
    Node* node = FindIn(shard, hash, key);
    if (node != nullptr && HitNowNanos() < node->quiet_until) [[likely]] {
      MarkVisited(node);
      hot_.Increment(record, kHits);
      return *node->value;
    }
  }
  return GetUnquiet(shard, key, hash);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::GetUnquiet(
    Shard& shard, const K& key, size_t hash) {
  Answer answer;
  Node* node;
  {
    internal::EpochGuard guard;
    node = FindIn(shard, hash, key);
    if (node != nullptr) {
      answer = Examine(node, NowNanos(), /*count=*/true);
      if (answer.result.has_value() && !answer.refresh) {
        return *std::move(answer.result);
      }
    }
  }
  if (answer.result.has_value()) {
    // `node` may be retired by now; StartRefresh only compares its address
    // under the shard lock.
    StartRefresh(shard, key, hash, node);
    return *std::move(answer.result);
  }
  return GetSlow(shard, key, hash);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
typename Cache<K, V, P, H, E>::Answer Cache<K, V, P, H, E>::Examine(
    Node* n, int64_t now, bool count) {
  if (n->value.has_value() && now < n->keep_until) {
    const Decision d =
        now < n->quiet_until
            ? Decision::kServe
            : policy_.Decide(StateOf(n), absl::FromUnixNanos(now), rng_);
    if (d != Decision::kLoad) {
      MarkVisited(n);
      const bool refresh = d == Decision::kServeAndRefresh &&
                           now >= n->error_until &&
                           !n->refreshing.load(std::memory_order_relaxed) &&
                           !n->refreshing.exchange(true);
      if (count) {
        if (now < n->expires_at) {
          hot_.Increment(internal::CurrentThreadRecord(), kHits);
        } else {
          hot_.Increment(internal::CurrentThreadRecord(), kStaleHits);
          if (options_.listener != nullptr) {
            options_.listener->OnStaleServed(
                absl::Nanoseconds(now - n->loaded_at));
          }
        }
      }
      return {*n->value, refresh};
    }
  }
  if (now < n->error_until) {
    // A recent failure is remembered: no loader call until it passes.
    if (n->value.has_value() && now < n->on_error_until) {
      if (count) ServeStale(n, now);
      return {*n->value, false};
    }
    if (count) cold_.negative_hits.fetch_add(1, std::memory_order_relaxed);
    return {absl::StatusOr<V>(n->error), false};
  }
  return {};
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::ServeStale(const Node* n, int64_t now) {
  cold_.stale_fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (options_.listener != nullptr) {
    options_.listener->OnStaleServed(absl::Nanoseconds(now - n->loaded_at));
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::GetSlow(
    Shard& shard, const K& key, size_t hash) {
  if (internal::IsLoadingOnThisThread(this, hash, key, eq_)) {
    return absl::FailedPreconditionError(
        "paddock: the loader called Get for the key it is loading");
  }
  std::shared_ptr<Flight> flight;
  bool leader = false;
  uint64_t writes_seen = 0;
  Answer answer;
  Node* node = nullptr;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const int64_t now = NowNanos();
    // Re-check: a load may have stored the value since the lock-free look.
    node = FindIn(shard, hash, key);
    if (node != nullptr) answer = Examine(node, now, /*count=*/true);
    if (!answer.result.has_value()) {
      cold_.misses.fetch_add(1, std::memory_order_relaxed);
      if constexpr (P::kCoalesceLoads) {
        auto it = shard.in_flight.find(key);
        if (it != shard.in_flight.end() &&
            now - it->second->started_at() <
                internal::ToNanosSaturated(options_.max_load_age)) {
          flight = it->second;
          flight->Join();
        } else {
          // None in flight, or the one in flight is too old to wait for: it
          // keeps running but will no longer store its result.
          flight = std::make_shared<Flight>(now);
          shard.in_flight.insert_or_assign(key, flight);
          leader = true;
        }
      } else {
        leader = true;
        writes_seen = shard.writes;
      }
    }
  }
  if (answer.result.has_value()) {
    if (answer.refresh) StartRefresh(shard, key, hash, node);
    return *std::move(answer.result);
  }
  if (!leader) {
    cold_.coalesced_waits.fetch_add(1, std::memory_order_relaxed);
    if (options_.listener != nullptr) options_.listener->OnCoalescedWait();
    return Wait(flight, shard, key, hash);
  }
  const internal::LoadSlots::Ticket slot =
      slots_.AcquireFor(options_.wait_timeout, [this] { return NowNanos(); });
  if (slot == 0) {
    const int64_t now = NowNanos();
    return Serve(Finish(key, hash, flight, writes_seen, LoadKind::kForeground,
                        absl::DeadlineExceededError(absl::StrCat(
                            "paddock: no load slot came free within "
                            "wait_timeout (",
                            absl::FormatDuration(options_.wait_timeout), ")")),
                        /*loader_ran=*/false, now, now));
  }
  return RunLoad(key, hash, flight, LoadKind::kForeground, writes_seen, slot);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::Wait(
    const std::shared_ptr<Flight>& flight, Shard& shard, const K& key,
    size_t hash) {
  if (const Outcome* outcome = flight->WaitFor(options_.wait_timeout);
      outcome != nullptr) {
    return Serve(*outcome);
  }

  cold_.wait_timeouts.fetch_add(1, std::memory_order_relaxed);
  if (options_.listener != nullptr) options_.listener->OnWaitTimeout();
  {
    internal::EpochGuard guard;
    const int64_t now = NowNanos();
    Node* n = FindIn(shard, hash, key);
    if (n != nullptr && n->value.has_value() && now < n->keep_until) {
      ServeStale(n, now);
      return *n->value;
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("paddock: the load of this key did not finish within "
                   "wait_timeout (",
                   absl::FormatDuration(options_.wait_timeout), ")"));
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::Serve(
    Outcome outcome) {
  if (outcome.stale) {
    cold_.stale_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (options_.listener != nullptr) {
      options_.listener->OnStaleServed(
          absl::Nanoseconds(NowNanos() - outcome.stale_loaded_at));
    }
  }
  return std::move(outcome.value);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::StartRefresh(Shard& shard, const K& key, size_t hash,
                                        Node* n) {
  std::shared_ptr<Flight> flight;
  internal::LoadSlots::Ticket slot;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    // Compared by address only: `n` may have been replaced and retired.
    if (FindIn(shard, hash, key) != n) return;
    const int64_t now = NowNanos();
    auto it = shard.in_flight.find(key);
    if (it != shard.in_flight.end() &&
        now - it->second->started_at() <
            internal::ToNanosSaturated(options_.max_load_age)) {
      return;  // One load per key; it replaces `n` when it stores.
    }
    slot = slots_.TryAcquire(now);
    if (slot == 0) {
      n->refreshing.store(false, std::memory_order_relaxed);
      cold_.refreshes_skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    flight = std::make_shared<Flight>(now);
    shard.in_flight.insert_or_assign(key, flight);
    cold_.refreshes.fetch_add(1, std::memory_order_relaxed);
  }
  // Outside the lock: an executor may run the task inline.
  executor()->Schedule(RefreshTask(this, key, hash, std::move(flight), slot));
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> Executor* Cache<K, V, P, H, E>::executor() {
  if (options_.executor != nullptr) return options_.executor;
  std::call_once(pool_once_, [&] {
    const int threads = static_cast<int>(
        std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
    pool_ = std::make_unique<ThreadPool>(threads);
  });
  return pool_.get();
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::CallLoader(
    const K& key) {
  try {
    return loader_(key);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("paddock: the loader threw: ", e.what()));
  } catch (...) {
    return absl::InternalError(
        "paddock: the loader threw an exception that is not a "
        "std::exception");
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> absl::StatusOr<V> Cache<K, V, P, H, E>::RunLoad(
    const K& key, size_t hash, const std::shared_ptr<Flight>& flight,
    LoadKind kind, uint64_t writes_seen, internal::LoadSlots::Ticket slot) {
  cold_.loads.fetch_add(1, std::memory_order_relaxed);
  Listener* const listener = options_.listener;
  if (listener != nullptr) listener->OnLoadStart(kind);
  const int64_t started = NowNanos();
  absl::StatusOr<V> result;
  {
    internal::LoadScope scope(this, hash, &key);
    result = CallLoader(key);
  }
  const int64_t finished = NowNanos();
  slots_.Release(slot);
  cold_.load_nanos.fetch_add(finished - started, std::memory_order_relaxed);
  if (!result.ok()) {
    cold_.load_failures.fetch_add(1, std::memory_order_relaxed);
  }
  if (listener != nullptr) {
    listener->OnLoadFinish(kind, absl::Nanoseconds(finished - started),
                           result.status());
  }
  Outcome outcome =
      Finish(key, hash, flight, writes_seen, kind, std::move(result),
             /*loader_ran=*/true, started, finished);
  if (kind == LoadKind::kRefresh) return std::move(outcome.value);
  return Serve(std::move(outcome));
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
typename Cache<K, V, P, H, E>::Outcome Cache<K, V, P, H, E>::Finish(
    const K& key, size_t hash, const std::shared_ptr<Flight>& flight,
    uint64_t writes_seen, LoadKind kind, absl::StatusOr<V> result,
    bool loader_ran, int64_t started, int64_t finished) {
  Shard& shard = ShardFor(hash);
  Outcome outcome{std::move(result), false};
  // Built before the lock, so the shard is not held across an allocation
  // and a copy of V; dropped after it if this load no longer owns the key.
  std::unique_ptr<Node> fresh;
  if (outcome.value.ok()) {
    fresh = NewNode(key, hash, *outcome.value, finished - started, finished);
  }
  int evicted = 0;
  // Whether anyone joined this load and waits for its outcome. Final once
  // the flight has left `in_flight`, which happens under the lock below.
  bool publish = false;
  {
    DeferredRetire retire;
    std::lock_guard<std::mutex> lock(shard.mu);
    // Store only if no Put, Invalidate or newer load superseded this one.
    bool own;
    if (flight != nullptr) {
      auto it = shard.in_flight.find(key);
      own = it != shard.in_flight.end() && it->second == flight;
      if (own) shard.in_flight.erase(it);
      publish = flight->joined() > 0;
    } else {
      own = shard.writes == writes_seen;
    }
    Node* current = FindIn(shard, hash, key);
    if (outcome.value.ok()) {
      if (own) {
        evicted = Store(shard, current, fresh.release(), finished, retire);
      }
    } else {
      const bool has_value = current != nullptr && current->value.has_value();
      // Callers of this load get the stale value instead of the error.
      const bool fallback = has_value && finished < current->on_error_until;
      // A failed refresh never takes away the value it was refreshing.
      const bool keep_value =
          fallback || (has_value && kind == LoadKind::kRefresh);
      const bool remember =
          own && loader_ran && options_.error_ttl > absl::ZeroDuration();
      if (remember) {
        // Negative caching: no loader call for this key until error_until.
        auto* n = new Node(hash, key);
        if (keep_value) {
          n->value = current->value;
          n->quiet_until = current->quiet_until;
          n->loaded_at = current->loaded_at;
          n->expires_at = current->expires_at;
          n->keep_until = current->keep_until;
          n->on_error_until = current->on_error_until;
          n->load_duration = current->load_duration;
        } else {
          n->loaded_at = finished;
          n->expires_at = std::numeric_limits<int64_t>::min();
          n->load_duration = finished - started;
          n->keep_until = internal::AddSaturated(finished, options_.error_ttl);
        }
        n->error = outcome.value.status();
        n->error_until = internal::AddSaturated(finished, options_.error_ttl);
        evicted = Store(shard, current, n, finished, retire);
      } else if (own && current != nullptr) {
        // Eligible for the next refresh: never wedged by one failure.
        current->refreshing.store(false, std::memory_order_relaxed);
      }
      if (fallback) outcome = {*current->value, true, current->loaded_at};
    }
  }
  CountEvictions(evicted);
  if (publish) flight->Publish(outcome);
  return outcome;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> std::unique_ptr<typename Cache<K, V, P, H, E>::Node>
Cache<K, V, P, H, E>::NewNode(const K& key, size_t hash, V value,
                              int64_t load_duration, int64_t now) {
  const Lifetime life =
      policy_.OnStore(options_.ttl, absl::Nanoseconds(load_duration), rng_);
  auto n = std::make_unique<Node>(hash, key);
  n->value.emplace(std::move(value));
  n->loaded_at = now;
  n->load_duration = load_duration;
  n->quiet_until = internal::AddSaturated(now, life.quiet_for);
  n->expires_at = internal::AddSaturated(now, life.expires_after);
  n->keep_until = internal::AddSaturated(now, life.keep_for);
  n->on_error_until = internal::AddSaturated(now, life.serve_on_error_for);
  return n;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
int Cache<K, V, P, H, E>::Store(Shard& shard, Node* previous, Node* n,
                                int64_t now, DeferredRetire& retire) {
  if (previous != nullptr) {
    shard.table.Replace(previous, n);
    shard.sieve.Replace(previous, n);
    shard.expiry.Replace(previous, n);
    retire.Add(previous);
    return 0;
  }
  int evicted = 0;
  while (shard.table.size() >= shard.capacity) {
    Node* victim = shard.expiry.Top();
    if (victim == nullptr) break;
    if (victim->expires_at > now) victim = shard.sieve.Victim();
    Unlink(shard, victim, retire);
    ++evicted;
  }
  shard.table.Insert(n);
  shard.sieve.Push(n);
  shard.expiry.Push(n);
  shard.size.store(shard.table.size(), std::memory_order_relaxed);
  return evicted;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::CountEvictions(int evicted) {
  if (evicted == 0) return;
  cold_.evictions.fetch_add(evicted, std::memory_order_relaxed);
  if (options_.listener != nullptr) {
    for (int i = 0; i < evicted; ++i) options_.listener->OnEviction();
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::Unlink(Shard& shard, Node* n,
                                  DeferredRetire& retire) {
  shard.table.Erase(n);
  shard.sieve.Remove(n);
  shard.expiry.Remove(n);
  shard.size.store(shard.table.size(), std::memory_order_relaxed);
  retire.Add(n);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> std::optional<V> Cache<K, V, P, H, E>::GetIfPresent(
    const K& key)
const {
  const size_t hash = hash_(key);
  internal::EpochGuard guard;
  Node* n = FindIn(ShardFor(hash), hash, key);
  if (n == nullptr || !n->value.has_value()) return std::nullopt;
  const int64_t now = NowNanos();
  if (now < n->keep_until &&
      (now < n->quiet_until ||
       policy_.Decide(StateOf(n), absl::FromUnixNanos(now), rng_) !=
           Decision::kLoad)) {
    MarkVisited(n);
    return *n->value;
  }
  if (now < n->error_until && now < n->on_error_until) return *n->value;
  return std::nullopt;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::Put(const K& key, V value) {
  const size_t hash = hash_(key);
  Shard& shard = ShardFor(hash);
  // The node is built before the lock. It inherits the last load's duration
  // (XFetch's Δ), read without the lock: a load finishing meanwhile only
  // makes that estimate one load older.
  int64_t load_duration = 0;
  {
    internal::EpochGuard guard;
    if (const Node* n = FindIn(shard, hash, key); n != nullptr) {
      load_duration = n->load_duration;
    }
  }
  const int64_t now = NowNanos();
  std::unique_ptr<Node> fresh =
      NewNode(key, hash, std::move(value), load_duration, now);
  int evicted;
  {
    DeferredRetire retire;
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.in_flight.erase(key);  // Its result must not overwrite this value.
    ++shard.writes;
    Node* current = FindIn(shard, hash, key);
    evicted = Store(shard, current, fresh.release(), now, retire);
  }
  CountEvictions(evicted);
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::Invalidate(const K& key) {
  const size_t hash = hash_(key);
  Shard& shard = ShardFor(hash);
  DeferredRetire retire;
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.in_flight.erase(key);
  ++shard.writes;
  if (Node* n = FindIn(shard, hash, key); n != nullptr) {
    Unlink(shard, n, retire);
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P>
void Cache<K, V, P, H, E>::InvalidateAll() {
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& shard = shards_[i];
    DeferredRetire retire;
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.in_flight.clear();
    ++shard.writes;
    std::vector<Node*> nodes;
    shard.table.ForEach([&](Node* n) { nodes.push_back(n); });
    for (Node* n : nodes) Unlink(shard, n, retire);
  }
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> size_t Cache<K, V, P, H, E>::size()
const {
  size_t total = 0;
  for (size_t i = 0; i < shard_count_; ++i) {
    total += shards_[i].size.load(std::memory_order_relaxed);
  }
  return total;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> size_t Cache<K, V, P, H, E>::loads_in_flight()
const {
  size_t total = 0;
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard<std::mutex> lock(shards_[i].mu);
    total += shards_[i].in_flight.size();
  }
  return total;
}

template <typename K, typename V, typename P, typename H, typename E>
requires RefreshPolicy<P> Stats Cache<K, V, P, H, E>::stats()
const {
  auto get = [](const std::atomic<uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  Stats s;
  s.hits = hot_.Sum(kHits);
  s.stale_hits = hot_.Sum(kStaleHits);
  s.misses = get(cold_.misses);
  s.loads = get(cold_.loads);
  s.load_failures = get(cold_.load_failures);
  s.coalesced_waits = get(cold_.coalesced_waits);
  s.refreshes = get(cold_.refreshes);
  s.wait_timeouts = get(cold_.wait_timeouts);
  s.evictions = get(cold_.evictions);
  s.negative_hits = get(cold_.negative_hits);
  s.stale_fallbacks = get(cold_.stale_fallbacks);
  s.refreshes_skipped = get(cold_.refreshes_skipped);
  s.total_load_time =
      absl::Nanoseconds(cold_.load_nanos.load(std::memory_order_relaxed));
  return s;
}

}  // namespace paddock

#endif  // PADDOCK_CACHE_H_
