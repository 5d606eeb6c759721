// File: paddock/internal/expiry_heap.h
// -----------------------------------------------------------------------------
// `ExpiryHeap<Node>`: an indexed binary min-heap of nodes by `expires_at`, so
// eviction can take an expired entry first in O(log n).
//
// Intrusive: `Node` has `int64_t expires_at` and an unsigned `heap_index`
// (a `uint32_t` is enough for 4 billion entries and keeps nodes small). Not
// thread-safe: the shard's mutex guards it.

#ifndef PADDOCK_INTERNAL_EXPIRY_HEAP_H_
#define PADDOCK_INTERNAL_EXPIRY_HEAP_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace paddock::internal {

template <typename Node>
class ExpiryHeap {
  using Index = decltype(Node::heap_index);

 public:
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

  // The node expiring first, or nullptr if empty.
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
      if (heap_[parent]->expires_at <= heap_[i]->expires_at) return;
      Swap(i, parent);
      i = parent;
    }
  }

  void SiftDown(size_t i) {
    for (;;) {
      size_t least = i;
      for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
        if (heap_[c]->expires_at < heap_[least]->expires_at) least = c;
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
