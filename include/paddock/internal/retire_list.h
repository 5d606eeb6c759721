// File: paddock/internal/retire_list.h
// -----------------------------------------------------------------------------
// `RetireList`: what a writer unlinks under a lock, retired (epoch.h) only
// after the lock is released. Retiring may free earlier retirements and so
// run destructors of keys and values, which must never run under a cache
// lock: a value whose destructor takes a lock the loader holds would
// deadlock.
//
// Adding never allocates, so a writer can add after it has changed the
// shared structures without a way to fail: nodes are chained through a link
// the node no longer needs once unlinked (the eviction queue's `older`), and
// there is room for a few other objects (a table's old slot array).

#ifndef PADDOCK_INTERNAL_RETIRE_LIST_H_
#define PADDOCK_INTERNAL_RETIRE_LIST_H_

#include <cassert>
#include <cstddef>

#include "paddock/internal/epoch.h"

namespace paddock::internal {

// `Node` has a `Node* older` member, free for reuse once the node is
// unlinked.
template <typename Node>
class RetireList {
 public:
  RetireList() = default;
  RetireList(const RetireList&) = delete;
  RetireList& operator=(const RetireList&) = delete;
  ~RetireList() { RetireAll(); }

  // Takes `n`, already unlinked from everything that reaches it.
  void Add(Node* n) {
    n->older = nodes_;
    nodes_ = n;
  }

  // Takes an object to free with `deleter`.
  void AddObject(void* p, void (*deleter)(void*)) {
    assert(objects_ < kMaxObjects);
    object_[objects_++] = {p, deleter};
  }

  // Retires everything taken so far. Call without holding a paddock lock.
  void RetireAll() {
    while (nodes_ != nullptr) {
      Node* n = nodes_;
      nodes_ = n->older;
      RetireObject(n);
    }
    for (size_t i = 0; i < objects_; ++i) {
      Retire(object_[i].p, object_[i].deleter);
    }
    objects_ = 0;
  }

 private:
  // One writer operation replaces at most one slot array.
  static constexpr size_t kMaxObjects = 2;

  struct Object {
    void* p;
    void (*deleter)(void*);
  };

  Node* nodes_ = nullptr;
  Object object_[kMaxObjects] = {};
  size_t objects_ = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_RETIRE_LIST_H_
