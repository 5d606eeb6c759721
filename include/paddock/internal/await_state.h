// File: paddock/internal/await_state.h
// -----------------------------------------------------------------------------
// `AwaitState<T>`: where a coroutine suspended in `co_await cache.Await(key)`
// and the completion of its lookup meet. It lives on the heap, shared by the
// awaiter (in the coroutine's frame) and the completion, so that the frame
// can be destroyed while the lookup is pending (a task library cancelling or
// shutting down destroys suspended coroutines): the awaiter's destructor
// detaches, and the completion, when it comes, drops its result and touches
// nothing of the frame.
//
// One atomic with five states, each changed by exactly one side:
//
//   kIdle --Complete--> kReady       (answered before the coroutine suspends:
//                                     Suspend returns false, no resume)
//   kIdle --Suspend---> kSuspended --Complete--> kResumed (resumes it)
//                                  --Detach----> kDetached (drops the answer)
//
// A destroy racing the completion is decided by which of the two moves out
// of kSuspended first. As for every coroutine, the frame may be destroyed
// only while it is suspended: once the completion has won, the coroutine is
// running (or has run) again, and its owner sees that.

#ifndef PADDOCK_INTERNAL_AWAIT_STATE_H_
#define PADDOCK_INTERNAL_AWAIT_STATE_H_

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <optional>
#include <utility>

namespace paddock::internal {

template <typename T>
class AwaitState {
 public:
  AwaitState() = default;
  AwaitState(const AwaitState&) = delete;
  AwaitState& operator=(const AwaitState&) = delete;

  // AwaitState::Complete()
  //
  // Hands over the answer, once, from any thread: resumes the coroutine if
  // it has suspended (on this thread, before returning), keeps the answer
  // for it if it has not yet, or drops it if the awaiter is gone. Never
  // blocks beyond the resumed coroutine's own run.
  void Complete(T result) {
    result_.emplace(std::move(result));  // Published by the exchanges below.
    State expected = State::kIdle;
    if (state_.compare_exchange_strong(expected, State::kReady,
                                       std::memory_order_acq_rel)) {
      return;  // Suspend sees kReady and does not suspend.
    }
    if (expected == State::kSuspended &&
        state_.compare_exchange_strong(expected, State::kResumed,
                                       std::memory_order_acq_rel)) {
      handle_.resume();
      return;
    }
    // kDetached: the frame is gone (or going); the answer dies with this
    // state, on this thread.
  }

  // AwaitState::Suspend()
  //
  // From `await_suspend`, after the lookup was started: returns true if the
  // coroutine is to stay suspended until Complete resumes `handle`, false if
  // the answer came already (then it continues at once). Call once.
  bool Suspend(std::coroutine_handle<> handle) {
    handle_ = handle;  // Published by the exchange below.
    State expected = State::kIdle;
    return state_.compare_exchange_strong(expected, State::kSuspended,
                                          std::memory_order_acq_rel);
  }

  // AwaitState::Detach()
  //
  // From the awaiter's destructor: if the coroutine is still suspended,
  // the answer, when it comes, is dropped and the coroutine never resumed.
  // Does nothing once Complete has resumed it or kept its answer.
  void Detach() {
    State expected = State::kSuspended;
    state_.compare_exchange_strong(expected, State::kDetached,
                                   std::memory_order_acq_rel);
  }

  // AwaitState::Take()
  //
  // The answer, for `await_resume`: call only once the coroutine continues
  // (Suspend returned false, or Complete resumed it).
  T Take() { return *std::move(result_); }

 private:
  enum class State : uint8_t { kIdle, kReady, kSuspended, kResumed, kDetached };

  std::atomic<State> state_{State::kIdle};
  std::coroutine_handle<> handle_;
  std::optional<T> result_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_AWAIT_STATE_H_
