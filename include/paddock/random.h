// File: paddock/random.h
// -----------------------------------------------------------------------------
// `paddock::Random`: the randomness a cache hands its policy (TTL jitter,
// XFetch's draws), seeded from `Options::seed` so a run with a fixed seed and
// a ManualClock repeats exactly.

#ifndef PADDOCK_RANDOM_H_
#define PADDOCK_RANDOM_H_

#include <cstdint>

#include "paddock/internal/per_thread_counters.h"
#include "paddock/internal/seed.h"
#include "paddock/internal/splitmix.h"

namespace paddock {

// Random
//
// The cache's source of randomness, seeded from `Options::seed`. Each thread
// draws from a stream of its own (SplitMix64 over the seed and the thread's
// dense index), so concurrent draws share no written memory. Thread-safe;
// single-threaded, a seed gives one sequence.
class Random {
 public:
  // With `reseed_after_fork` (a cache's, when `Options::seed` is 0 and the
  // seed was drawn from entropy), a child process after fork() draws other
  // numbers than its parent and its siblings; without it (a seed given, for
  // runs that repeat), the same.
  explicit Random(uint64_t seed, bool reseed_after_fork = false)
      : seed_(seed), reseed_after_fork_(reseed_after_fork) {}

  // Returns 64 uniformly distributed bits.
  uint64_t Next() {
    const internal::ThreadRecord* record = internal::CurrentThreadRecord();
    const uint64_t n = draws_.Increment(record, 0);
    const uint64_t seed =
        reseed_after_fork_ ? seed_ ^ internal::ForkSalt() : seed_;
    return internal::SplitMixFinalize(
        internal::SplitMixFinalize(seed ^
                                   (uint64_t{record->index} * kStreamStep)) +
        internal::kSplitMixGamma * n);
  }

  // Returns a double uniformly distributed in (0, 1].
  double UniformOpenClosed() {
    return static_cast<double>((Next() >> 11) + 1) * 0x1.0p-53;
  }

  // Returns the number of draws so far, over all threads (for tests of "no
  // draw happened").
  uint64_t draws() const { return draws_.Sum(0); }

 private:
  static constexpr uint64_t kStreamStep = 0xd1b54a32d192ed03ULL;

  const uint64_t seed_;
  const bool reseed_after_fork_;
  internal::PerThreadCounters<1> draws_;
};

}  // namespace paddock

#endif  // PADDOCK_RANDOM_H_
