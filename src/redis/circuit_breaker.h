// File: src/redis/circuit_breaker.h
// -----------------------------------------------------------------------------
// `CircuitBreaker`: stops calling a server that keeps failing. Closed, it
// admits every call; after `failures_to_open` consecutive failures it opens
// and refuses calls for `cooldown`; then it admits one call (the probe), and
// that call's success closes it again while its failure reopens it.

#ifndef PADDOCK_SRC_REDIS_CIRCUIT_BREAKER_H_
#define PADDOCK_SRC_REDIS_CIRCUIT_BREAKER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paddock/clock.h"

namespace paddock::internal {

class CircuitBreaker {
 public:
  // What a call admitted by Admit() found out about the server.
  enum class Outcome {
    kSuccess,  // The server answered.
    kFailure,  // It did not (timeout, lost connection, busy).
    kNeutral,  // The call ended before reaching it (a local error).
  };

  // Whether a call may go ahead, and whether it is the probe.
  struct Ticket {
    bool admitted = false;
    bool probe = false;
  };

  // `clock` (not owned) must outlive the breaker.
  CircuitBreaker(int failures_to_open, absl::Duration cooldown,
                 const Clock* clock);

  // CircuitBreaker::Admit()
  //
  // Returns whether a call may go to the server now. Every admitted call
  // must Report() once. Thread-safe; never blocks on I/O.
  Ticket Admit() ABSL_LOCKS_EXCLUDED(mu_);

  // CircuitBreaker::Report()
  //
  // Records how an admitted call went. Thread-safe.
  void Report(Ticket ticket, Outcome outcome) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether calls are being refused now (open, or a probe in flight).
  bool open() const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls refused, times opened.
  uint64_t rejections() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t opens() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kClosed, kOpen, kProbing };

  void Open(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int failures_to_open_;
  const absl::Duration cooldown_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kClosed;
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  // kOpen: refuse until then. kProbing: when the probe was admitted.
  absl::Time since_or_until_ ABSL_GUARDED_BY(mu_);
  uint64_t rejections_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CIRCUIT_BREAKER_H_
