// File: paddock/internal/fleet_waits.h
// -----------------------------------------------------------------------------
// `FleetWaits`: the process's loads that wait for another process's fill of a
// key in a shared tier, parked without a thread. A load run on an executor
// that finds the key's lease held elsewhere parks here and gives its thread
// back; it is woken, once, when the tier announces a change of the key (a
// fill, put, invalidation or release, through `SharedTier::Subscriber::
// OnChange`), when the tier may have missed changes, or when its time comes
// (a re-ask, or its deadline). Waking calls its `Wake`, which schedules the
// load's next step on the load's executor.
//
// One set and one timer thread per process (started by the first wait), not
// a thread per wait: ten thousand keys waiting cost ten thousand small
// records.

#ifndef PADDOCK_INTERNAL_FLEET_WAITS_H_
#define PADDOCK_INTERNAL_FLEET_WAITS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {

class FleetWaits {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;
  // What a wake does: called at most once, outside every lock of this set,
  // on the thread that wakes it. Destroyed uncalled by Drop.
  using Wake = absl::AnyInvocable<void() &&>;

  // FleetWaits::Process()
  //
  // The process's set. Never destroyed (its timer thread may outlive main).
  static FleetWaits& Process();

  FleetWaits() = default;
  FleetWaits(const FleetWaits&) = delete;
  FleetWaits& operator=(const FleetWaits&) = delete;
  // Stops the timer thread; wakes still parked are destroyed uncalled.
  ~FleetWaits();

  // FleetWaits::sequence()
  //
  // The number of the last change notified. Read it before asking the tier,
  // and pass it to Park: a change announced in between is not lost.
  // Thread-safe, lock-free.
  uint64_t sequence() const {
    return sequence_.load(std::memory_order_acquire);
  }

  // FleetWaits::Park()
  //
  // Takes `wake` (leaving it empty) and keeps it until `key` of `tier`
  // changes (Notify, NotifyAll) or `at` passes (on the timer thread),
  // whichever comes first; `owner` names the cache, for Drop. Returns true
  // at once; or false, leaving `wake` as it was, if `key` changed after
  // `since` (or too much changed to tell). Throws std::bad_alloc, or
  // std::system_error if the timer thread cannot start, leaving `wake` as it
  // was.
  // Thread-safe.
  bool Park(const void* tier, std::string_view key, const void* owner,
            uint64_t since, SteadyTime at, Wake& wake) ABSL_LOCKS_EXCLUDED(mu_);

  // FleetWaits::Notify()
  //
  // Wakes every wait parked on `key` of `tier`, on the calling thread, before
  // returning. Never throws (a wake that throws is its own business: wakes
  // must not). Thread-safe.
  void Notify(const void* tier, std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // FleetWaits::NotifyAll()
  //
  // Wakes every wait parked on `tier` (its changes may have been missed).
  void NotifyAll(const void* tier) ABSL_LOCKS_EXCLUDED(mu_);

  // FleetWaits::Drop()
  //
  // Destroys, uncalled and on the calling thread, every wait `owner` parked;
  // returns how many. A wake of `owner` already taken out to be called (on
  // another thread) is not waited for. Thread-safe.
  size_t Drop(const void* owner) ABSL_LOCKS_EXCLUDED(mu_);

  // The waits parked now; for tests. Thread-safe.
  size_t parked() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Wait {
    const void* tier;
    std::string key;
    const void* owner;
    SteadyTime at;
    Wake wake;
  };
  struct Timer {
    SteadyTime at;
    uint64_t id;
    bool operator>(const Timer& other) const { return at > other.at; }
  };

  // A (tier, key) pair's hash, never kEveryKey.
  static uint64_t Bucket(const void* tier, std::string_view key);
  // Records a change of `bucket` (kEveryKey: of every key).
  void RecordLocked(uint64_t bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ChangedSinceLocked(uint64_t bucket, uint64_t since) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the wait `id` out of the set (not its timer); empty if gone.
  Wake TakeLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes out every wait that `match` accepts.
  template <typename Match>
  std::vector<Wake> TakeAllLocked(const Match& match)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunTimer();
  static void WakeAll(std::vector<Wake>& wakes);
  // In a child after fork(): it has no timer thread; the next Park starts
  // one.
  static void ForgetThreadAfterFork();

  mutable Mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<uint64_t, Wait> waits_ ABSL_GUARDED_BY(mu_);
  // The ids parked under each (tier, key) hash; a bucket may hold other
  // keys' ids too (a collision), which Notify tells apart.
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> by_key_
      ABSL_GUARDED_BY(mu_);
  // The last kRecent changes notified, by bucket, numbered by sequence_
  // (written under mu_): what Park checks against its `since`.
  static constexpr uint64_t kRecent = 1024;
  static constexpr uint64_t kEveryKey = 0;
  std::atomic<uint64_t> sequence_{0};
  std::array<uint64_t, kRecent> recent_ ABSL_GUARDED_BY(mu_) = {};
  // A min-heap by time; a woken or dropped wait leaves its timer behind,
  // skipped when it comes first. A wait's time is at most a second or so
  // away (a re-ask), so the heap holds what was parked within that.
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  uint64_t timers_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool timer_running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;  // Started by the first Park; see timer_running_.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_FLEET_WAITS_H_
