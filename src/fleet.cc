// Versions for what a cache writes to a shared tier.

#include "paddock/internal/fleet.h"

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "paddock/internal/splitmix.h"

namespace paddock::internal {
namespace {

// SplitMix64, seeded per thread from the operating system's entropy, and
// again in a child after fork(): a child copies its parent's state, and
// would write the same versions.
uint64_t NextRandom(pid_t pid) {
  struct State {
    uint64_t s = 0;
    pid_t pid = 0;
  };
  thread_local State state;
  if (state.pid != pid) {
    std::random_device entropy;
    state = {(uint64_t{entropy()} << 32) ^ entropy(), pid};
  }
  return SplitMixNext(&state.s);
}

}  // namespace

std::string NewSharedVersion() {
  const pid_t pid = getpid();
  const uint64_t high = NextRandom(pid);
  const uint64_t low = NextRandom(pid);
  // The writer's pid too, as the tier's lease tokens have it: two processes
  // never share one, whatever their random state.
  char text[64];
  const int n = std::snprintf(text, sizeof(text), "%lx.%016llx%016llx",
                              static_cast<unsigned long>(pid),
                              static_cast<unsigned long long>(high),
                              static_cast<unsigned long long>(low));
  return std::string(text, static_cast<size_t>(n));
}

}  // namespace paddock::internal
