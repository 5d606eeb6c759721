// File: bench/replay/shared_arena.h
// -----------------------------------------------------------------------------
// `SharedArena`: memory every process of a fleet shares. It is mapped
// (MAP_SHARED | MAP_ANONYMOUS) before the pods are forked, so it sits at the
// same address in each of them, and what is placed in it is shared the way it
// is between threads: lock-free atomics, and plain data written before a
// release store and read after the matching acquire load.

#ifndef PADDOCK_BENCH_REPLAY_SHARED_ARENA_H_
#define PADDOCK_BENCH_REPLAY_SHARED_ARENA_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace paddock::replay {

class SharedArena {
 public:
  // Maps `bytes` (zero-filled). Throws std::bad_alloc if mmap fails.
  explicit SharedArena(size_t bytes) : size_(bytes) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<unsigned char*>(p);
  }

  // Unmaps. The objects in it are not destroyed: only trivially
  // destructible types are placed here.
  ~SharedArena() { munmap(base_, size_); }

  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // Constructs a `T` in the arena. Throws std::bad_alloc when it is full.
  // Call before the fork: the allocation itself is not shared.
  template <typename T, typename... Args>
  T* New(Args&&... args) {
    static_assert(std::is_trivially_destructible_v<T>);
    return new (Allocate(sizeof(T), alignof(T))) T(std::forward<Args>(args)...);
  }

  // Constructs `n` value-initialised `T`s in the arena.
  template <typename T>
  T* NewArray(size_t n) {
    static_assert(std::is_trivially_destructible_v<T>);
    T* first = static_cast<T*>(Allocate(sizeof(T) * n, alignof(T)));
    for (size_t i = 0; i < n; ++i) new (first + i) T();
    return first;
  }

 private:
  void* Allocate(size_t bytes, size_t align) {
    const size_t start = (used_ + align - 1) / align * align;
    if (start + bytes > size_) throw std::bad_alloc();
    used_ = start + bytes;
    return base_ + start;
  }

  unsigned char* base_ = nullptr;
  size_t size_;
  size_t used_ = 0;
};

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_SHARED_ARENA_H_
