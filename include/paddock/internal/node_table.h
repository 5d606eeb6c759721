// File: paddock/internal/node_table.h
// -----------------------------------------------------------------------------
// `NodeTable<Node>`: an open-addressing hash table of pointers to immutable
// nodes. Readers probe it without a lock inside an `EpochGuard`; one writer at
// a time (the shard's mutex) inserts, replaces and erases. Growth and
// tombstone cleanup build a new slot array, publish it and hand the old one to
// the writer's `RetireList`, which retires it once the writer's lock is
// released.

#ifndef PADDOCK_INTERNAL_NODE_TABLE_H_
#define PADDOCK_INTERNAL_NODE_TABLE_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/attributes.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/retire_list.h"

namespace paddock::internal {

// `Node` must have a `size_t hash` member.
template <typename Node>
class NodeTable {
 public:
  NodeTable() : slots_(new Slots(kMinCapacity)) {}
  ~NodeTable() { delete slots_.load(std::memory_order_relaxed); }
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // Returns the node with `hash` for which `matches(node)` holds, or nullptr.
  // Lock-free; call inside an EpochGuard (or under the writer's lock).
  template <typename Matches>
  ABSL_ATTRIBUTE_ALWAYS_INLINE Node* Find(size_t hash,
                                          const Matches& matches) const {
    const Slots* s = slots_.load(std::memory_order_acquire);
    for (size_t i = hash & s->mask;; i = (i + 1) & s->mask) {
      Node* n = s->slot[i].load(std::memory_order_acquire);
      if (n == nullptr) return nullptr;
      if (n != Tombstone() && n->hash == hash && matches(n)) return n;
    }
  }

  // The writer's operations; the caller serialises them.

  // Makes room for `live` nodes, so that Insert up to that many cannot fail.
  // May throw std::bad_alloc, leaving the table unchanged; an old slot array
  // goes to `retired`.
  void Reserve(size_t live, RetireList<Node>& retired) {
    const Slots* old = slots_.load(std::memory_order_relaxed);
    if ((live + tombstones_) * 2 <= old->mask + 1) return;
    const size_t capacity = std::max(kMinCapacity, std::bit_ceil(live * 4));
    auto* fresh = new Slots(capacity);
    for (size_t i = 0; i <= old->mask; ++i) {
      Node* n = old->slot[i].load(std::memory_order_relaxed);
      if (n == nullptr || n == Tombstone()) continue;
      size_t j = n->hash & fresh->mask;
      while (fresh->slot[j].load(std::memory_order_relaxed) != nullptr) {
        j = (j + 1) & fresh->mask;
      }
      fresh->slot[j].store(n, std::memory_order_relaxed);
    }
    tombstones_ = 0;
    slots_.store(fresh, std::memory_order_release);
    retired.AddObject(const_cast<Slots*>(old),
                      [](void* p) { delete static_cast<Slots*>(p); });
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
    for (size_t i = n->hash & s->mask;; i = (i + 1) & s->mask) {
      Node* cur = s->slot[i].load(std::memory_order_relaxed);
      if (cur == nullptr || cur == Tombstone()) {
        if (cur == Tombstone()) --tombstones_;
        s->slot[i].store(n, std::memory_order_release);
        ++live_;
        return;
      }
    }
  }

  // Puts `replacement` where `old` is; both have the same key.
  void Replace(Node* old, Node* replacement) {
    SlotOf(old).store(replacement, std::memory_order_release);
  }

  // Removes `old`.
  void Erase(Node* old) {
    SlotOf(old).store(Tombstone(), std::memory_order_release);
    --live_;
    ++tombstones_;
  }

  size_t size() const { return live_; }

  // Calls `f(node)` for every node. Writer only.
  template <typename F>
  void ForEach(const F& f) const {
    const Slots* s = slots_.load(std::memory_order_relaxed);
    for (size_t i = 0; i <= s->mask; ++i) {
      Node* n = s->slot[i].load(std::memory_order_relaxed);
      if (n != nullptr && n != Tombstone()) f(n);
    }
  }

  // Bytes of slot array, for memory accounting.
  size_t slot_bytes() const {
    return (slots_.load(std::memory_order_relaxed)->mask + 1) *
           sizeof(std::atomic<Node*>);
  }

 private:
  static constexpr size_t kMinCapacity = 8;
  // Live nodes and tombstones take at most half of the slots, so probes stay
  // short and every probe sequence meets an empty slot.

  struct Slots {
    explicit Slots(size_t capacity)
        : mask(capacity - 1), slot(new std::atomic<Node*>[capacity]) {
      for (size_t i = 0; i < capacity; ++i) {
        slot[i].store(nullptr, std::memory_order_relaxed);
      }
    }
    const size_t mask;
    const std::unique_ptr<std::atomic<Node*>[]> slot;
  };

  static Node* Tombstone() {
    static char marker;
    return reinterpret_cast<Node*>(&marker);
  }

  std::atomic<Node*>& SlotOf(Node* n) {
    Slots* s = slots_.load(std::memory_order_relaxed);
    size_t i = n->hash & s->mask;
    while (s->slot[i].load(std::memory_order_relaxed) != n) {
      i = (i + 1) & s->mask;
    }
    return s->slot[i];
  }

  std::atomic<Slots*> slots_;
  size_t live_ = 0;        // Writer only.
  size_t tombstones_ = 0;  // Writer only.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_NODE_TABLE_H_
