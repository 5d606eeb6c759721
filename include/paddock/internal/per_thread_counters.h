// File: paddock/internal/per_thread_counters.h
// -----------------------------------------------------------------------------
// `PerThreadCounters<N>`: N counters, each split into one cache line per
// thread, so the hit path counts with a plain load and store on memory no
// other thread writes. Reading sums the lines.

#ifndef PADDOCK_INTERNAL_PER_THREAD_COUNTERS_H_
#define PADDOCK_INTERNAL_PER_THREAD_COUNTERS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
#include "paddock/internal/epoch.h"

namespace paddock::internal {

template <size_t N>
class PerThreadCounters {
 public:
  PerThreadCounters() = default;
  ~PerThreadCounters() {
    for (auto& chunk : chunks_) delete[] chunk.load(std::memory_order_relaxed);
  }
  PerThreadCounters(const PerThreadCounters&) = delete;
  PerThreadCounters& operator=(const PerThreadCounters&) = delete;

  // Adds `n` (one by default) to counter `i` for the thread owning `record`
  // and returns the line's new count. Call only from that thread.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Increment(const ThreadRecord* record,
                                                  size_t i, uint64_t n = 1) {
    std::atomic<uint64_t>& c = LineFor(record).counter[i];
    // Single writer per line: no read-modify-write needed.
    const uint64_t next = c.load(std::memory_order_relaxed) + n;
    c.store(next, std::memory_order_relaxed);
    return next;
  }

  // Returns the sum of counter `i` over all threads. Thread-safe.
  uint64_t Sum(size_t i) const {
    uint64_t total = overflow_.counter[i].load(std::memory_order_relaxed);
    for (const auto& chunk : chunks_) {
      const Line* lines = chunk.load(std::memory_order_acquire);
      if (lines == nullptr) continue;
      for (size_t j = 0; j < kLinesPerChunk; ++j) {
        total += lines[j].counter[i].load(std::memory_order_relaxed);
      }
    }
    return total;
  }

 private:
  static constexpr size_t kLinesPerChunk = kStripesPerChunk;
  static constexpr size_t kChunks = kStripeChunks;  // Threads past: share.

  struct alignas(64) Line {
    std::array<std::atomic<uint64_t>, N> counter{};
  };

  ABSL_ATTRIBUTE_ALWAYS_INLINE Line& LineFor(const ThreadRecord* record) {
    // chunks_[kChunks] stays null: threads past the chunks take the slow
    // path to the shared line.
    Line* lines = chunks_[record->stripe_chunk].load(std::memory_order_acquire);
    if (lines == nullptr) [[unlikely]] {
      return SlowLineFor(record->stripe_chunk, record->stripe_line);
    }
    return lines[record->stripe_line];
  }

  // First use of a chunk, or more threads than chunks can hold.
  ABSL_ATTRIBUTE_NOINLINE Line& SlowLineFor(uint32_t chunk, uint32_t line) {
    if (chunk >= kChunks) {
      return overflow_;  // Shared: counts may be lost, never corrupted.
    }
    Line* lines = nullptr;
    Line* fresh = new Line[kLinesPerChunk];
    if (chunks_[chunk].compare_exchange_strong(lines, fresh,
                                               std::memory_order_acq_rel)) {
      lines = fresh;
    } else {
      delete[] fresh;
    }
    return lines[line];
  }

  std::array<std::atomic<Line*>, kChunks + 1> chunks_{};
  Line overflow_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_PER_THREAD_COUNTERS_H_
