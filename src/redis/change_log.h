// File: src/redis/change_log.h
// -----------------------------------------------------------------------------
// `ChangeLog`: the recent changes this process heard of (fills, puts,
// invalidations, releases, by key hash), numbered, so that `AwaitChange`
// can wait for a change of one key and also see one that arrived between
// the caller's Lookup and its wait. Keeps the last 1024; a waiter that fell
// further behind is told "changed" (it then looks up again, which is always
// safe).

#ifndef PADDOCK_SRC_REDIS_CHANGE_LOG_H_
#define PADDOCK_SRC_REDIS_CHANGE_LOG_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace paddock::internal {

class ChangeLog {
 public:
  enum class Wait { kChanged, kTimedOut, kDisconnected };

  // ChangeLog::sequence()
  //
  // The number of the last change recorded: pass it as `since` to wait for
  // a later one. Never blocks.
  uint64_t sequence() const {
    return sequence_.load(std::memory_order_acquire);
  }

  // ChangeLog::Record()
  //
  // Records a change of `key` and wakes the waiters. Thread-safe.
  void Record(std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // ChangeLog::SetConnected()
  //
  // Whether change messages arrive now. Becoming connected records a change
  // of every key (messages may have been lost meanwhile); either way the
  // waiters wake. Thread-safe.
  void SetConnected(bool connected) ABSL_LOCKS_EXCLUDED(mu_);
  bool connected() const ABSL_LOCKS_EXCLUDED(mu_);

  // ChangeLog::WaitForChange()
  //
  // Blocks until a change of `key` numbered after `since` is recorded
  // (kChanged), `deadline` passes (kTimedOut, on `MonotonicNow()`'s clock),
  // or, if `return_if_disconnected`, while no messages arrive
  // (kDisconnected). Thread-safe.
  Wait WaitForChange(std::string_view key, uint64_t since, absl::Time deadline,
                     bool return_if_disconnected) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr uint64_t kSize = 1024;
  // Stands for every key (a reconnect).
  static constexpr uint64_t kEveryKey = 0;

  static uint64_t HashOf(std::string_view key);
  void Append(uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ChangedSince(uint64_t hash, uint64_t since) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  // Written under mu_; read without it by sequence().
  std::atomic<uint64_t> sequence_{0};
  // hashes_[n % kSize]: the key hash of change n.
  std::array<uint64_t, kSize> hashes_ ABSL_GUARDED_BY(mu_) = {};
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CHANGE_LOG_H_
