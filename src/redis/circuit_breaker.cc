// CircuitBreaker.

#include "redis/circuit_breaker.h"

namespace paddock::internal {

CircuitBreaker::CircuitBreaker(int failures_to_open, absl::Duration cooldown,
                               const Clock* clock)
    : failures_to_open_(failures_to_open), cooldown_(cooldown), clock_(clock) {}

CircuitBreaker::Ticket CircuitBreaker::Admit() {
  absl::MutexLock lock(&mu_);
  switch (state_) {
    case State::kClosed:
      return {.admitted = true, .probe = false};
    case State::kOpen: {
      const absl::Time now = clock_->Now();
      if (now < since_or_until_) break;
      state_ = State::kProbing;
      since_or_until_ = now;
      return {.admitted = true, .probe = true};
    }
    case State::kProbing: {
      // A probe that never reported (its caller vanished) must not keep the
      // breaker open for good: after a cooldown, probe again.
      const absl::Time now = clock_->Now();
      if (now - since_or_until_ < cooldown_) break;
      since_or_until_ = now;
      return {.admitted = true, .probe = true};
    }
  }
  ++rejections_;
  return {.admitted = false, .probe = false};
}

void CircuitBreaker::Report(Ticket ticket, Outcome outcome) {
  absl::MutexLock lock(&mu_);
  switch (outcome) {
    case Outcome::kSuccess:
      consecutive_failures_ = 0;
      state_ = State::kClosed;
      return;
    case Outcome::kFailure:
      ++consecutive_failures_;
      // A probe's failure reopens only while probing: one replaced after a
      // cooldown may report after a later probe closed the breaker.
      if ((ticket.probe && state_ == State::kProbing) ||
          (state_ == State::kClosed &&
           consecutive_failures_ >= failures_to_open_)) {
        Open(clock_->Now());
      }
      return;
    case Outcome::kNeutral:
      if (ticket.probe && state_ == State::kProbing) {
        // Nothing learnt: let the next call probe.
        state_ = State::kOpen;
        since_or_until_ = clock_->Now();
      }
      return;
  }
}

void CircuitBreaker::Open(absl::Time now) {
  if (state_ != State::kOpen) ++opens_;
  state_ = State::kOpen;
  since_or_until_ = now + cooldown_;
}

bool CircuitBreaker::open() const {
  absl::MutexLock lock(&mu_);
  return state_ != State::kClosed;
}

uint64_t CircuitBreaker::rejections() const {
  absl::MutexLock lock(&mu_);
  return rejections_;
}

uint64_t CircuitBreaker::opens() const {
  absl::MutexLock lock(&mu_);
  return opens_;
}

}  // namespace paddock::internal
