// Versions for what a cache writes to a shared tier.

#include "paddock/internal/fleet.h"

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace paddock::internal {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014), seeded once per thread from the
// operating system's entropy.
uint64_t NextRandom() {
  thread_local uint64_t state = [] {
    std::random_device entropy;
    return (uint64_t{entropy()} << 32) ^ entropy();
  }();
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string NewSharedVersion() {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(NextRandom()),
                static_cast<unsigned long long>(NextRandom()));
  return std::string(hex, 32);
}

}  // namespace paddock::internal
