// File: paddock/internal/in_flight_set.h
// -----------------------------------------------------------------------------
// `InFlightSet`: a shard's registrations of the loads in flight, one per key.
// A shard rarely has more than a few (a blocking load holds its thread), and
// every miss registers one, finds it again and erases it: in an
// absl::flat_hash_set those three steps cost about 140 instructions per miss
// (docs/benchmarks.md). The first `kInline` registrations live in an array
// searched by hash; only past them does the set spill into a hash set, so a
// shard with a thousand loads in flight still finds each in constant time.
//
// Not thread-safe: the shard's mutex guards it. No operation destroys a
// flight: the caller moves it out before erasing (no destructor runs under
// the lock).

#ifndef PADDOCK_INTERNAL_IN_FLIGHT_SET_H_
#define PADDOCK_INTERNAL_IN_FLIGHT_SET_H_

#include <array>
#include <cassert>
#include <concepts>
#include <cstddef>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace paddock::internal {

// A foreground load whose leader runs it on its own thread from start to
// end, registered without a flight: most loads are joined by nobody, and a
// flight (an allocation, a mutex, a condition variable, reference counts)
// was most of what registering one cost. The first caller to join makes the
// flight, under the shard's mutex. Lives on the leader's stack; the leader
// sees it unregistered, under the mutex, before it returns.
//
// Uncoalesced loads (every caller loads) register the same way, only to
// learn whether a write superseded them: the first runner pending, and a
// second one hands the registration to a flight that counts them both.
template <typename Flight>
struct PendingLoad {
  int64_t started_at = 0;
  // Made by the first joiner (or co-runner), under the shard's mutex; final
  // once the load is unregistered.
  std::shared_ptr<Flight> flight;
  // Set by the leader once its load completed (it is unregistered then).
  bool completed = false;
  // An uncoalesced runner left the key's runners (under the mutex): it
  // counts itself out once only.
  bool left_runners = false;
};

// A registered load: its flight, which carries the key and its hash
// (computed once by the cache), or a pending load and its leader's key.
// Moving one moves only pointers, so no key is copied or destroyed under the
// lock.
template <typename K, typename Flight>
struct Registration {
  // The flight's own key, or the pending load's leader's (an equal key may
  // take its place).
  mutable const K* key = nullptr;
  size_t hash = 0;
  mutable std::shared_ptr<Flight> flight;          // Moved out only to erase.
  mutable PendingLoad<Flight>* pending = nullptr;  // Instead of `flight`.
};

template <typename K, typename Flight, typename Eq>
class InFlightSet {
 public:
  using Entry = Registration<K, Flight>;
  // Registrations kept in the array before the set spills over.
  static constexpr size_t kInline = 4;

  // Compares keys with `*eq`, which must outlive the set (the cache's own
  // Eq: a stateful one is never copied, nor called while default-made).
  explicit InFlightSet(const Eq* eq)
      : eq_(eq), overflow_(0, Hash(), KeyEq{eq}) {}
  // With a default-made Eq, shared by every set of this type; with an Eq
  // that cannot be default-made, call set_key_eq() before first use.
  InFlightSet() : InFlightSet(DefaultEq()) {}
  InFlightSet(const InFlightSet&) = delete;
  InFlightSet& operator=(const InFlightSet&) = delete;

  // Compares keys with `*eq` from now on. Only while the set is empty.
  void set_key_eq(const Eq* eq) {
    assert(size() == 0);
    eq_ = eq;
    overflow_ = Overflow(0, Hash(), KeyEq{eq});
  }
  const Eq* key_eq() const { return eq_; }

  // The registration of `key` (of `hash`), or nullptr. Valid until the set
  // next changes.
  Entry* Find(const K& key, size_t hash) {
    for (size_t i = 0; i < inline_size_; ++i) {
      if (inline_[i].hash == hash && (*eq_)(*inline_[i].key, key)) {
        return &inline_[i];
      }
    }
    if (overflow_.empty()) [[likely]] {
      return nullptr;
    }
    auto it = overflow_.find(Key{&key, hash});
    return it == overflow_.end() ? nullptr : Mutable(*it);
  }
  const Entry* Find(const K& key, size_t hash) const {
    return const_cast<InFlightSet*>(this)->Find(key, hash);
  }

  // The registration of `key`, or if there is none, `make()` (an Entry for
  // `key` and `hash`) inserted. Returns it and whether it was inserted. May
  // throw (growth of the spill set), leaving the set unchanged.
  template <typename Make>
  std::pair<Entry*, bool> FindOrInsert(const K& key, size_t hash,
                                       const Make& make) {
    if (Entry* r = Find(key, hash)) return {r, false};
    if (inline_size_ < kInline) {
      Entry& slot = inline_[inline_size_];
      slot = make();
      ++inline_size_;
      return {&slot, true};
    }
    auto [it, inserted] = overflow_.insert(make());
    assert(inserted);
    return {Mutable(*it), inserted};
  }

  // Removes `r`, a registration of this set whose flight was moved out.
  // Compares no keys (a leader whose key comparison threw erases by
  // address), so never throws.
  void Erase(Entry* r) {
    assert(r->flight == nullptr);
    if (r >= inline_.data() && r < inline_.data() + inline_size_) {
      // The last one fills the hole; what is left past the end (pointers,
      // a moved-from flight) is never read.
      Entry& last = inline_[--inline_size_];
      if (r != &last) *r = std::move(last);
      return;
    }
    overflow_.erase(At{r});
  }

  // The first registration for which `pred` holds, or nullptr (a scan).
  template <typename Pred>
  Entry* FindIf(const Pred& pred) {
    for (size_t i = 0; i < inline_size_; ++i) {
      if (pred(inline_[i])) return &inline_[i];
    }
    for (const Entry& r : overflow_) {
      if (pred(r)) return Mutable(r);
    }
    return nullptr;
  }

  // Calls `f(registration)` for each.
  template <typename F>
  void ForEach(const F& f) const {
    for (size_t i = 0; i < inline_size_; ++i) f(inline_[i]);
    for (const Entry& r : overflow_) f(r);
  }

  size_t size() const { return inline_size_ + overflow_.size(); }

  // Exchanges the registrations of two sets; each keeps its Eq.
  void swap(InFlightSet& other) {
    assert(eq_ == other.eq_);  // The spill sets' comparisons move with them.
    std::swap(inline_, other.inline_);
    std::swap(inline_size_, other.inline_size_);
    overflow_.swap(other.overflow_);
  }

 private:
  // A spilled registration, which a hash set hands out const: what the set
  // compares (the hash, the key's value) never changes, and the rest is
  // mutable anyway.
  static Entry* Mutable(const Entry& r) { return const_cast<Entry*>(&r); }

  // What a lookup of the spill set passes: the caller's key and its hash.
  struct Key {
    const K* key;
    size_t hash;
  };
  // What Erase passes: the registration itself, found by its address.
  struct At {
    const Entry* r;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Entry& r) const { return r.hash; }
    size_t operator()(const Key& k) const { return k.hash; }
    size_t operator()(const At& a) const { return a.r->hash; }
  };
  struct KeyEq {
    using is_transparent = void;
    static const K& KeyOf(const Entry& r) { return *r.key; }
    static const K& KeyOf(const Key& k) { return *k.key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return a.hash == b.hash && (*eq)(KeyOf(a), KeyOf(b));
    }
    bool operator()(const Entry& e, const At& a) const { return &e == a.r; }
    bool operator()(const At& a, const Entry& e) const { return &e == a.r; }
    const Eq* eq;
  };
  using Overflow = absl::flat_hash_set<Entry, Hash, KeyEq>;

  // A default-made Eq for the sets that are given none; nullptr (set one
  // before use) where Eq cannot be default-made.
  static const Eq* DefaultEq() {
    if constexpr (std::default_initializable<Eq>) {
      // Never destroyed: a set may outlive static destruction's order.
      static const Eq* const kDefault = new Eq();
      return kDefault;
    } else {
      return nullptr;
    }
  }

  const Eq* eq_;
  std::array<Entry, kInline> inline_{};  // [0, inline_size_) in use.
  size_t inline_size_ = 0;
  Overflow overflow_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_IN_FLIGHT_SET_H_
