// File: paddock/internal/load_stack.h
// -----------------------------------------------------------------------------
// The loads running on the current thread, innermost first, so a loader that
// calls `Get` for its own key is detected instead of deadlocking.

#ifndef PADDOCK_INTERNAL_LOAD_STACK_H_
#define PADDOCK_INTERNAL_LOAD_STACK_H_

#include <cstddef>

namespace paddock::internal {

struct LoadFrame {
  const void* cache;
  size_t hash;
  const void* key;
  const LoadFrame* outer;
};

inline thread_local const LoadFrame* load_stack_top = nullptr;

// Marks a load of `key` by `cache` as running on this thread for its scope.
class LoadScope {
 public:
  LoadScope(const void* cache, size_t hash, const void* key)
      : frame_{cache, hash, key, load_stack_top} {
    load_stack_top = &frame_;
  }
  ~LoadScope() { load_stack_top = frame_.outer; }
  LoadScope(const LoadScope&) = delete;
  LoadScope& operator=(const LoadScope&) = delete;

 private:
  LoadFrame frame_;
};

// Returns whether this thread is inside a load of a key equal to `key` by
// `cache`.
template <typename K, typename Eq>
bool IsLoadingOnThisThread(const void* cache, size_t hash, const K& key,
                           const Eq& eq) {
  for (const LoadFrame* f = load_stack_top; f != nullptr; f = f->outer) {
    if (f->cache == cache && f->hash == hash &&
        eq(*static_cast<const K*>(f->key), key)) {
      return true;
    }
  }
  return false;
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOAD_STACK_H_
