// File: paddock/internal/awaiter.h
// -----------------------------------------------------------------------------
// What `Cache::Await` returns: a C++20 awaiter over a cache's GetAsync. Ready
// at once when the value is served at once; otherwise the coroutine resumes
// where GetAsync's callback runs. The answer meets the frame through a shared
// internal::AwaitState, so that a frame destroyed while suspended (its
// awaiter detaches) is never touched by the late answer.

#ifndef PADDOCK_INTERNAL_AWAITER_H_
#define PADDOCK_INTERNAL_AWAITER_H_

#include <coroutine>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "paddock/internal/await_state.h"

namespace paddock::internal {

// `Source` is the cache (it makes the awaiter, and lets it call its private
// TryServeNow); `Q` the type of the key it refers to until resumed.
template <typename Source, typename V, typename Q>
class AwaiterFor {
 public:
  AwaiterFor(const AwaiterFor&) = delete;
  AwaiterFor& operator=(const AwaiterFor&) = delete;
  // Destroyed with a coroutine still suspended in it: detaches, so that the
  // lookup's answer, when it comes, touches nothing of the frame.
  ~AwaiterFor() {
    if (state_ != nullptr) state_->Detach();
  }

  bool await_ready() {
    result_ = source_->TryServeNow(*key_);
    return result_.has_value();
  }
  bool await_suspend(std::coroutine_handle<> handle) {
    // On the heap, shared with the callback: the frame may go first.
    state_ = std::make_shared<AwaitState<absl::StatusOr<V>>>();
    source_->GetAsync(*key_, [state = state_](absl::StatusOr<V> result) {
      state->Complete(std::move(result));
    });
    return state_->Suspend(handle);
  }
  absl::StatusOr<V> await_resume() {
    return result_.has_value() ? *std::move(result_) : state_->Take();
  }

 private:
  friend Source;
  AwaiterFor(Source* source, const Q& key) : source_(source), key_(&key) {}

  Source* const source_;
  const Q* const key_;
  std::optional<absl::StatusOr<V>> result_;  // Served at once.
  std::shared_ptr<AwaitState<absl::StatusOr<V>>> state_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_AWAITER_H_
