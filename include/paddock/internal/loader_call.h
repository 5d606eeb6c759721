// File: paddock/internal/loader_call.h
// -----------------------------------------------------------------------------
// Calling the user's loader: inside a load scope (internal/load_stack.h), so
// that a Get of the key being loaded, from inside the loader, fails at once
// instead of waiting for itself; and with whatever the loader throws turned
// into an Internal error naming it, since the call may run where nothing can
// catch (a refresh on the executor).
//
// `Engine<Core>::LoaderCall` is made on the spot over a cache's
// internal::CacheCore.

#ifndef PADDOCK_INTERNAL_LOADER_CALL_H_
#define PADDOCK_INTERNAL_LOADER_CALL_H_

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddock/completion.h"
#include "paddock/internal/caught_error.h"
#include "paddock/internal/engine.h"
#include "paddock/internal/load_stack.h"

namespace paddock::internal {

template <typename Core>
class Engine<Core>::LoaderCall {
 public:
  explicit LoaderCall(const Core& core) : core_(core) {}

  // The blocking loader's answer for `key` (of `hash`). Throws only what
  // making the error's message throws (std::bad_alloc).
  absl::StatusOr<V> Call(const K& key, size_t hash) const {
    const LoadScope scope(&core_, hash, &key);
    try {
      return core_.loader(key);
    } catch (...) {
      return CaughtError("paddock: the loader threw: ",
                         "paddock: the loader threw an exception that is not a "
                         "std::exception");
    }
  }

  // Starts the asynchronous loader for `key`, to complete `done`. Returns
  // what it threw, as an Internal error, or OK. Throws as Call.
  absl::Status CallAsync(const K& key, size_t hash, Completion<V> done) const {
    const LoadScope scope(&core_, hash, &key);
    try {
      core_.async_loader(key, std::move(done));
      return absl::OkStatus();
    } catch (...) {
      return CaughtError(
          "paddock: the asynchronous loader threw: ",
          "paddock: the asynchronous loader threw an exception that is not a "
          "std::exception");
    }
  }

 private:
  const Core& core_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOADER_CALL_H_
