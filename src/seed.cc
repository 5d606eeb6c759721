// Seeds for caches whose Options::seed is 0.

#include "paddock/internal/seed.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <random>

#include "paddock/internal/splitmix.h"

namespace paddock::internal {

constinit std::atomic<uint64_t> fork_salt{0};

namespace {

// Runs in the child of fork(), where only async-signal-safe calls are
// allowed: getpid, clock_gettime and a lock-free store. The parent's salt
// goes in too, so that a grandchild differs from a child of the same pid.
void SaltChild() {
  timespec now = {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t z = fork_salt.load(std::memory_order_relaxed) ^
               (uint64_t{static_cast<uint32_t>(getpid())} << 32) ^
               static_cast<uint64_t>(now.tv_nsec) ^
               (static_cast<uint64_t>(now.tv_sec) << 30);
  z = SplitMixNext(&z);
  fork_salt.store(z != 0 ? z : 1, std::memory_order_relaxed);
}

}  // namespace

uint64_t SeedOrRandom(uint64_t seed) {
  if (seed != 0) return seed;
  [[maybe_unused]] static const bool salted = [] {
    pthread_atfork(nullptr, nullptr, SaltChild);
    return true;
  }();
  std::random_device entropy;
  const uint64_t drawn = (uint64_t{entropy()} << 32) | entropy();
  return drawn != 0 ? drawn : 1;
}

}  // namespace paddock::internal
