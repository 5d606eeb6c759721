// File: paddock/internal/short_mutex.h
// -----------------------------------------------------------------------------
// `ShortMutex`: a mutex for critical sections of a few hundred nanoseconds,
// a shard's writers. Uncontended, Lock and Unlock are one atomic instruction
// each, inline (a std::mutex costs a call into glibc and its checks of the
// mutex kind, about 35 instructions a side, and a miss takes a shard's lock
// twice). Contended, it spins on a plain load, which leaves the line shared,
// before it sleeps on a futex: a futex sleep and wake-up costs microseconds,
// tens on a VM, longer than the section it waits for. The futex protocol is
// Drepper's third mutex ("Futexes Are Tricky", 2011).
//
// Counted in `LocksHeld()` like `Mutex`. No condition variable works with
// it: use `Mutex` for a lock that is waited on.

#ifndef PADDOCK_INTERNAL_SHORT_MUTEX_H_
#define PADDOCK_INTERNAL_SHORT_MUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {

class ABSL_LOCKABLE ShortMutex {
 public:
  constexpr ShortMutex() = default;
  ShortMutex(const ShortMutex&) = delete;
  ShortMutex& operator=(const ShortMutex&) = delete;

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t expected = kFree;
    if (!state_.compare_exchange_strong(
            expected, kLocked, std::memory_order_acquire,
            std::memory_order_relaxed)) [[unlikely]] {
      LockContended();
    }
    ++locks_held;
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Unlock() ABSL_UNLOCK_FUNCTION() {
    --locks_held;
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers)
        [[unlikely]] {
      WakeOne();
    }
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kLocked = 1;
  // Locked, and a thread may sleep on it: its unlock wakes one.
  static constexpr uint32_t kSleepers = 2;

  void LockContended();
  void WakeOne();

  std::atomic<uint32_t> state_{kFree};
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SHORT_MUTEX_H_
