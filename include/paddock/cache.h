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
// K and V must be copyable (`std::copyable`: copy-constructible and
// copy-assignable, so not const): `Get` returns a copy of the stored value
// (a move-only or immutable V does not compile; store a
// `std::shared_ptr<const V>` instead).
//
// Structure (docs/design.md): keys hash to shards (internal/shard.h). Each
// shard has a lock-free table of immutable entries (internal/entry.h; readers
// never lock), a mutex for writers, an eviction order and the loads in flight
// (internal/flight.h). A hit reads one entry under an epoch guard and writes
// nothing shared. Every event goes through one recorder (internal/recorder.h).
//
// This header is the contract and the orchestration. The engine is in rooms
// under internal/, each a class over the state they share
// (internal/cache_core.h), made on the spot, that answers with a value and
// never calls a room above it:
//   front.h          serve what the entry answers, or admit the caller to
//                    its key's load (admission.h: register or join, once);
//   leading.h        a blocking caller that leads the load;
//   refresh.h        loads run on the executor (background refreshes,
//                    GetAsync's loads, parked fleet waits) and what a load
//                    leaves to do there;
//   load_pipeline.h  one load: the shared tier's verdict (fleet_path.h), a
//                    load slot, the loader (loader_call.h, async_load.h);
//   outcome_store.h  the end of every load: store, publish, answer waiters
//                    (waiting.h), with lookup.h's answers and writes.h's
//                    entries.
// A miss of Get goes Get -> GetAny -> GetSlow -> Front::Admit -> either
// Front::Finish, Waiting::Wait, or Leading::LeadMiss -> (LeadPending ->
// OutcomeStore::StorePending | Lead -> LoadPipeline::Run -> OutcomeStore::
// Complete); each returns its value to the caller before it.
//
// Lifetime of values: an entry that is replaced, evicted or invalidated is
// destroyed once no reader can still see it (epoch-based reclamation), never
// under a cache lock, on a thread that later calls into a paddock cache, on
// paddock's reclaimer thread (once writes stop, within tens of
// milliseconds), or at the exit of the thread that removed it, which may
// hold back up to 15 removed entries until then. So destructors of K and V
// must be safe on any thread, and values must not refer to anything that
// dies before the last paddock-using thread exits (own it, or share it).

#ifndef PADDOCK_CACHE_H_
#define PADDOCK_CACHE_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/functional/any_invocable.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/clock.h"
#include "paddock/completion.h"
#include "paddock/internal/admission.h"
#include "paddock/internal/awaiter.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/fleet_path.h"
#include "paddock/internal/front.h"
#include "paddock/internal/leading.h"
#include "paddock/internal/load_stack.h"
#include "paddock/internal/lookup.h"
#include "paddock/internal/tier_subscriber.h"
#include "paddock/internal/waiting.h"
#include "paddock/internal/writes.h"
#include "paddock/key_hash.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"
#include "paddock/stats.h"

namespace paddock {

// Template parameters:
//  - K, V: the key and value types, copyable (see above). With
//    `Options::shared`, both need a `paddock::Codec` (paddock/codec.h).
//  - Policy: when a stored value is served, served while refreshed, or
//    reloaded, and whether loads of a key coalesce (paddock/policy.h:
//    NaiveJitter, SingleFlight, XFetch, SoftTtl, or a type of your own that
//    models `paddock::RefreshPolicy`).
//  - Hash, Eq: how keys are hashed and compared; with the defaults, string
//    keys are looked up transparently (paddock/key_hash.h), so a
//    `std::string_view` or `const char*` key makes no `std::string` on a hit.
//
// Thread-safety: every method may be called from any thread concurrently,
// except the destructor (see there). No method holds an internal lock while
// a loader, a callback or a listener runs.
template <typename K, typename V, RefreshPolicy Policy = SoftTtl,
          typename Hash = absl::Hash<K>, typename Eq = std::equal_to<K>>
class Cache {
  // Said here rather than deep inside the first member that needs it.
  static_assert(std::copyable<K>,
                "paddock::Cache<K, V>: K must be copyable (copy-constructible "
                "and copy-assignable) and not const");
  static_assert(std::copyable<V>,
                "paddock::Cache<K, V>: V must be copyable (copy-constructible "
                "and copy-assignable) and not const; for a value that is "
                "not, cache a std::shared_ptr<const V>");

  // The state the engine shares (internal/cache_core.h).
  using Core = internal::CacheCore<K, V, Policy, Hash, Eq>;
  // What lookups hash and compare keys with (see Core::lookup_hash()).
  using LookupHash = typename Core::LookupHash;
  using LookupEq = typename Core::LookupEq;

 public:
  // Produces the value for a key, or an error. Called concurrently for
  // different keys (and for one key when the policy does not coalesce), so
  // it must be thread-safe. May throw: the exception becomes an
  // `absl::InternalError` for every caller of that load.
  using Loader = absl::AnyInvocable<absl::StatusOr<V>(const K&) const>;

  // Starts producing the value for a key and returns at once; the result is
  // handed to the `Completion`, once, from any thread (`paddock/completion.h`).
  // For backends that are asynchronous themselves. Called as a `Loader` is
  // (thread-safe, concurrently for different keys); a completion destroyed
  // uncalled ends the load with `absl::CancelledError`; an exception thrown
  // before the completion is called becomes `absl::InternalError`.
  using AsyncLoader = absl::AnyInvocable<void(const K&, Completion<V>) const>;

  // What `GetAsync` calls with a result.
  using Callback = absl::AnyInvocable<void(absl::StatusOr<V>) &&>;

  // What `Await` returns: an awaiter that refers to a key of type `Q`.
  template <typename Q>
  using AwaiterFor = internal::AwaiterFor<Cache, V, Q>;
  using Awaiter = AwaiterFor<K>;

  // Throws `std::invalid_argument` naming the field and the value if
  // `options` or `policy` is invalid (see `Options::Validate()`), if
  // `loader` is empty, or if `options.shared` is set for types without a
  // `paddock::Codec` (V needs Encode and Decode, K Encode). With a shared
  // tier, subscribes to other caches' writes until destroyed.
  explicit Cache(Loader loader, Options options = {}, Policy policy = {})
      : Cache(std::move(loader), AsyncLoader(), std::move(options),
              std::move(policy), Hash(), Eq()) {}

  // As above, with an asynchronous loader: `Get` still works (it waits for
  // the completion, within `wait_timeout`), and `GetAsync` never blocks.
  explicit Cache(AsyncLoader loader, Options options = {}, Policy policy = {})
      : Cache(Loader(), std::move(loader), std::move(options),
              std::move(policy), Hash(), Eq()) {}

  // As above, with the `hash` and `eq` this cache calls, in place of
  // default-made ones: a hash with a seed or a table of its own, a
  // comparison with a parameter (neither need be default-constructible).
  // The cache keeps them for its lifetime and calls them concurrently, as
  // const objects, from any thread; equal keys must hash alike. With
  // `Options::shared`, keys that `eq` finds equal should also encode alike
  // (`paddock::Codec<K>`): the tier tells them apart by their bytes.
  Cache(Loader loader, Options options, Policy policy, Hash hash, Eq eq = Eq())
      : Cache(std::move(loader), AsyncLoader(), std::move(options),
              std::move(policy), std::move(hash), std::move(eq)) {}
  Cache(AsyncLoader loader, Options options, Policy policy, Hash hash,
        Eq eq = Eq())
      : Cache(Loader(), std::move(loader), std::move(options),
              std::move(policy), std::move(hash), std::move(eq)) {}

  // Blocks until background loads of this cache that are running have
  // returned; queued ones are dropped without calling the loader, and so
  // are loads parked for another process's fill (Options::shared). After it
  // returns the loader is never called again. Stored values are destroyed
  // here; removed ones awaiting reclamation may outlive it (see above). Must
  // not be called from inside this cache's loader, nor while another thread
  // is inside a method. Every `GetAsync` callback still pending is called
  // once, with `absl::CancelledError`, before it returns, and none runs
  // after it; a completion of an asynchronous loader called later is
  // ignored. A `GetAsync` (or `Await`) that such a callback starts, as a
  // coroutine resumed there may, is answered at once: with a value at hand,
  // else with `absl::CancelledError`.
  ~Cache() = default;  // ~Core ends the cache (internal/cache_core.h).

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
  // stored). A caller that finds a background refresh of the key still
  // queued on the executor runs it itself rather than wait for the executor.
  // With a shared tier (`Options::shared`), the caller that would load asks
  // the tier first: it takes the tier's value, or loads for the whole fleet
  // under a lease and writes the value there, or waits (within
  // `wait_timeout`) for the process that holds the lease, serving the
  // tier's stale value at once where the policy serves stale. A tier that
  // fails is counted and skipped: the caller loads as if there were none.
  // Errors:
  //  - the loader's error, passed to every caller of that load and cached
  //    only for `Options::error_ttl`; a stale value instead while the policy
  //    allows stale-if-error;
  //  - `absl::InternalError` with the exception's `what()` if the loader
  //    threw, or if storing its value threw (e.g. `std::bad_alloc`);
  //  - `absl::FailedPreconditionError` if called by the loader for the key it
  //    is loading (the call would wait for itself);
  //  - `absl::DeadlineExceededError` if no load slot
  //    (`Options::max_concurrent_loads`) came free within `wait_timeout`.
  // An exception thrown by `Hash`, `Eq` or a copy of K or V propagates to the
  // caller; no load is left registered by it.
  //
  // Thread-safe. Never holds an internal lock while the loader runs, nor
  // while a listener, a destructor of K or V, or a copy of V runs. A hit
  // takes no lock and writes no memory another thread writes. The hit is
  // inlined into the caller; everything else is called out of line.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<V> Get(const K& key) {
    return GetAny(key);
  }

  // Whether `Get`, `GetAsync`, `Await`, `GetIfPresent`, `Put` and
  // `Invalidate` take a `Q` in place of a K (heterogeneous lookup): `Hash` and
  // `Eq` declare `is_transparent` and accept a `Q`, and a K can be made from
  // it. A `std::string`-keyed cache with the default `absl::Hash` and
  // `std::equal_to` looks up by any `Q` convertible to `std::string_view`
  // too, through their transparent equivalents (`paddock/key_hash.h`).
  // `Hash` and `Eq` must treat a `Q` exactly as the K made from it. These
  // methods are overloaded for it, as absl's containers' are, so name the
  // type to take the address of one: `std::optional<V> (Cache::*get)(const
  // K&) const = &Cache::GetIfPresent;` (`auto` cannot pick among overloads).
  template <typename Q>
  static constexpr bool kLooksUp =
      internal::LooksUpWith<Q, K, LookupHash, LookupEq>;

  // Cache::Get(), for a key of another type
  //
  // `Get(K(key))`, making no K on a hit: `cache.Get(std::string_view)` or
  // `cache.Get("literal")` on a `std::string`-keyed cache allocates nothing
  // when the value is served at once. Anything else (a miss, a stale entry,
  // a refresh) makes the K, once, and continues as `Get(const K&)`, with the
  // same contract. Only for a `Q` with `kLooksUp<Q>`.
  template <typename Q>
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<V> Get(
      const Q& key) requires kLooksUp<Q> {
    return GetAny(key);
  }

  // Cache::GetAsync()
  //
  // Never blocks and never runs a blocking loader on the calling thread. A
  // value the policy serves at once (fresh or stale) calls `done` inline,
  // before GetAsync returns, allocating nothing; so does a miss with
  // `wait_timeout` zero (the timeout's answer, at once). Otherwise `done`
  // runs exactly once, on the thread that completes the load, with what
  // `Get` would have returned: coalescing, policies, stale values,
  // `error_ttl`, `max_concurrent_loads`, the shared tier and the stats
  // behave as for `Get`. For a blocking loader that thread is one of
  // `Options::executor`'s, or the thread of a blocking `Get` of the same key
  // that ran the load (inside that `Get`, before it returns); for an
  // asynchronous loader, the thread that calls its completion. A waiter not
  // answered within `Options::wait_timeout` gets a stale value the policy
  // keeps or `absl::DeadlineExceededError`, from the cache's timer thread,
  // while the load carries on and stores its result (one timer thread per
  // cache, not one per waiter: a `done` that blocks there delays every
  // other waiter's timeout, so hand long work to an executor). A `done`
  // that throws: the exception is caught and dropped; the other waiters are
  // unaffected. `key` need only live until `done` runs or GetAsync
  // returns, whichever comes first: `done` may free it (a request object
  // that owns it), on whatever thread, and the cache reads its own copy.
  //
  // Thread-safe. Allocates a waiter on a miss.
  void GetAsync(const K& key, Callback done) {
    GetAsyncImpl(key, std::move(done));
  }

  // The same, for any other callable that a `Callback` can hold (a lambda,
  // say): it is called directly on an inline hit, and wrapped in a
  // `Callback` only when the lookup has to wait. That keeps the hit within
  // a few percent of `Get`'s (BM_AsyncHotKeyHit); the contract is the one
  // above.
  template <typename F>
  requires(
      !std::is_same_v<std::remove_cvref_t<F>, Callback> &&
      std::is_constructible_v<Callback, F&&> &&
      std::is_invocable_v<F&&, absl::StatusOr<V>>) void GetAsync(const K& key,
                                                                 F&& done) {
    GetAsyncImpl(key, std::forward<F>(done));
  }

  // Cache::Await()
  //
  // Awaitable in any C++20 coroutine:
  //   absl::StatusOr<V> v = co_await cache.Await(key);
  // Ready at once when GetAsync would call `done` inline; otherwise resumes
  // the coroutine where `done` would run. Use it in the co_await expression
  // itself: it refers to `key` until resumed. asio's `awaitable` needs
  // `paddock::AsyncGet` (`paddock/asio.h`) instead: it rejects foreign
  // awaiters.
  Awaiter Await(const K& key) { return Awaiter(this, key); }
  // The same for a key of another type (see `Get`): ready at once without
  // making a K when the value is served at once.
  template <typename Q>
  AwaiterFor<Q> Await(const Q& key) requires kLooksUp<Q> {
    return AwaiterFor<Q>(this, key);
  }

  // Cache::GetAsync(), for a key of another type
  //
  // `GetAsync(K(key), done)`, making no K when `done` is called inline (see
  // `Get` for a `Q`). `done` is a `Callback` or any callable one can hold.
  template <typename Q, typename F>
  void GetAsync(const Q& key, F&& done) requires(
      kLooksUp<Q>&& std::is_constructible_v<Callback, F&&>&&
          std::is_invocable_v<F&&, absl::StatusOr<V>>) {
    GetAsyncImpl(key, std::forward<F>(done));
  }

  // Cache::GetIfPresent()
  //
  // Returns the value `Get` would return at once without loading (fresh, or
  // stale while the policy serves it), or nullopt. Never loads, never waits,
  // starts no refresh. Thread-safe, lock-free.
  std::optional<V> GetIfPresent(const K& key) const {
    return Lookup(core_).IfPresent(key);
  }
  // The same for a key of another type (see `Get`); makes no K.
  template <typename Q>
  std::optional<V> GetIfPresent(const Q& key) const requires kLooksUp<Q> {
    return Lookup(core_).IfPresent(key);
  }

  // Cache::Put()
  //
  // Stores `value` for `key` as if it had just been loaded. A load of `key`
  // in flight still answers its waiters but no longer stores its result.
  // May evict an entry. With a shared tier, writes through (a load in flight
  // anywhere stores nothing) and other caches drop their copies; a value
  // over the tier's size limit invalidates the tier's record instead.
  // Thread-safe; takes the key's shard lock briefly; with a shared tier,
  // blocks for one call to it (bounded by its I/O timeout).
  void Put(const K& key, V value) {
    const size_t hash = core_.HashOf(key);
    const internal::PutPlan plan =
        Writes(core_).Put(key, hash, std::move(value));
    if constexpr (kShareable) {
      if (core_.tier != nullptr) Fleet(core_).PutThrough(key, hash, plan);
    }
  }
  // `Put(K(key), value)`, for a key of another type (see `Get`).
  template <typename Q>
  void Put(const Q& key, V value) requires kLooksUp<Q> {
    Put(K(key), std::move(value));
  }

  // Cache::Invalidate()
  //
  // Removes `key`. A load of `key` in flight still answers its waiters but
  // no longer stores its result; the next `Get` loads anew. With a shared
  // tier, removes the tier's record and lease too and other caches drop
  // their copies. Thread-safe; with a shared tier, blocks for one call to it.
  void Invalidate(const K& key) {
    const size_t hash = core_.HashOf(key);
    Writes(core_).InvalidateLocally(key, hash);
    if constexpr (kShareable) {
      if (core_.tier != nullptr) Fleet(core_).InvalidateThrough(key, hash);
    }
  }
  // `Invalidate(K(key))`, for a key of another type (see `Get`).
  template <typename Q>
  void Invalidate(const Q& key) requires kLooksUp<Q> {
    Invalidate(K(key));
  }

  // Cache::InvalidateAll()
  //
  // `Invalidate` for every key, one shard at a time, in this cache only: a
  // shared tier's records stay (it cannot list them cheaply). Thread-safe.
  void InvalidateAll() { Writes(core_).InvalidateAllLocally(); }

  // Cache::size()
  //
  // Returns the number of entries (values and cached errors), at most
  // `Options::max_entries`. Thread-safe; a snapshot.
  size_t size() const { return core_.Size(); }

  // Cache::stats()
  //
  // Returns the counters. Thread-safe; each field exact, fields not taken at
  // one instant.
  Stats stats() const { return core_.recorder.Snapshot(); }

  // Cache::hash_function(), Cache::key_eq()
  //
  // Return copies of the cache's `Hash` and `Eq` (given, or made by
  // default), as the standard containers do. Thread-safe: they never change.
  // For string keys with the default ones, lookups call their transparent
  // equivalents instead, which hash and compare alike (key_hash.h).
  Hash hash_function() const { return core_.hash; }
  Eq key_eq() const { return core_.eq; }

  // Cache::loads_in_flight()
  //
  // Returns the number of keys with a coalesced load (foreground or
  // refresh) registered now; 0 whenever no such load runs. Thread-safe; takes
  // each shard lock briefly.
  size_t loads_in_flight() const { return core_.LoadsInFlight(); }

  // Returns the options in effect, with `shards` and `clock` resolved.
  const Options& options() const { return core_.options; }

 private:
  template <typename, typename, typename>
  friend class internal::AwaiterFor;

  static constexpr bool kShareable = Core::kShareable;
  using Shard = typename Core::Shard;
  using AdmitAs = internal::AdmitAs<typename Core::Flight>;

  // The rooms the methods below hand each step to (internal/engine.h).
  using Rooms = internal::Engine<Core>;
  using Fleet = typename Rooms::FleetPath;
  using Front = typename Rooms::Front;
  using Lookup = typename Rooms::Lookup;
  using Writes = typename Rooms::Writes;

  Cache(Loader loader, AsyncLoader async_loader, Options options, Policy policy,
        Hash hash, Eq eq)
      : core_(std::move(loader), std::move(async_loader), std::move(options),
              std::move(policy), std::move(hash), std::move(eq)) {
    if constexpr (Core::kShareable) {
      if (core_.tier != nullptr) {
        core_.subscriber =
            std::make_unique<internal::TierSubscriber<Core>>(&core_);
        core_.subscription = core_.tier->Subscribe(core_.subscriber.get());
      }
    }
  }

  // `key` itself, or a K made from a key of another type (see kLooksUp).
  template <typename Q>
  static decltype(auto) KeyOf(const Q& key) {
    if constexpr (std::is_same_v<Q, K>) {
      return (key);  // const K&: no copy.
    } else {
      return K(key);
    }
  }

  // -- Lookups.
  // Both Get overloads: `key` is a K or a Q with kLooksUp<Q>, and only the
  // hit path looks up with it as it is.
  template <typename Q>
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<V> GetAny(const Q& key);
  // Get() past the hit path: entries outside their quiet window, misses.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<V> GetUnquiet(Shard& shard,
                                                       const K& key,
                                                       size_t hash) {
    if (auto served = Front(core_).ServeNow(shard, key, hash)) {
      return *std::move(served);
    }
    return GetSlow(shard, key, hash);
  }
  // Get() where its hit path could not look: the thread has no epoch record
  // yet, the cache has its own clock, or the coarse clock is not ticking.
  template <typename Q>
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<V> GetUnprepared(Shard& shard,
                                                          const Q& key,
                                                          size_t hash);
  // The hit path and Front::ServeNow, for Await: what is served at once, or
  // nullopt.
  template <typename Q>
  std::optional<absl::StatusOr<V>> TryServeNow(const Q& key);
  // Every GetAsync overload: `done` is a Callback or any callable one can
  // hold, called directly when the value is served at once; `key` a K or a
  // Q with kLooksUp<Q>.
  template <typename Q, typename F>
  void GetAsyncImpl(const Q& key, F&& done);
  // Out of line: Get's inlined hit calls it.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<V> GetSlow(Shard& shard, const K& key,
                                                    size_t hash);

  // The only data member: every stage of the engine reaches the state
  // through it.
  Core core_;
};

// ---------------------------------------------------------------------------
// Implementation.

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
template <typename Q>
absl::StatusOr<V> Cache<K, V, P, H, E>::GetAny(const Q& key) {
  const size_t hash = core_.HashOf(key);
  Shard& shard = core_.ShardFor(hash);
  // Inlined into the caller, the hit path calls nothing: what needs a call
  // (a first record, another clock, a ticker to start) goes to
  // GetUnprepared, which takes the same hit there.
  internal::ThreadRecord* const record = internal::ThreadRecordIfAny();
  const int64_t now =
      core_.system_clock ? internal::CoarseNowNanosIfTicking() : 0;
  if (record == nullptr || now == 0) [[unlikely]] {
    return GetUnprepared(shard, key, hash);
  }
  bool found;
  {
    internal::EpochGuard guard(record);
    const typename Core::Entry* n = shard.Find(hash, key, core_.lookup_eq());
    // `now` was read before the lookup: a time never ahead of the entry's
    // load, so a fresh entry is never refused for it, nor a stale one served.
    if (n != nullptr && now < n->quiet_until) [[likely]] {
      core_.MarkVisited(n);
      core_.recorder.Hit(record);
      return n->value();
    }
    found = n != nullptr;
  }
  // A key with no entry goes straight to the locked path, which looks again.
  if (!found) return GetSlow(shard, KeyOf(key), hash);
  return GetUnquiet(shard, KeyOf(key), hash);
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
template <typename Q>
absl::StatusOr<V> Cache<K, V, P, H, E>::GetUnprepared(Shard& shard,
                                                      const Q& key,
                                                      size_t hash) {
  // This acquires the record, reads this cache's clock (on the system clock,
  // CoarseNowNanos starts or retries the ticker) and takes the hit.
  std::optional<absl::StatusOr<V>> now;
  const bool found =
      Lookup(core_).TakeHit(shard, key, hash, internal::CurrentThreadRecord(),
                            core_.HitNowNanos(), now);
  if (now.has_value()) return *std::move(now);
  // Past the hit, a key of another type becomes a K once, for both calls.
  decltype(auto) k = KeyOf(key);
  if (found) {
    if (std::optional<absl::StatusOr<V>> served =
            Front(core_).ServeNow(shard, k, hash)) {
      return *std::move(served);
    }
  }
  return GetSlow(shard, k, hash);
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
template <typename Q>
std::optional<absl::StatusOr<V>> Cache<K, V, P, H, E>::TryServeNow(
    const Q& key) {
  const size_t hash = core_.HashOf(key);
  Shard& shard = core_.ShardFor(hash);
  std::optional<absl::StatusOr<V>> result;
  // Nothing to serve without an entry: the caller's locked path looks again.
  if (Lookup(core_).TakeHitAnyway(shard, key, hash, result) &&
      !result.has_value()) {
    result = Front(core_).ServeNow(shard, KeyOf(key), hash);
  }
  return result;
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
template <typename Q, typename F>
void Cache<K, V, P, H, E>::GetAsyncImpl(const Q& key, F&& done) {
  const size_t hash = core_.HashOf(key);
  Shard& shard = core_.ShardFor(hash);
  // TryServeNow, with the hit taken here, inlined into the caller as Get's
  // is.
  std::optional<absl::StatusOr<V>> now;
  const bool found = Lookup(core_).TakeHitAnyway(shard, key, hash, now);
  if (!now.has_value()) {
    // Past the hit, a key of another type becomes a K once, for both calls.
    decltype(auto) k = KeyOf(key);
    if (found)
      now = Front(core_).ServeNow(shard, k, hash);  // Past its quiet window.
    if (!now.has_value()) {
      // A Callback is moved on; any other callable is wrapped now, to wait.
      Front(core_).AsyncMiss(shard, k, hash, Callback(std::forward<F>(done)));
      return;
    }
  }
  internal::CallDropping(std::forward<F>(done), *std::move(now));
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
absl::StatusOr<V> Cache<K, V, P, H, E>::GetSlow(Shard& shard, const K& key,
                                                size_t hash) {
  if (internal::IsLoadingOnThisThread(&core_, hash, key, core_.eq)) {
    return absl::FailedPreconditionError(
        "paddock: the loader called Get for the key it is loading");
  }
  internal::PendingLead<Core> pending(core_, shard);
  internal::Admitted<Core> admitted = Front(core_).Admit(
      shard, key, hash, AdmitAs::Get(/*blocking_loader=*/!core_.async_loader),
      /*times_load=*/true, pending.get());
  if (admitted.served.result.has_value()) {
    return Front(core_).Finish(admitted.served);
  }
  if (admitted.joined.role == internal::Role::kJoin) {
    return
        typename Rooms::Waiting(core_).Wait(admitted.joined.flight, key, hash);
  }
  if (admitted.joined.role == internal::Role::kLeadPending) {
    pending.set_registered();
  }
  return typename Rooms::Leading(core_).LeadMiss(
      shard, key, hash, admitted.joined, admitted.start, pending.registered());
}

}  // namespace paddock

#endif  // PADDOCK_CACHE_H_
