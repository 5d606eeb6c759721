// LatencyHistogram.

#include "histogram.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace paddock::replay {

void AtomicMax(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load(std::memory_order_relaxed);
  while (value > seen && !target.compare_exchange_weak(
                             seen, value, std::memory_order_relaxed)) {
  }
}

int LatencyHistogram::BucketOf(int64_t nanos) {
  const double v = static_cast<double>(nanos);
  if (!(v > kLowestNanos)) return 0;
  const int i =
      static_cast<int>(std::log(v / kLowestNanos) / std::log(kGrowth));
  return std::clamp(i, 0, kBuckets - 1);
}

void LatencyHistogram::Record(int64_t nanos) {
  buckets_[BucketOf(nanos)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicMax(max_, nanos);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) {
    const uint64_t n = other.buckets_[i].load(std::memory_order_relaxed);
    if (n != 0) buckets_[i].fetch_add(n, std::memory_order_relaxed);
  }
  count_.fetch_add(other.count(), std::memory_order_relaxed);
  AtomicMax(max_, other.max_nanos());
}

double LatencyHistogram::QuantileMillis(double q) const {
  uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  // The rank of the quantile, 1-based: the smallest value with at least
  // q * total values at or below it.
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(total))));
  uint64_t seen = 0;
  int bucket = kBuckets - 1;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i].load(std::memory_order_relaxed);
    if (seen >= rank) {
      bucket = i;
      break;
    }
  }
  const double middle =
      kLowestNanos * std::pow(kGrowth, static_cast<double>(bucket) + 0.5);
  return std::min(middle, static_cast<double>(max_nanos())) / 1e6;
}

}  // namespace paddock::replay
