// File: paddock/internal/expiry_heap.h
// -----------------------------------------------------------------------------
// `ExpiryHeap<Node>`: an indexed binary min-heap of nodes by
// `evict_after()`, the time after which a node answers nobody any more, so
// eviction can take such a node first, in O(log n). (A node past its ttl but
// still served stale is live: evicting it would make its next caller wait.)
//
// Intrusive: `Node` has `int64_t evict_after() const` and an unsigned
// `heap_index`
// (a `uint32_t` is enough for 4 billion entries and keeps nodes small). Not
// thread-safe: the shard's mutex guards it.

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
    n->heap_index = static_cast<Index>(heap_.size());
    heap_.push_back(n);
    SiftUp(n->heap_index);
  }

  void Remove(Node* n) {
    const size_t i = n->heap_index;
    Node* last = heap_.back();
    heap_.pop_back();
    if (last != n) Place(i, last);
  }

  // Puts `replacement` at `old`'s place and restores the order.
  void Replace(Node* old, Node* replacement) {
    Place(old->heap_index, replacement);
  }

  // The node whose `evict_after()` comes first, or nullptr if empty.
  Node* Top() const { return heap_.empty() ? nullptr : heap_.front(); }

  void Clear() { heap_.clear(); }
  size_t size() const { return heap_.size(); }

 private:
  void Place(size_t i, Node* n) {
    heap_[i] = n;
    n->heap_index = static_cast<Index>(i);
    SiftUp(i);
    SiftDown(n->heap_index);
  }

  void Swap(size_t a, size_t b) {
    std::swap(heap_[a], heap_[b]);
    heap_[a]->heap_index = static_cast<Index>(a);
    heap_[b]->heap_index = static_cast<Index>(b);
  }

  void SiftUp(size_t i) {
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (heap_[parent]->evict_after() <= heap_[i]->evict_after()) return;
      Swap(i, parent);
      i = parent;
    }
  }

  void SiftDown(size_t i) {
    for (;;) {
      size_t least = i;
      for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
        if (heap_[c]->evict_after() < heap_[least]->evict_after()) least = c;
      }
      if (least == i) return;
      Swap(i, least);
      i = least;
    }
  }

  std::vector<Node*> heap_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_EXPIRY_HEAP_H_
