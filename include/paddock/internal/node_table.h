// File: paddock/internal/node_table.h
// -----------------------------------------------------------------------------
// `NodeTable<Node>`: an open-addressing hash table of pointers to immutable
// nodes. Readers probe it without a lock inside an `EpochGuard`; one writer at
// a time (the shard's mutex) inserts, replaces and erases. Growth and
// tombstone cleanup build a new slot array, publish it and hand the old one to
// the writer's `RetireList`, which retires it once the writer's lock is
// released.
//
// A slot keeps a few bits of its node's hash in the pointer's alignment bits,
// so a probe passes a node of another key without reading it: on a large
// table every node read is a cache miss, and it was most of a lookup's time
// (docs/benchmarks.md, "Where the time goes").

#ifndef PADDOCK_INTERNAL_NODE_TABLE_H_
#define PADDOCK_INTERNAL_NODE_TABLE_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "absl/base/attributes.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/retire_list.h"

namespace paddock::internal {

// The alignment every node's address has: `Node::kAddressAlignment` where
// the node is always allocated so (entry.h), else its type's.
template <typename Node>
constexpr size_t NodeAddressAlignment() {
  if constexpr (requires { Node::kAddressAlignment; }) {
    return std::max(Node::kAddressAlignment, alignof(Node));
  } else {
    return alignof(Node);
  }
}

// `Node` must have an unsigned `hash` member of at least 32 bits (only the
// low 32 bits of a hash are used: a node may keep just those) and an address
// alignment of at least 8 (16 gives each slot three bits of hash instead of
// two).
template <typename Node>
class NodeTable {
  static_assert(NodeAddressAlignment<Node>() >= 8,
                "a slot keeps hash bits in its low bits");

 public:
  NodeTable() : slots_(Slots::Make(kMinCapacity)) {}
  ~NodeTable() { Slots::Destroy(slots_.load(std::memory_order_relaxed)); }
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // Returns the node with `hash` for which `matches(node)` holds, or nullptr.
  // Lock-free; call inside an EpochGuard (or under the writer's lock).
  template <typename Matches>
  ABSL_ATTRIBUTE_ALWAYS_INLINE Node* Find(size_t hash,
                                          const Matches& matches) const {
    const Slots* s = slots_.load(std::memory_order_acquire);
    const uintptr_t tag = TagOf(hash);
    const uint32_t low = static_cast<uint32_t>(hash);
    for (size_t i = low & s->mask;; i = (i + 1) & s->mask) {
      Slot v = s->slot()[i].load(std::memory_order_acquire);
      if (v == kEmpty) return nullptr;
      if (LowBits(v) != tag) continue;  // Another key, or a tombstone.
      Node* n = reinterpret_cast<Node*>(v - tag);
      if (static_cast<uint32_t>(n->hash) == low && matches(n)) return n;
    }
  }

  // The writer's operations; the caller serialises them.

  // Makes room for `live` nodes, so that Insert up to that many cannot fail.
  // May throw std::bad_alloc, leaving the table unchanged; an old slot array
  // goes to `retired`.
  void Reserve(size_t live, RetireList<Node>& retired) {
    const Slots* old = slots_.load(std::memory_order_relaxed);
    if ((live + tombstones_) * 2 <= old->mask + 1) return;
    // After growth a third to a sixth of the slots are taken: a doubling,
    // not more (slots are a fifth of an entry's bytes). Tombstone cleanup at
    // a quarter full keeps the size.
    const size_t capacity = std::max(kMinCapacity, std::bit_ceil(live * 3));
    Slots* fresh = Slots::Make(capacity);
    for (size_t i = 0; i <= old->mask; ++i) {
      Slot v = old->slot()[i].load(std::memory_order_relaxed);
      if (v == kEmpty || v == Tombstone()) continue;
      size_t j = HashOf(NodeOf(v)) & fresh->mask;
      while (fresh->slot()[j].load(std::memory_order_relaxed) != kEmpty) {
        j = (j + 1) & fresh->mask;
      }
      fresh->slot()[j].store(v, std::memory_order_relaxed);
    }
    tombstones_ = 0;
    slots_.store(fresh, std::memory_order_release);
    retired.AddObject(const_cast<Slots*>(old),
                      [](void* p) { Slots::Destroy(static_cast<Slots*>(p)); });
  }

  // Adds `n`, whose key is not present. May throw std::bad_alloc (growing),
  // leaving the table unchanged.
  void Insert(Node* n, RetireList<Node>& retired) {
    Reserve(live_ + 1, retired);
    InsertReserved(n);
  }

  // Adds `n`, whose key is not present, into room made by Reserve. Never
  // throws.
  void InsertReserved(Node* n) {
    Slots* s = slots_.load(std::memory_order_relaxed);
    for (size_t i = HashOf(n) & s->mask;; i = (i + 1) & s->mask) {
      Slot cur = s->slot()[i].load(std::memory_order_relaxed);
      if (cur == kEmpty || cur == Tombstone()) {
        if (cur == Tombstone()) --tombstones_;
        s->slot()[i].store(Tagged(n), std::memory_order_release);
        ++live_;
        return;
      }
    }
  }

  // Puts `replacement` where `old` is; both have the same key.
  void Replace(Node* old, Node* replacement) {
    SlotOf(old).store(Tagged(replacement), std::memory_order_release);
  }

  // Removes `old`.
  void Erase(Node* old) {
    Slots* s = slots_.load(std::memory_order_relaxed);
    size_t i = IndexOf(s, old);
    --live_;
    if (s->slot()[(i + 1) & s->mask].load(std::memory_order_relaxed) !=
        kEmpty) {
      s->slot()[i].store(Tombstone(), std::memory_order_release);
      ++tombstones_;
      return;
    }
    // Followed by an empty slot, the slot can be empty too, and so can the
    // tombstones before it: every probe through them stops at that empty
    // slot anyway, so a reader in the middle of one finds what it would have.
    // Without this, eviction fills the table with tombstones and each
    // cleanup rebuilds the whole slot array.
    s->slot()[i].store(kEmpty, std::memory_order_release);
    for (i = (i - 1) & s->mask;
         s->slot()[i].load(std::memory_order_relaxed) == Tombstone();
         i = (i - 1) & s->mask) {
      s->slot()[i].store(kEmpty, std::memory_order_release);
      --tombstones_;
    }
  }

  // Starts fetching the line of the slot where `n`'s probe begins (where a
  // later Erase or Replace of `n` looks first). Writer only.
  void PrefetchSlotOf(const Node* n) const {
    const Slots* s = slots_.load(std::memory_order_relaxed);
    __builtin_prefetch(s->slot() + (HashOf(n) & s->mask));
  }

  size_t size() const { return live_; }

  // Calls `f(node)` for every node. Writer only.
  template <typename F>
  void ForEach(const F& f) const {
    const Slots* s = slots_.load(std::memory_order_relaxed);
    for (size_t i = 0; i <= s->mask; ++i) {
      Slot v = s->slot()[i].load(std::memory_order_relaxed);
      if (v != kEmpty && v != Tombstone()) f(NodeOf(v));
    }
  }

  // Bytes of slot array, for memory accounting.
  size_t slot_bytes() const {
    return (slots_.load(std::memory_order_relaxed)->mask + 1) *
           sizeof(std::atomic<Slot>);
  }

 private:
  static constexpr size_t kMinCapacity = 8;
  // Live nodes and tombstones take at most half of the slots, so probes stay
  // short and every probe sequence meets an empty slot.

  // A slot holds a node's address plus `kTagBits` of its hash, a byte offset
  // into the node that its alignment leaves free (a `char*`, so that no
  // pointer is ever made from an integer). The bit above the tag marks a
  // tombstone (the address of a byte array of ours, never a node), so no
  // tag ever matches one and a probe needs a single comparison per slot.
  using Slot = char*;
  static constexpr int kTagBits = NodeAddressAlignment<Node>() >= 16 ? 3 : 2;
  static constexpr uintptr_t kMarker = uintptr_t{1} << kTagBits;
  static constexpr uintptr_t kLowMask = 2 * kMarker - 1;
  static constexpr Slot kEmpty = nullptr;
  alignas(16) static inline char tombstone_bytes_[16];
  static Slot Tombstone() { return tombstone_bytes_ + kMarker; }

  // The tag comes from the top bits of the hash's low half: the lowest bits
  // pick the slot, and the high half picks the cache's shard (so within a
  // shard its top bits are all alike).
  static uintptr_t TagOf(size_t hash) {
    return static_cast<uintptr_t>(static_cast<uint32_t>(hash) >>
                                  (32 - kTagBits));
  }
  static uint32_t HashOf(const Node* n) {
    return static_cast<uint32_t>(n->hash);
  }
  static uintptr_t LowBits(Slot v) {
    return reinterpret_cast<uintptr_t>(v) & kLowMask;
  }
  static Slot Tagged(Node* n) {
    return reinterpret_cast<char*>(n) + TagOf(n->hash);
  }
  static Node* NodeOf(Slot v) {
    return reinterpret_cast<Node*>(v - LowBits(v));
  }

  // The mask and the slots in one allocation, the slots right after the
  // mask: a probe computes their address instead of loading it.
  struct Slots {
    static Slots* Make(size_t capacity) {
      void* p =
          ::operator new(sizeof(Slots) + capacity * sizeof(std::atomic<Slot>));
      auto* s = new (p) Slots(capacity - 1);
      for (size_t i = 0; i < capacity; ++i) {
        new (s->slot() + i) std::atomic<Slot>(kEmpty);
      }
      return s;
    }
    // Atomics of pointers are trivially destructible: nothing to run first.
    static void Destroy(Slots* s) { ::operator delete(s); }

    std::atomic<Slot>* slot() {
      return reinterpret_cast<std::atomic<Slot>*>(this + 1);
    }
    const std::atomic<Slot>* slot() const {
      return reinterpret_cast<const std::atomic<Slot>*>(this + 1);
    }

    const size_t mask;

   private:
    explicit Slots(size_t m) : mask(m) {}
  };
  static_assert(sizeof(Slots) % alignof(std::atomic<Slot>) == 0,
                "the slots follow the header at their alignment");

  static size_t IndexOf(const Slots* s, Node* n) {
    const Slot v = Tagged(n);
    size_t i = HashOf(n) & s->mask;
    while (s->slot()[i].load(std::memory_order_relaxed) != v) {
      i = (i + 1) & s->mask;
    }
    return i;
  }

  std::atomic<Slot>& SlotOf(Node* n) {
    Slots* s = slots_.load(std::memory_order_relaxed);
    return s->slot()[IndexOf(s, n)];
  }

  // Loaded by every lookup, stored only when the array is replaced; the
  // writer's counters go on the next line, so that an insert or erase on one
  // core does not take from the others the line their lookups read.
  std::atomic<Slots*> slots_;
  alignas(64) size_t live_ = 0;  // Writer only.
  size_t tombstones_ = 0;        // Writer only.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_NODE_TABLE_H_
