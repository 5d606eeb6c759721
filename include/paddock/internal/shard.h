// File: paddock/internal/shard.h
// -----------------------------------------------------------------------------
// `Shard`: one independently locked part of a cache. Readers find entries in
// its lock-free table without a lock; writers hold its mutex through a
// `Shard::Writer` to store and unlink entries, to keep the eviction order and
// to register the loads in flight.
//
// Eviction order: SIEVE's, except that its hand also takes an entry that
// answers nobody any more (past its `keep_until` and, for a remembered
// error, its `error_until`) whatever its visited bit. An entry served stale
// is live, like a fresh one. Expiry is checked only where the hand passes,
// so a store touches no second order (an expiry heap cost every store a
// sift over cold memory and 16 bytes per entry; docs/benchmarks.md).
//
// Nothing a writer removes is destroyed under the mutex: the `Writer` retires
// unlinked entries and destroys dropped flight registrations (their keys and
// outcomes) after it releases the lock, so no destructor of K or V ever runs
// under it.

#ifndef PADDOCK_INTERNAL_SHARD_H_
#define PADDOCK_INTERNAL_SHARD_H_

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "paddock/internal/entry.h"
#include "paddock/internal/in_flight_set.h"
#include "paddock/internal/node_table.h"
#include "paddock/internal/retire_list.h"
#include "paddock/internal/short_mutex.h"
#include "paddock/internal/sieve.h"

namespace paddock::internal {

// `Hash` is not called by the shard: callers pass the hash of each key
// (already mixed, see hash_mix.h). `Flight` has `key()` and `hash()`
// (internal::KeyedFlight). `kLayout`: the entries' (entry.h).
template <typename K, typename V, typename Flight, typename Hash, typename Eq,
          EntryLayout kLayout = EntryLayout::kFull>
class alignas(64) Shard {
 public:
  using Node = Entry<K, V, kLayout>;
  using FlightType = Flight;
  using Pending = PendingLoad<Flight>;
  using FlightSet = InFlightSet<K, Flight, Eq>;
  using Registered = typename FlightSet::Entry;

  // Holds the shard's mutex for its lifetime; on destruction releases it,
  // then retires the entries unlinked and destroys the flight registrations
  // dropped meanwhile. Declare it after anything that must outlive the
  // locked section (such as an entry built before it).
  class ABSL_SCOPED_LOCKABLE Writer {
   public:
    explicit Writer(Shard& shard) ABSL_EXCLUSIVE_LOCK_FUNCTION(shard.mu_)
        : shard_(shard) {
      shard_.mu_.Lock();
    }
    ~Writer() ABSL_UNLOCK_FUNCTION() {
      shard_.mu_.Unlock();
      retired_.RetireAll();
    }
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

   private:
    friend class Shard;
    Shard& shard_;
    RetireList<Node> retired_;
    // A writer drops at most one registration (and replaces at most one).
    std::shared_ptr<Flight> dropped_flight_;
    std::shared_ptr<Flight> replaced_flight_;
    // Made only by DropAllFlights: most writers drop no set.
    std::optional<FlightSet> dropped_set_;
  };

  Shard() = default;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  // Frees every entry directly: no reader may be inside.
  ~Shard() {
    table_.ForEach([](Node* n) { delete n; });
  }

  // Sets how many entries the shard may hold and the cache's fixed lifetime
  // (what its entries' times derive from); before first use.
  void set_capacity(size_t capacity, const FixedTimes& fixed = {})
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    capacity_ = capacity;
    fixed_ = fixed;
  }
  // Compares the keys of loads in flight with `*eq` (which must outlive the
  // shard) instead of a default-made Eq; before first use.
  void set_key_eq(const Eq* eq) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    in_flight_.set_key_eq(eq);
  }

  // The entry for `key` (a K, or any key `eq` compares with one), or
  // nullptr. Lock-free: call inside an EpochGuard (or holding the mutex).
  template <typename Q, typename KeyEq>
  ABSL_ATTRIBUTE_ALWAYS_INLINE Node* Find(size_t hash, const Q& key,
                                          const KeyEq& eq) const {
    return table_.Find(hash, [&](const Node* n) { return eq(n->key, key); });
  }

  // Entries now; a relaxed snapshot. Lock-free.
  size_t size() const { return size_.load(std::memory_order_relaxed); }

  // -- The writer's operations: hold a Writer on this shard. --

  // The mutex a Writer holds: for the annotations of functions outside the
  // shard that take a Writer (ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mutex())).
  const ShortMutex& mutex() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // The load of `key` registered now, if it is not done and either still
  // queued (it cannot hang before it starts: whoever needs it claims it) or
  // started less than `max_age` ago (an older one keeps running but no
  // longer blocks the key); otherwise nullptr. For a pending load, makes its
  // flight (the caller joins it): may throw then (an allocation, a copy of
  // the key), leaving the shard unchanged.
  std::shared_ptr<Flight> LiveFlight(const K& key, size_t hash, int64_t now,
                                     int64_t max_age)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return IfLive(key, hash, now, max_age,
                  [&](Registered& r) { return FlightToJoin(r, key, hash); });
  }

  // LiveFlight, and if it finds none, RegisterPending in the same probe of
  // the in-flight set: returns the live flight (the caller joins it) or
  // nullptr (`pending` is registered). May throw (growth, or making a pending
  // load's flight), leaving the shard unchanged.
  std::shared_ptr<Flight> LiveFlightOrRegister(Writer& w, const K& key,
                                               size_t hash, int64_t now,
                                               int64_t max_age,
                                               Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RegisterUnlessLive(
        w, key, hash, now, max_age, pending,
        [&](Registered& r) { return FlightToJoin(r, key, hash); });
  }
  // The flight of `key`'s registration if a blocking loader runs it on an
  // executor thread and it is not done, however old; otherwise nullptr.
  // Once LiveFlight finds none, this is a hung load: starting another on
  // the executor would take one more of its threads every max_age, until
  // the hung key had them all.
  std::shared_ptr<Flight> ExecutorFlight(const K& key, size_t hash) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Registered* r = in_flight_.Find(key, hash);
    if (r == nullptr || r->pending != nullptr) return nullptr;
    const Flight& f = *r->flight;
    if (!f.on_executor() || f.done() || f.queued()) return nullptr;
    return r->flight;
  }

  // Whether LiveFlight would return a flight; makes none.
  bool HasLiveFlight(const K& key, size_t hash, int64_t now,
                     int64_t max_age) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Registered* r = in_flight_.Find(key, hash);
    return r != nullptr && Live(*r, now, max_age);
  }

  // For uncoalesced loads, which share the key's registration only to learn
  // whether a write superseded them: counts one more runner of the key's
  // live registration and returns its flight (a pending runner's
  // registration is first handed to a new flight that counts both), or
  // returns nullptr if there is none. May throw (an allocation, a copy of the
  // key), leaving the shard unchanged.
  std::shared_ptr<Flight> JoinRunners(const K& key, size_t hash, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return IfLive(key, hash, now, kNoMaxAge,
                  [&](Registered& r) { return RunnerFlight(r, key, hash); });
  }

  // JoinRunners, and if it finds no registration, registers `pending` in the
  // same probe: returns the flight run beside, or nullptr (`pending` is
  // registered; its runner calls LeaveRunners or ForgetRunner). May throw,
  // leaving the shard unchanged.
  std::shared_ptr<Flight> JoinRunnersOrRegister(Writer& w, const K& key,
                                                size_t hash, int64_t now,
                                                Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RegisterUnlessLive(
        w, key, hash, now, kNoMaxAge, pending,
        [&](Registered& r) { return RunnerFlight(r, key, hash); });
  }

  // An uncoalesced runner registered as `pending` counts itself out: returns
  // whether the key's registration is still the one it joined (no write
  // superseded it), and unregisters it if this was its last runner. If the
  // key comparison throws, the runner has not left (see ForgetRunner).
  bool LeaveRunners(Writer& w, const K& key, size_t hash, Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    assert(!pending->left_runners);
    Registered* r = in_flight_.Find(key, hash);  // The one call that throws.
    pending->left_runners = true;
    const Flight* flight = pending->flight.get();
    const bool last = flight == nullptr || pending->flight->RemoveRunner() == 0;
    const bool own = r != nullptr &&
                     (flight == nullptr
                          ? r->pending == pending
                          : r->pending == nullptr && r->flight.get() == flight);
    if (own && last) Drop(w, r);
    return own;
  }

  // LeaveRunners without comparing keys (for a runner whose key comparison
  // threw), unless the runner left already: a scan of the set.
  void ForgetRunner(Writer& w, Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending->left_runners) return;
    pending->left_runners = true;
    const Flight* flight = pending->flight.get();
    if (flight == nullptr) return ForgetPending(w, pending);
    if (pending->flight->RemoveRunner() != 0) return;
    if (Registered* r = in_flight_.FindIf([&](const Registered& x) {
          return x.pending == nullptr && x.flight.get() == flight;
        })) {
      Drop(w, r);
    }
  }

  // Registers `flight` as the load of `key` (equal to `flight->key()`, which
  // the registration refers to), replacing any registered one (which then
  // stores nothing). May throw (growth), leaving the shard unchanged.
  void Register(Writer& w, const K& /*key*/, size_t hash,
                std::shared_ptr<Flight> flight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const K* own_key = &flight->key();
    Put(w, Registered{own_key, hash, std::move(flight)});
  }

  // Whether `flight` (or `pending`: pass one) is the registered load of
  // `key`; if so and `drop`, unregisters it (one lookup for both).
  bool IsRegistered(Writer& w, const K& key, size_t hash, const Flight* flight,
                    bool drop, const Pending* pending = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Registered* r = in_flight_.Find(key, hash);
    if (r == nullptr || (pending != nullptr ? r->pending != pending
                                            : r->pending != nullptr ||
                                                  r->flight.get() != flight)) {
      return false;
    }
    if (drop) Drop(w, r);
    return true;
  }

  // Unregisters `pending` if it is still registered, without comparing
  // keys (for a leader whose key comparison threw): a scan of the set.
  void ForgetPending(Writer& w, const Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (Registered* r = in_flight_.FindIf(
            [&](const Registered& x) { return x.pending == pending; })) {
      Drop(w, r);
    }
  }

  // Unregisters the load of `key`, if any: a load in flight no longer stores
  // its result.
  void DropFlight(Writer& w, const K& key, size_t hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (Registered* r = in_flight_.Find(key, hash)) Drop(w, r);
  }

  // DropFlight for every key.
  void DropAllFlights(Writer& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    w.dropped_set_.emplace(in_flight_.key_eq()).swap(in_flight_);
  }

  // Loads registered and not done.
  size_t live_flights() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t live = 0;
    in_flight_.ForEach([&](const Registered& r) {
      live += r.pending != nullptr || !r.flight->done();
    });
    return live;
  }

  // Stores `n` in place of `previous` (null if the key has no entry) and
  // evicts to stay within capacity; returns how many entries were evicted.
  // May throw std::bad_alloc before anything changed; `n` then goes to the
  // writer's retire list.
  size_t Store(Writer& w, Node* previous, std::unique_ptr<Node> n, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (previous != nullptr) {
      Node* fresh = n.release();
      table_.Replace(previous, fresh);
      sieve_.Replace(previous, fresh);
      w.retired_.Add(previous);
      return 0;
    }
    try {
      // Allocate first, so a failure leaves the shard as it was. A full
      // shard evicts before it inserts: it needs no room beyond capacity
      // (reserving it would double a full shard's slot array).
      table_.Reserve(
          std::min(table_.size() + 1, std::max<size_t>(capacity_, 1)),
          w.retired_);
    } catch (...) {
      w.retired_.Add(n.release());  // Its V must not die under the lock.
      throw;
    }
    size_t evicted = 0;
    const auto dead = [&](const Node* v) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return v->evict_after(fixed_) <= now;
    };
    while (table_.size() >= capacity_) {
      Node* victim = sieve_.Victim(dead);
      if (victim == nullptr) break;
      Unlink(w, victim);
      ++evicted;
    }
    // Reserved above: an eviction leaves a tombstone, never needs a slot.
    Node* fresh = n.release();
    table_.InsertReserved(fresh);
    sieve_.Push(fresh);
    size_.store(table_.size(), std::memory_order_relaxed);
    if (Node* next = sieve_.next()) __builtin_prefetch(next);
    return evicted;
  }

  // Removes `n` from the shard; it is retired after the lock is released.
  void Unlink(Writer& w, Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    table_.Erase(n);
    sieve_.Remove(n);
    size_.store(table_.size(), std::memory_order_relaxed);
    w.retired_.Add(n);
  }

  // Unlinks every entry. Never throws: it walks SIEVE's list, which links
  // every entry of the table, so it needs no allocation (InvalidateAll,
  // which has dropped the shard's loads by then, cannot stop half-way).
  void UnlinkAll(Writer& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (Node* n = sieve_.oldest()) Unlink(w, n);
  }

 private:
  // Starts fetching what the next eviction touches first, for a load that
  // will store: the next node the hand examines (prefetched by the last
  // Store, so likely cached), its slot and the node after it.
  void PrefetchEviction() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (table_.size() < capacity_) return;
    const Node* n = sieve_.next();
    if (n == nullptr) return;
    table_.PrefetchSlotOf(n);
    if (n->newer != nullptr) __builtin_prefetch(n->newer);
  }
  // The flight of registration `r` (of `key`), made now for a pending load
  // that has none yet. May throw (an allocation, a copy of the key).
  static std::shared_ptr<Flight> FlightToJoin(const Registered& r, const K& key,
                                              size_t hash) {
    Pending* p = r.pending;
    if (p == nullptr) return r.flight;
    if (p->flight == nullptr) {
      p->flight = std::make_shared<Flight>(key, hash, p->started_at,
                                           Flight::State::kRunning);
    }
    return p->flight;
  }
  // `on_live(registration)` of `key`'s live registration (see Live), or
  // nullptr if it has none.
  template <typename OnLive>
  std::shared_ptr<Flight> IfLive(const K& key, size_t hash, int64_t now,
                                 int64_t max_age, const OnLive& on_live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Registered* r = in_flight_.Find(key, hash);
    if (r == nullptr || !Live(*r, now, max_age)) return nullptr;
    return on_live(*r);
  }
  // Registers `pending` for `key` in one probe of the in-flight set and
  // returns nullptr, unless a live registration (see Live) is there: then
  // returns `on_live(registration)`. A registration no longer live is
  // replaced, as Put does. May throw, leaving the shard unchanged.
  template <typename OnLive>
  std::shared_ptr<Flight> RegisterUnlessLive(Writer& w, const K& key,
                                             size_t hash, int64_t now,
                                             int64_t max_age, Pending* pending,
                                             const OnLive& on_live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [r, inserted] = in_flight_.FindOrInsert(key, hash, [&] {
      return Registered{&key, hash, nullptr, pending};
    });
    if (inserted) {
      PrefetchEviction();
      return nullptr;
    }
    if (Live(*r, now, max_age)) return on_live(*r);
    assert(w.replaced_flight_ == nullptr);
    w.replaced_flight_ = std::exchange(r->flight, nullptr);
    r->pending = pending;
    r->key = &key;
    return nullptr;
  }
  // What uncoalesced runners pass as a maximum age: none.
  static constexpr int64_t kNoMaxAge = std::numeric_limits<int64_t>::max();
  // The flight the runners of registration `r` (of `key`) share, with one
  // more runner counted; a pending runner's registration is handed to a new
  // flight first (which then counts it too, and carries the key the
  // registration refers to: the pending runner may leave first). May throw
  // before anything changed (an allocation, a copy of the key).
  static std::shared_ptr<Flight> RunnerFlight(Registered& r, const K& key,
                                              size_t hash) {
    if (Pending* p = r.pending) {
      auto flight = std::make_shared<Flight>(key, hash, p->started_at,
                                             Flight::State::kRunning);
      p->flight = flight;
      r.key = &flight->key();
      r.flight = std::move(flight);
      r.pending = nullptr;
    }
    r.flight->AddRunner();
    return r.flight;
  }
  // Whether registration `r` still blocks its key at `now` (see LiveFlight).
  static bool Live(const Registered& r, int64_t now, int64_t max_age) {
    if (r.pending != nullptr) return now - r.pending->started_at < max_age;
    return !r.flight->done() &&
           (r.flight->queued() || now - r.flight->started_at() < max_age);
  }

  // Inserts `r`, or puts it in place of the registration of its key (whose
  // flight the writer destroys after the lock; a pending load's leader
  // learns at its end that it no longer owns the key).
  void Put(Writer& w, Registered r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // One probe: inserted here unless the key is registered already.
    auto [it, inserted] =
        in_flight_.FindOrInsert(*r.key, r.hash, [&] { return std::move(r); });
    if (!inserted) {
      assert(w.replaced_flight_ == nullptr);
      w.replaced_flight_ = std::exchange(it->flight, std::move(r.flight));
      it->pending = r.pending;
      it->key = r.key;  // Equal, and it outlives the registration.
    }
  }

  void Drop(Writer& w, Registered* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Erasing then frees nothing: the flight (and its key) is destroyed by
    // the writer, after the lock.
    assert(w.dropped_flight_ == nullptr);
    w.dropped_flight_ = std::move(r->flight);
    in_flight_.Erase(r);
  }

  // Read lock-free by every lookup, written under mu_ (its slot array's
  // address on a line of its own: see NodeTable). First, so that the
  // writers' fields below do not share that line.
  NodeTable<Node> table_;
  mutable ShortMutex mu_;
  std::atomic<size_t> size_{0};
  Sieve<Node> sieve_ ABSL_GUARDED_BY(mu_);
  FlightSet in_flight_ ABSL_GUARDED_BY(mu_);
  size_t capacity_ ABSL_GUARDED_BY(mu_) = 0;
  FixedTimes fixed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SHARD_H_
