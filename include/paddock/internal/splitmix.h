// File: paddock/internal/splitmix.h
// -----------------------------------------------------------------------------
// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): the one generator behind a cache's `Random`, the
// fork salt, the fleet's record versions and the Redis change feed's
// reconnect jitter. Cheap, stateless beyond one word, and good enough for
// jitter, early-refresh draws and unique tokens; not for secrets.

#ifndef PADDOCK_INTERNAL_SPLITMIX_H_
#define PADDOCK_INTERNAL_SPLITMIX_H_

#include <cstdint>

namespace paddock::internal {

// The golden-ratio increment between two states of a SplitMix64 stream.
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

// The SplitMix64 finaliser: a bijection of 64 bits whose every output bit
// depends on every input bit.
constexpr uint64_t SplitMixFinalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Advances `*state` and returns the stream's next 64 bits.
constexpr uint64_t SplitMixNext(uint64_t* state) {
  *state += kSplitMixGamma;
  return SplitMixFinalize(*state);
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SPLITMIX_H_
