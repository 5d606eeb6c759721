// File: bench/micro/fifo_eviction.h
// -----------------------------------------------------------------------------
// `FifoEviction`: the bound a hand-written cache usually gets, first in, first
// out. The hand-written adapters use it so that every competitor holds at
// most `capacity` entries (an unbounded map would win the Zipf hit ratio by
// keeping all 1M keys). It costs nothing on a hit and one ring write per
// insertion.

#ifndef PADDOCK_BENCH_MICRO_FIFO_EVICTION_H_
#define PADDOCK_BENCH_MICRO_FIFO_EVICTION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace paddock_bench {

class FifoEviction {
 public:
  explicit FifoEviction(size_t capacity) : ring_(capacity) {}

  // Records the insertion of `key`, which is not present. Returns the key to
  // erase to stay within the capacity, if any. Not thread-safe.
  std::optional<uint64_t> Inserted(uint64_t key) {
    std::optional<uint64_t> victim;
    if (size_ == ring_.size()) {
      victim = ring_[next_];
    } else {
      ++size_;
    }
    ring_[next_] = key;
    next_ = next_ + 1 == ring_.size() ? 0 : next_ + 1;
    return victim;
  }

 private:
  std::vector<uint64_t> ring_;
  size_t next_ = 0;
  size_t size_ = 0;
};

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_FIFO_EVICTION_H_
