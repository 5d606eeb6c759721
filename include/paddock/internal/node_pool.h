// File: paddock/internal/node_pool.h
// -----------------------------------------------------------------------------
// `NodePool<kSize, kAlign>`: a per-thread free list of memory blocks of one
// size, for a cache's entries. Every miss and every write allocates an entry
// and, through epoch reclamation, frees another in batches of hundreds; glibc
// keeps only seven blocks per size in its per-thread cache, so most of those
// calls took its slower paths (about 300 instructions per miss,
// docs/benchmarks.md). A thread keeps up to `kMaxCached` blocks it freed
// (128 KiB) and hands them out again; beyond that, and at thread exit, blocks
// go back to `operator delete`.
//
// Under AddressSanitizer and ThreadSanitizer the pool is off (every block
// goes to the allocator, which they replace), so that a use of a freed entry,
// or a race with its reuse, is still reported as such.

#ifndef PADDOCK_INTERNAL_NODE_POOL_H_
#define PADDOCK_INTERNAL_NODE_POOL_H_

#include <cstddef>
#include <new>

namespace paddock::internal {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kNodePoolEnabled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kNodePoolEnabled = false;
#else
inline constexpr bool kNodePoolEnabled = true;
#endif
#else
inline constexpr bool kNodePoolEnabled = true;
#endif

template <size_t kSize, size_t kAlign>
class NodePool {
  static constexpr size_t kLinkBytes = sizeof(void*);
  static_assert(kSize >= kLinkBytes, "a free block holds the next link");

 public:
  // As many blocks as 128 KiB hold (2,048 entries of a uint64_t cache): an
  // epoch advance frees what every thread retired in its interval, on the
  // thread that ran it (about 1,200 entries in a two-thread ReadWrite run;
  // with 64 KiB a fifth of them went to free() while the other thread's pool
  // ran dry and called malloc: 5 % of the run, docs/benchmarks.md). None for
  // entries over 128 KiB: a thread never holds more than that.
  static constexpr size_t kMaxCached = size_t{128} * 1024 / kSize;

  // A block of kSize bytes aligned to kAlign. May throw std::bad_alloc.
  static void* Allocate() {
    if constexpr (kNodePoolEnabled) {
      List& list = ThreadList();
      if (list.head != nullptr) {
        Block* b = list.head;
        list.head = b->next;
        --list.count;
        return b;
      }
    }
    return New();
  }

  // Takes back a block from Allocate, on any thread.
  static void Free(void* p) {
    if constexpr (kNodePoolEnabled) {
      List& list = ThreadList();
      if (list.count < kMaxCached && !list.closed) [[likely]] {
        if (list.count == 0 && !list.owned) Own(list);
        list.head = ::new (p) Block{list.head};
        ++list.count;
        return;
      }
    }
    Delete(p);
  }

  // Returns the calling thread's cached blocks to the allocator (tests, and
  // thread exit).
  static void Release() {
    List& list = ThreadList();
    while (list.head != nullptr) {
      Block* b = list.head;
      list.head = b->next;
      Delete(b);
    }
    list.count = 0;
  }

  // Blocks the calling thread holds now, for tests.
  static size_t cached() { return ThreadList().count; }

 private:
  struct Block {
    Block* next;
  };
  // Trivially destructible, so that it can be used at any point of thread
  // exit; `Owner` empties it.
  struct List {
    Block* head;
    size_t count;
    bool owned;   // An Owner will empty it at thread exit.
    bool closed;  // Past that: blocks go straight back.
  };
  struct Owner {
    ~Owner() {
      Release();
      ThreadList().closed = true;
    }
  };

  static List& ThreadList() {
    static thread_local List list{};
    return list;
  }
  static void Own(List& list) {
    static thread_local Owner owner;
    (void)owner;
    list.owned = true;
  }

  static constexpr bool kPlainNewAligns =
      __STDCPP_DEFAULT_NEW_ALIGNMENT__ >= kAlign;
  static void* New() {
    if constexpr (kPlainNewAligns) {
      return ::operator new(kSize);
    } else {
      return ::operator new (kSize, std::align_val_t{kAlign});
    }
  }
  static void Delete(void* p) {
    if constexpr (kPlainNewAligns) {
      ::operator delete(p);
    } else {
      ::operator delete (p, std::align_val_t{kAlign});
    }
  }
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_NODE_POOL_H_
