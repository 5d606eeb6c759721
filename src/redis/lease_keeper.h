// File: src/redis/lease_keeper.h
// -----------------------------------------------------------------------------
// `LeaseKeeper`: keeps the leases this process holds alive while it loads.
// A background thread extends each lease every half period, for at most the
// `hold_for` its holder asked for, until the holder fills or releases it; a
// lease found lost (taken over, or deleted by a Put or Invalidate) is
// dropped. If the process dies, the extensions stop and the lease lapses
// within one period.
//
// It also gives back, in the background, leases that a failed call may have
// left held: a Lookup whose reply was lost after Redis granted the lease (a
// timeout, a dropped connection), a Fill or Release that failed. Otherwise
// every process would wait up to a lease period for a load nobody runs.

#ifndef PADDOCK_SRC_REDIS_LEASE_KEEPER_H_
#define PADDOCK_SRC_REDIS_LEASE_KEEPER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace paddock::internal {

class LeaseKeeper {
 public:
  // Extends the lease `token` of `key` to expire `period` from now. Returns
  // whether `token` still held it.
  using Extend = absl::AnyInvocable<absl::StatusOr<bool>(
      const std::string& key, const std::string& token, absl::Duration period)>;

  // Deletes the lease `token` of `key` if `token` still holds it. Returns
  // whether it did.
  using Release = absl::AnyInvocable<absl::StatusOr<bool>(
      const std::string& key, const std::string& token)>;

  // Starts the thread. `lease_for` is the lease period.
  LeaseKeeper(absl::Duration lease_for, Extend extend, Release release);
  // Stops the thread; the leases it kept lapse on their own.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // LeaseKeeper::Hold()
  //
  // Keeps the lease `token` of `key`, granted just now, alive for
  // `hold_for` from now: nothing to do if `hold_for` is at most the lease
  // period, which the grant covers already. Extensions never move the
  // lease's expiry earlier than it was. Thread-safe.
  void Hold(std::string key, std::string token, absl::Duration hold_for)
      ABSL_LOCKS_EXCLUDED(mu_);

  // LeaseKeeper::Forget()
  //
  // Stops extending `token` (filled or released). Thread-safe.
  void Forget(std::string_view token) ABSL_LOCKS_EXCLUDED(mu_);

  // LeaseKeeper::ReleaseSoon()
  //
  // Stops extending `token` and gives its lease on `key` back in the
  // background, for a call that failed after it may have reached Redis. The
  // first try is an eighth of a lease period from now (the failed call may
  // still be on its way, and a hung server is not asked at once); retried
  // as often until Redis deletes the lease, or twice answers that `token`
  // does not hold it (an eighth apart, so that a call still on its way has
  // arrived). At most kMaxReleases wait at once; more are dropped (their
  // leases lapse). Thread-safe.
  void ReleaseSoon(std::string key, std::string token) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxReleases = 1024;

  // Leases being kept now. Thread-safe.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Leases waiting to be given back. Thread-safe.
  size_t releasing() const ABSL_LOCKS_EXCLUDED(mu_);
  // Leases given back by ReleaseSoon so far. Thread-safe.
  uint64_t released() const ABSL_LOCKS_EXCLUDED(mu_);
  // Successful extensions so far. Thread-safe.
  uint64_t extensions() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Times on MonotonicNow()'s clock. Redis's expiry of the lease is known
  // only within a round trip: no later than `expires_by` (the last answer's
  // arrival plus its period), no earlier than `covered_until` (the last
  // request's sending plus its period).
  struct Held {
    std::string key;
    absl::Time hold_until;
    absl::Time next_extend;
    absl::Time expires_by;
    absl::Time covered_until;
  };

  struct Releasing {
    std::string key;
    absl::Time next_try;
    int not_held = 0;  // Answers that the token did not hold the lease.
  };

  // A lease to extend, copied out of held_: extend_ runs without the lock.
  struct Due {
    std::string token;
    std::string key;
    absl::Duration period;
    absl::Time sent;
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Tries the releases that are due, without the lock; returns when the
  // next one is.
  absl::Time RunReleases(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the leases due for extension at `now`, drops those held as long
  // as asked, and lowers `*wake` to the next extension.
  std::vector<Due> CollectDue(absl::Time now, absl::Time* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends `due` without the lock (Hold and Forget go on meanwhile), then
  // records the answers under it.
  void ExtendDue(const std::vector<Due>& due)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration lease_for_;
  Extend extend_;    // Called on the thread only.
  Release release_;  // Called on the thread only.

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  absl::flat_hash_map<std::string, Held> held_
      ABSL_GUARDED_BY(mu_);  // By token.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t extensions_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Releasing> releasing_
      ABSL_GUARDED_BY(mu_);  // By token.
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;  // Last: starts after everything above exists.
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_LEASE_KEEPER_H_
