// File: paddock/internal/expiry_heap.h
// -----------------------------------------------------------------------------
// `ExpiryHeap<Node>`: an indexed binary min-heap of nodes by
// `evict_after()`, the time after which a node answers nobody any more, so
// eviction can take such a node first, in O(log n). (A node past its ttl but
// still served stale is live: evicting it would make its next caller wait.)
//
// Intrusive: `Node` has `int64_t evict_after() const`, read once when the
// node enters (it must not change while the node is in the heap), and an
// unsigned `heap_index` (a `uint32_t` is enough for 4 billion entries and
// keeps nodes small). Not thread-safe: the shard's mutex guards it.

#ifndef PADDOCK_INTERNAL_EXPIRY_HEAP_H_
#define PADDOCK_INTERNAL_EXPIRY_HEAP_H_

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace paddock::internal {

template <typename Node>
class ExpiryHeap {
  using Index = decltype(Node::heap_index);

 public:
  // Makes room for one more node, so that the next Push cannot fail. May
  // throw std::bad_alloc, leaving the heap unchanged.
  void ReserveOne() {
    if (heap_.size() == heap_.capacity()) {
      heap_.reserve(std::max<size_t>(16, 2 * heap_.capacity()));
    }
  }

  // Adds `n`. May throw std::bad_alloc unless ReserveOne() came first.
  void Push(Node* n) {
    heap_.push_back(Item{n->evict_after(), n});
    SiftUp(heap_.size() - 1);
  }

  void Remove(Node* n) {
    const size_t i = n->heap_index;
    const Item last = heap_.back();
    heap_.pop_back();
    if (last.node != n) Place(i, last);
  }

  // Puts `replacement` at `old`'s place and restores the order.
  void Replace(Node* old, Node* replacement) {
    Place(old->heap_index, Item{replacement->evict_after(), replacement});
  }

  // The node whose `evict_after()` comes first, or nullptr if empty.
  Node* Top() const { return heap_.empty() ? nullptr : heap_.front().node; }

  void Clear() { heap_.clear(); }
  size_t size() const { return heap_.size(); }

 private:
  // A node's key is kept beside it: sifting compares keys in the array and
  // never reads a node, which in a large shard is a cache miss each
  // (docs/benchmarks.md, "Where the time went"). Nodes are immutable once
  // stored, so the key cannot go stale.
  struct Item {
    int64_t key;
    Node* node;
  };

  // The sifts set `heap_index` where the item ends.
  void Place(size_t i, Item item) {
    heap_[i] = item;
    SiftDown(SiftUp(i));
  }

  // Moves the item at `i` up to its place; returns where it ends.
  size_t SiftUp(size_t i) {
    const Item item = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (heap_[parent].key <= item.key) break;
      Put(i, heap_[parent]);
      i = parent;
    }
    Put(i, item);
    return i;
  }

  void SiftDown(size_t i) {
    const Item item = heap_[i];
    const size_t size = heap_.size();
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= size) break;
      if (child + 1 < size && heap_[child + 1].key < heap_[child].key) {
        ++child;
      }
      if (heap_[child].key >= item.key) break;
      Put(i, heap_[child]);
      i = child;
    }
    Put(i, item);
  }

  void Put(size_t i, const Item& item) {
    heap_[i] = item;
    item.node->heap_index = static_cast<Index>(i);
  }

  std::vector<Item> heap_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_EXPIRY_HEAP_H_
