// ShortMutex's contended half: spinning, then sleeping on a futex.

#include "paddock/internal/short_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace paddock::internal {

namespace {

// About a microsecond of pauses: longer than a shard's critical section,
// shorter than a futex sleep and wake-up.
constexpr int kSpins = 100;

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  // A std::atomic<uint32_t> is a uint32_t in memory (lock-free, standard
  // layout), which is what the kernel compares.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 nullptr, nullptr, 0);
}

}  // namespace

void ShortMutex::LockContended() {
  for (int i = 0; i < kSpins; ++i) {
    Pause();
    uint32_t seen = state_.load(std::memory_order_relaxed);
    if (seen == kSleepers) break;  // Others sleep already: queue behind them.
    if (seen == kFree &&
        state_.compare_exchange_weak(seen, kLocked, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
  }
  // Announce a sleeper, then sleep until the word changes; whoever unlocks
  // a word that says so wakes one. Taking the lock this way leaves it
  // marked, which costs at most one needless wake-up.
  while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree) {
    Futex(&state_, FUTEX_WAIT_PRIVATE, kSleepers);
  }
}

void ShortMutex::WakeOne() { Futex(&state_, FUTEX_WAKE_PRIVATE, 1); }

}  // namespace paddock::internal
