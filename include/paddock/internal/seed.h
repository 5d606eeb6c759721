// File: paddock/internal/seed.h
// -----------------------------------------------------------------------------
// Turns `Options::seed` into the seed of a cache's `Random`.

#ifndef PADDOCK_INTERNAL_SEED_H_
#define PADDOCK_INTERNAL_SEED_H_

#include <cstdint>

namespace paddock::internal {

// Returns `seed`, or a seed from the operating system's entropy if it is 0.
uint64_t SeedOrRandom(uint64_t seed);

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SEED_H_
