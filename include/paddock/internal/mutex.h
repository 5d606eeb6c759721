// File: paddock/internal/mutex.h
// -----------------------------------------------------------------------------
// `Mutex` and `MutexLock`: `std::mutex` with clang's thread-safety
// annotations, so `ABSL_GUARDED_BY` on paddock's data binds under
// `-Wthread-safety` (libstdc++'s mutex carries none). ThreadSanitizer still
// sees a `std::mutex`.
//
// Each thread also counts the paddock mutexes it holds (`LocksHeld()`), so
// code that runs user callbacks (destructors of values, listeners) can be
// tested, and checked in debug builds, never to run under one of them.

#ifndef PADDOCK_INTERNAL_MUTEX_H_
#define PADDOCK_INTERNAL_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace paddock::internal {

// The number of paddock mutexes the calling thread holds.
inline thread_local int locks_held = 0;
inline int LocksHeld() { return locks_held; }

class ABSL_LOCKABLE Mutex {
 public:
  // Constant-initialised, like std::mutex: usable by static initialisers.
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Spins briefly before it sleeps: paddock holds its mutexes for a few
  // hundred nanoseconds, and a futex sleep and wake-up costs microseconds
  // (tens on a VM), most of a two-thread miss's time when two misses met on
  // one shard (docs/benchmarks.md).
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int i = 0; i < kSpins && !mu_.try_lock(); ++i) {
      if (i + 1 == kSpins) {
        mu_.lock();
        break;
      }
      Pause();
    }
    ++locks_held;
  }
  // Takes the mutex if it is free; returns whether it did. Never blocks.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    if (!mu_.try_lock()) return false;
    ++locks_held;
    return true;
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    --locks_held;
    mu_.unlock();
  }

  // Blocks on `cv` until `done()` holds, releasing the mutex meanwhile.
  // Requires the mutex held; it is held again on return.
  template <typename Done>
  void Await(std::condition_variable& cv, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    --locks_held;
    cv.wait(lock, done);
    ++locks_held;
    lock.release();
  }

  // As Await, but gives up at `deadline`; returns `done()`.
  template <typename Clock, typename Duration, typename Done>
  bool AwaitUntil(std::condition_variable& cv,
                  const std::chrono::time_point<Clock, Duration>& deadline,
                  Done done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    --locks_held;
    const bool result = cv.wait_until(lock, deadline, done);
    ++locks_held;
    lock.release();
    return result;
  }

 private:
  static constexpr int kSpins = 64;
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_MUTEX_H_
