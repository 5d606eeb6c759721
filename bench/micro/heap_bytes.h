// File: bench/micro/heap_bytes.h
// -----------------------------------------------------------------------------
// `HeapBytesInUse()`: glibc's count of heap bytes allocated and not freed, in
// every arena and in mmap'd blocks, allocator overhead included. The memory
// workload takes the difference around building a cache.

#ifndef PADDOCK_BENCH_MICRO_HEAP_BYTES_H_
#define PADDOCK_BENCH_MICRO_HEAP_BYTES_H_

#include <malloc.h>  // mallinfo2 (glibc >= 2.33)

#include <cstddef>

namespace paddock_bench {

inline size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_HEAP_BYTES_H_
