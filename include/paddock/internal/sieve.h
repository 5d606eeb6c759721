// File: paddock/internal/sieve.h
// -----------------------------------------------------------------------------
// `Sieve<Node>`: the SIEVE eviction queue (Zhang et al., NSDI 2024). New nodes
// enter at the head; a hand walks from the tail toward the head, clearing
// visited bits, and evicts the first node it finds unvisited. A hit only sets
// a bit, so reads never reorder the queue or take a lock.
//
// Intrusive: `Node` has `Node* older`, `Node* newer` and
// `std::atomic<bool> visited`. Not thread-safe: the shard's mutex guards it;
// only `visited` is written by readers.

#ifndef PADDOCK_INTERNAL_SIEVE_H_
#define PADDOCK_INTERNAL_SIEVE_H_

#include <atomic>

namespace paddock::internal {

template <typename Node>
class Sieve {
 public:
  // Adds `n` as the newest node.
  void Push(Node* n) {
    n->older = head_;
    n->newer = nullptr;
    if (head_ != nullptr) head_->newer = n;
    head_ = n;
    if (tail_ == nullptr) tail_ = n;
  }

  // Unlinks `n`.
  void Remove(Node* n) {
    if (hand_ == n) hand_ = n->newer;
    (n->older != nullptr ? n->older->newer : tail_) = n->newer;
    (n->newer != nullptr ? n->newer->older : head_) = n->older;
    n->older = n->newer = nullptr;
  }

  // Puts `replacement` at `old`'s place, keeping its visited bit.
  void Replace(Node* old, Node* replacement) {
    replacement->older = old->older;
    replacement->newer = old->newer;
    (old->older != nullptr ? old->older->newer : tail_) = replacement;
    (old->newer != nullptr ? old->newer->older : head_) = replacement;
    if (hand_ == old) hand_ = replacement;
    if (old->visited.load(std::memory_order_relaxed)) {
      replacement->visited.store(true, std::memory_order_relaxed);
    }
  }

  // Returns the node SIEVE evicts next (still linked), or nullptr if empty.
  // Clears the visited bits the hand passes.
  Node* Victim() {
    return Victim([](const Node*) { return false; });
  }

  // The same, except that the hand also stops at a visited node for which
  // `dead(node)` holds (one nobody may be served any more): expiry checked
  // where the hand passes, with no order of its own to keep.
  template <typename Dead>
  Node* Victim(const Dead& dead) {
    Node* n = hand_ != nullptr ? hand_ : tail_;
    while (n != nullptr && n->visited.load(std::memory_order_relaxed) &&
           !dead(n)) {
      n->visited.store(false, std::memory_order_relaxed);
      n = n->newer != nullptr ? n->newer : tail_;
    }
    hand_ = n;
    return n;
  }

  Node* oldest() const { return tail_; }

  // The node the hand examines next, or nullptr if empty.
  Node* next() const { return hand_ != nullptr ? hand_ : tail_; }

 private:
  Node* head_ = nullptr;  // Newest.
  Node* tail_ = nullptr;  // Oldest.
  Node* hand_ = nullptr;  // Next to examine; nullptr means the tail.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SIEVE_H_
