// File: paddock/internal/seed.h
// -----------------------------------------------------------------------------
// Turns `Options::seed` into the seed of a cache's `Random`.

#ifndef PADDOCK_INTERNAL_SEED_H_
#define PADDOCK_INTERNAL_SEED_H_

#include <atomic>
#include <cstdint>

namespace paddock::internal {

// Returns `seed`, or a seed from the operating system's entropy if it is 0.
uint64_t SeedOrRandom(uint64_t seed);

// 0 in the process that first drew a seed; in a child after fork(), a value
// of its own, so that streams seeded from entropy differ between the parent
// and each child, which would otherwise copy the parent's state (and make
// the same TTL jitter and early-refresh draws). Set once SeedOrRandom(0) has
// run. Thread-safe, lock-free.
extern std::atomic<uint64_t> fork_salt;
inline uint64_t ForkSalt() { return fork_salt.load(std::memory_order_relaxed); }

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SEED_H_
