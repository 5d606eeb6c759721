// File: paddock/completion.h
// -----------------------------------------------------------------------------
// `paddock::Completion<V>`: how an asynchronous loader hands its result back
// to the cache. A cache built with an `AsyncLoader` calls it with the key and
// a completion; the loader starts its work (an RPC, a query on an event loop)
// and returns at once, and whoever finishes the work calls the completion,
// once, from any thread:
//
//   [](const std::string& key, paddock::Completion<Page> done) {
//     client.FetchAsync(key, [done = std::move(done)](Result r) mutable {
//       std::move(done)(ToPage(r));
//     });
//   }
//
// Move-only. A completion destroyed without being called ends the load with
// `absl::CancelledError`, so a loader that drops its work never wedges a key.

#ifndef PADDOCK_COMPLETION_H_
#define PADDOCK_COMPLETION_H_

#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paddock {

template <typename V>
class Completion {
 public:
  // What the cache does with the result (`dropped`: the completion was
  // destroyed uncalled). Not for users.
  using Finish = absl::AnyInvocable<void(absl::StatusOr<V>, bool dropped) &&>;

  // An empty completion (calling it does nothing).
  Completion() = default;
  explicit Completion(Finish finish) : finish_(std::move(finish)) {}
  Completion(Completion&& other) noexcept = default;
  Completion& operator=(Completion&& other) noexcept {
    if (this != &other) {
      Drop();
      finish_ = std::move(other.finish_);
    }
    return *this;
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // Ends the load with `absl::CancelledError` if not called.
  ~Completion() { Drop(); }

  // Completion::operator()
  //
  // Hands the load's result to the cache: it is stored as `Get` would store
  // it, and every waiter of the load gets it, on the calling thread. Call at
  // most once (later calls do nothing). Thread-safe with respect to the
  // cache; the completion itself must not be used by two threads at once.
  // Callable as `done(result)` or `std::move(done)(result)` alike.
  void operator()(absl::StatusOr<V> result) {
    if (finish_) std::exchange(finish_, nullptr)(std::move(result), false);
  }

  // Whether the completion is still to be called.
  explicit operator bool() const { return static_cast<bool>(finish_); }

 private:
  void Drop() {
    if (finish_) {
      std::exchange(finish_, nullptr)(
          absl::CancelledError("paddock: the asynchronous loader dropped its "
                               "completion without calling it"),
          true);
    }
  }

  Finish finish_;
};

}  // namespace paddock

#endif  // PADDOCK_COMPLETION_H_
