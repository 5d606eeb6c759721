// Seeds for caches whose Options::seed is 0.

#include "paddock/internal/seed.h"

#include <random>

namespace paddock::internal {

uint64_t SeedOrRandom(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device entropy;
  const uint64_t drawn = (uint64_t{entropy()} << 32) | entropy();
  return drawn != 0 ? drawn : 1;
}

}  // namespace paddock::internal
