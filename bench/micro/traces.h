// File: bench/micro/traces.h
// -----------------------------------------------------------------------------
// The keys and the Zipf trace of paddock_micro's workloads, shared with
// bench/profile/fixed_ops.cc so that both run the same operations.

#ifndef PADDOCK_BENCH_MICRO_TRACES_H_
#define PADDOCK_BENCH_MICRO_TRACES_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace paddock_bench {

// Spreads small integers over 64 bits (multiplication by an odd constant is a
// bijection), so that no implementation profits from sequential keys.
constexpr uint64_t ScrambleKey(uint64_t i) {
  return (i + 1) * 0x9e3779b97f4a7c15ULL;
}

// Returns `length` keys drawn from Zipf(`skew`) over `keys` ranks (rank r has
// weight 1 / (r + 1)^skew), by inverting the CDF. Deterministic.
inline std::vector<uint64_t> ZipfTrace(size_t keys, double skew, size_t length,
                                       uint64_t seed) {
  std::vector<double> cdf(keys);
  double total = 0;
  for (size_t r = 0; r < keys; ++r) {
    total += std::pow(static_cast<double>(r + 1), -skew);
    cdf[r] = total;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0, total);
  std::vector<uint64_t> trace(length);
  for (uint64_t& key : trace) {
    const size_t rank = static_cast<size_t>(
        std::upper_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin());
    key = ScrambleKey(std::min(rank, keys - 1));
  }
  return trace;
}

}  // namespace paddock_bench

#endif  // PADDOCK_BENCH_MICRO_TRACES_H_
