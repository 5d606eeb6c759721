// File: bench/replay/histogram.h
// -----------------------------------------------------------------------------
// `LatencyHistogram`: a fixed-size, thread-safe histogram of durations with
// buckets 2 % wide from 10 us to 600 s, so memory stays bounded whatever the
// run length and percentiles are within 1 % of the true value.

#ifndef PADDOCK_BENCH_REPLAY_HISTOGRAM_H_
#define PADDOCK_BENCH_REPLAY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace paddock::replay {

class LatencyHistogram {
 public:
  // Bucket i holds [kLowest * kGrowth^i, kLowest * kGrowth^(i+1)); values
  // below kLowest fall in bucket 0, values above the top in the last one.
  static constexpr double kLowestNanos = 10e3;    // 10 us.
  static constexpr double kHighestNanos = 600e9;  // 600 s.
  static constexpr double kGrowth = 1.02;
  static constexpr int kBuckets = 906;  // ceil(log(6e7) / log(1.02)) + 1.

  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // Adds one duration. Thread-safe, lock-free.
  void Record(int64_t nanos);

  // Adds every count of `other` to this one. Not atomic as a whole.
  void Merge(const LatencyHistogram& other);

  // Returns the number of durations recorded.
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

  // Returns the largest duration recorded, in nanoseconds (0 if none).
  int64_t max_nanos() const { return max_.load(std::memory_order_relaxed); }

  // Returns the `q`-quantile (q in [0, 1]) in milliseconds: the geometric
  // middle of the bucket holding it, never above the maximum. 0 if empty.
  double QuantileMillis(double q) const;

  double MaxMillis() const { return static_cast<double>(max_nanos()) / 1e6; }

 private:
  static int BucketOf(int64_t nanos);

  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> max_{0};
};

// Raises `target` to `value` if `value` is larger. Thread-safe.
void AtomicMax(std::atomic<int64_t>& target, int64_t value);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_HISTOGRAM_H_
