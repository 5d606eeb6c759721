// File: paddock/internal/entry.h
// -----------------------------------------------------------------------------
// `Entry<K, V, kLayout>`: what a cache stores for one key, a value or a
// remembered error, with the times its policy fixed when it was stored.
// Immutable once published: a write replaces the entry (readers hold no
// lock), except for the two one-way flags lookups set and the links the
// shard's mutex guards.
//
// Times are nanoseconds on the cache's clock (`Options::clock`).
//
// Three layouts (`EntryLayout`), chosen by the policy. A policy whose
// lifetime is the same for every value (`kFixedLifetime`) gets `kFixed`: an
// entry whose times are its load's end plus the cache's fixed offsets
// (`FixedTimes`) stores only `quiet_until` and the load's duration, and
// derives the rest. A policy whose quiet window alone depends on the load's
// duration (`kFixedExpiry`, XFetch) gets `kFixedExpiry`: the load's end is
// stored too, and the other three times derive from it. In both, any other
// entry of that cache (from the shared tier, a remembered error, a time that
// saturated, a policy that declared its trait wrongly) keeps its times in its
// extras. Every other policy stores all times inline (`kFull`). An entry of
// uint64_t key and value is 56 bytes `kFixed` (a 64-byte malloc chunk), 64
// bytes `kFixedExpiry` (80) and 96 bytes `kFull` (112).

#ifndef PADDOCK_INTERNAL_ENTRY_H_
#define PADDOCK_INTERNAL_ENTRY_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddock/internal/node_pool.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

// `t + d` for nanoseconds, clamped to the int64 range.
inline int64_t AddNanosSaturated(int64_t t, int64_t d) {
  int64_t sum;
  if (__builtin_add_overflow(t, d, &sum)) {
    return d > 0 ? std::numeric_limits<int64_t>::max()
                 : std::numeric_limits<int64_t>::min();
  }
  return sum;
}

// An entry's schedule, in absolute nanoseconds.
struct EntryTimes {
  int64_t loaded_at = 0;
  // Until then a hit serves the value without asking the policy.
  int64_t quiet_until = std::numeric_limits<int64_t>::min();
  int64_t expires_at = 0;  // Fresh until then.
  int64_t keep_until = 0;  // Never served after; evicted first after.
  // Stale-if-error (RFC 5861): until then the value stands in for a failed
  // load (`Lifetime::serve_on_error_for`, SoftTtl's `stale_if_error`).
  int64_t stale_if_error_until = 0;
  int64_t load_duration = 0;
};

// The offsets from a load's end of a fixed lifetime (`kFixedLifetime`), in
// nanoseconds, each clamped to the int64 range. With `kFixedExpiry` only the
// last three are fixed, and `quiet` is not used.
struct FixedTimes {
  int64_t quiet = 0;
  int64_t expires = 0;
  int64_t keep = 0;
  int64_t serve_on_error = 0;

  // The schedule of a value loaded at `loaded_at`, saturated as the cache
  // computes it.
  EntryTimes At(int64_t loaded_at, int64_t load_duration) const {
    return {loaded_at,
            AddNanosSaturated(loaded_at, quiet),
            AddNanosSaturated(loaded_at, expires),
            AddNanosSaturated(loaded_at, keep),
            AddNanosSaturated(loaded_at, serve_on_error),
            load_duration};
  }
};

// What few entries need, kept apart so that the others stay small.
struct EntryExtras {
  absl::Status error;  // Non-OK in a remembered error, while error_until.
  int64_t error_until = std::numeric_limits<int64_t>::min();
  // The shared tier's name for the value (`SharedRecord::version`), when it
  // came from or went to the tier; empty otherwise.
  std::string shared_version;
  // A compact entry's times, once it has extras.
  EntryTimes times;
};

// How an entry keeps its times (see the file comment).
enum class EntryLayout {
  kFull,         // All six inline.
  kFixed,        // quiet_until and the load's duration; the rest derived.
  kFixedExpiry,  // kFixed plus the load's end; quiet_until not derived.
};

template <typename K, typename V, EntryLayout kLayout = EntryLayout::kFull>
struct Entry {
  // Whether times derive from the cache's FixedTimes (kFixed, kFixedExpiry).
  static constexpr bool kCompact = kLayout != EntryLayout::kFull;
  // Every entry is allocated at this alignment: at least 16, so that a
  // table slot can keep three bits of the hash beside the address
  // (node_table.h) without rounding the entry up to a multiple of 16, and
  // at least an over-aligned K's or V's (operator new below is not given
  // the type's alignment).
  static constexpr size_t kAddressAlignment =
      std::max({size_t{16}, alignof(K), alignof(V)});
  // Entries come from a per-thread pool of blocks of their size
  // (node_pool.h): every miss allocates one and, once reclaimed, frees
  // another. Nothing derives from an entry, so `size` is sizeof(Entry).
  static void* operator new(size_t /*size*/) {
    return NodePool<sizeof(Entry), kAddressAlignment>::Allocate();
  }
  static void operator delete(void* p) {
    NodePool<sizeof(Entry), kAddressAlignment>::Free(p);
  }

  Entry(size_t full_hash, const K& k)
      : hash(static_cast<uint32_t>(full_hash)), key(k) {}
  ~Entry() {
    if (has_value_) value_.~V();
    if (has_extras_) delete Extras();
  }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  // Fields in the order a lookup reads them: a hit reads `hash` to the
  // value, which for small keys and values share the entry's first 32 bytes.

  // The low half of the key's hash (the table's index and tag bits; the
  // shard is picked from the high half). Never changes.
  const uint32_t hash;
  // Written by lookups, one-way and only when it changes.
  std::atomic<bool> visited{false};     // SIEVE's bit.
  std::atomic<bool> refreshing{false};  // A refresh was asked for.

 private:
  bool has_value_ = false;
  bool has_extras_ = false;

 public:
  // Until then a hit serves the value without asking the policy. Set by
  // SetTimes.
  int64_t quiet_until = std::numeric_limits<int64_t>::min();
  const K key;

 private:
  union {
    V value_;  // Constructed iff has_value_.
  };

 public:
  // Guarded by the shard's mutex.
  Entry* older = nullptr;
  Entry* newer = nullptr;

  // -- The value; empty in a remembered error.
  bool has_value() const { return has_value_; }
  const V& value() const { return value_; }
  // Before publication only; at most once.
  template <typename... Args>
  void emplace_value(Args&&... args) {
    ::new (static_cast<void*>(&value_)) V(std::forward<Args>(args)...);
    has_value_ = true;
  }

  // -- Times. `fixed`: the cache's fixed lifetime (ignored unless compact).
  EntryTimes times(const FixedTimes& fixed) const {
    if constexpr (kLayout == EntryLayout::kFixed) {
      if (has_extras_) return Extras()->times;
      return fixed.At(DerivedLoadedAt(fixed), tail_.load_duration);
    } else if constexpr (kLayout == EntryLayout::kFixedExpiry) {
      if (has_extras_) return Extras()->times;
      EntryTimes t = fixed.At(tail_.loaded_at, tail_.load_duration);
      t.quiet_until = quiet_until;  // Not fixed: see Derivable.
      return t;
    } else {
      return {tail_.loaded_at,
              quiet_until,
              tail_.expires_at,
              tail_.keep_until,
              tail_.stale_if_error_until,
              tail_.load_duration};
    }
  }
  // Single times, for callers that need one (the slow paths).
  int64_t loaded_at(const FixedTimes& fixed) const {
    return times(fixed).loaded_at;
  }
  int64_t expires_at(const FixedTimes& fixed) const {
    return times(fixed).expires_at;
  }
  int64_t keep_until(const FixedTimes& fixed) const {
    return times(fixed).keep_until;
  }
  int64_t stale_if_error_until(const FixedTimes& fixed) const {
    return times(fixed).stale_if_error_until;
  }
  int64_t load_duration(const FixedTimes& fixed) const {
    return times(fixed).load_duration;
  }

  // Sets every time; before publication only. A compact entry keeps only
  // what it cannot derive from `fixed` exactly, in its extras otherwise.
  void SetTimes(const EntryTimes& t, const FixedTimes& fixed) {
    quiet_until = t.quiet_until;
    if constexpr (kCompact) {
      if (!has_extras_ && Derivable(t, fixed)) {
        tail_.load_duration = t.load_duration;
        if constexpr (kLayout == EntryLayout::kFixedExpiry) {
          tail_.loaded_at = t.loaded_at;
        }
        return;
      }
      mutable_extras(fixed).times = t;
    } else {
      tail_.loaded_at = t.loaded_at;
      tail_.expires_at = t.expires_at;
      tail_.keep_until = t.keep_until;
      tail_.stale_if_error_until = t.stale_if_error_until;
      tail_.load_duration = t.load_duration;
    }
  }

  // SetTimes(fixed.At(loaded_at, load_duration), fixed), for an entry of a
  // fixed lifetime: when no time saturates (nearly always), a compact entry
  // stores its two fields without building the schedule and deriving it back.
  void SetFixedTimes(int64_t loaded_at, int64_t load_duration,
                     const FixedTimes& fixed) {
    static_assert(kLayout != EntryLayout::kFixedExpiry,
                  "its quiet window is not fixed: use SetTimes");
    if constexpr (kCompact) {
      int64_t quiet, unused;
      if (!has_extras_ &&
          !__builtin_add_overflow(loaded_at, fixed.quiet, &quiet) &&
          !__builtin_add_overflow(loaded_at, fixed.expires, &unused) &&
          !__builtin_add_overflow(loaded_at, fixed.keep, &unused) &&
          !__builtin_add_overflow(loaded_at, fixed.serve_on_error, &unused)) {
        quiet_until = quiet;
        tail_.load_duration = load_duration;
        return;
      }
    }
    SetTimes(fixed.At(loaded_at, load_duration), fixed);
  }

  // -- Extras.
  // Whether the entry has them (a compact one: also whether its times are
  // kept there rather than derived).
  bool has_extras() const { return has_extras_; }
  // A remembered error (OK if none) and until when it answers.
  const absl::Status& error() const {
    static const absl::Status* const kOk = new absl::Status();
    return has_extras_ ? Extras()->error : *kOk;
  }
  int64_t error_until() const {
    return has_extras_ ? Extras()->error_until
                       : std::numeric_limits<int64_t>::min();
  }
  // The shared tier's version of the value, or nullptr.
  const std::string* shared_version() const {
    return has_extras_ && !Extras()->shared_version.empty()
               ? &Extras()->shared_version
               : nullptr;
  }
  // The extras, made on first use (a compact entry's times move there);
  // before publication only.
  EntryExtras& mutable_extras(const FixedTimes& fixed) {
    if (!has_extras_) {
      auto extras = std::make_unique<EntryExtras>();
      if constexpr (kCompact) extras->times = times(fixed);
      // The compact tail's active member becomes the extras' address.
      tail_.extras = extras.release();
      has_extras_ = true;
    }
    return *Extras();
  }

  // After then the entry answers nobody: its value is past `keep_until` and
  // a remembered error past `error_until`. Eviction takes such entries
  // whatever their visited bit.
  int64_t evict_after(const FixedTimes& fixed) const {
    return std::max(keep_until(fixed), error_until());
  }

 private:
  // Whether `fixed` gives back exactly `t` from what the layout stores:
  // `t.quiet_until` (kFixed), or `t.loaded_at` for all but the quiet window
  // (kFixedExpiry).
  static bool Derivable(const EntryTimes& t, const FixedTimes& fixed) {
    if constexpr (kLayout == EntryLayout::kFixedExpiry) {
      const EntryTimes d = fixed.At(t.loaded_at, t.load_duration);
      return d.expires_at == t.expires_at && d.keep_until == t.keep_until &&
             d.stale_if_error_until == t.stale_if_error_until;
    }
    int64_t loaded_at;
    if (__builtin_sub_overflow(t.quiet_until, fixed.quiet, &loaded_at)) {
      return false;
    }
    const EntryTimes d = fixed.At(loaded_at, t.load_duration);
    return d.loaded_at == t.loaded_at && d.quiet_until == t.quiet_until &&
           d.expires_at == t.expires_at && d.keep_until == t.keep_until &&
           d.stale_if_error_until == t.stale_if_error_until;
  }
  // A compact entry's load time. Exact for times SetTimes kept compact
  // (Derivable checked that nothing overflows); saturated, and never
  // undefined, for an entry whose times are not set yet (its extras copy
  // them before SetTimes replaces them).
  int64_t DerivedLoadedAt(const FixedTimes& fixed) const {
    int64_t loaded_at;
    if (__builtin_sub_overflow(quiet_until, fixed.quiet, &loaded_at)) {
      return fixed.quiet > 0 ? std::numeric_limits<int64_t>::min()
                             : std::numeric_limits<int64_t>::max();
    }
    return loaded_at;
  }
  EntryExtras* Extras() const { return tail_.extras; }

  // kFixed: one word, the load duration until there are extras, their
  // address after (`has_extras_` says which member is the active one).
  union CompactTail {
    int64_t load_duration = 0;
    EntryExtras* extras;
  };
  // kFixedExpiry: the same and the load's end (unused once there are extras).
  struct ExpiryTail {
    union {
      int64_t load_duration = 0;
      EntryExtras* extras;
    };
    int64_t loaded_at = 0;
  };
  struct FullTail {
    EntryExtras* extras = nullptr;
    int64_t loaded_at = 0;
    int64_t expires_at = 0;
    int64_t keep_until = 0;
    int64_t stale_if_error_until = 0;
    int64_t load_duration = 0;
  };
  std::conditional_t<kLayout == EntryLayout::kFixed, CompactTail,
                     std::conditional_t<kLayout == EntryLayout::kFixedExpiry,
                                        ExpiryTail, FullTail>>
      tail_;
};

// The entry that remembers a failed load of `key` for `error_ttl`, made when
// the load that started at `started` failed with `error` at `finished`. With
// `keep_value`, it keeps `current`'s value and schedule beside the error, so
// a value the policy still serves is not taken away. Copies the value: call
// without a cache lock.
template <typename K, typename V, EntryLayout kLayout>
std::unique_ptr<Entry<K, V, kLayout>> MakeErrorEntry(
    size_t hash, const K& key, const Entry<K, V, kLayout>* current,
    bool keep_value, const absl::Status& error, int64_t started,
    int64_t finished, absl::Duration error_ttl, const FixedTimes& fixed) {
  auto n = std::make_unique<Entry<K, V, kLayout>>(hash, key);
  EntryExtras& extras = n->mutable_extras(fixed);
  if (keep_value) {
    n->emplace_value(current->value());
    n->SetTimes(current->times(fixed), fixed);
    if (const std::string* version = current->shared_version()) {
      extras.shared_version = *version;
    }
  } else {
    EntryTimes t;
    t.loaded_at = finished;
    t.expires_at = std::numeric_limits<int64_t>::min();
    t.load_duration = finished - started;
    t.keep_until = AddSaturated(finished, error_ttl);
    n->SetTimes(t, fixed);
  }
  extras.error = error;
  extras.error_until = AddSaturated(finished, error_ttl);
  return n;
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ENTRY_H_
