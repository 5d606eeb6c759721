// File: paddock/internal/loader_call.h
// -----------------------------------------------------------------------------
// Calling the user's loader: inside a load scope (internal/load_stack.h), so
// that a Get of the key being loaded, from inside the loader, fails at once
// instead of waiting for itself; and with whatever the loader throws turned
// into an Internal error naming it, since the call may run where nothing can
// catch (a refresh on the executor).
//
// `LoaderCall<Core>` is made on the spot over a cache's internal::CacheCore.

#ifndef PADDOCK_INTERNAL_LOADER_CALL_H_
#define PADDOCK_INTERNAL_LOADER_CALL_H_

#include <cstddef>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "paddock/completion.h"
#include "paddock/internal/load_stack.h"

namespace paddock::internal {

template <typename Core>
class LoaderCall {
 public:
  using K = typename Core::Key;
  using V = typename Core::Value;

  explicit LoaderCall(const Core& core) : core_(core) {}

  // The blocking loader's answer for `key` (of `hash`). Throws only what
  // making the error's message throws (std::bad_alloc).
  absl::StatusOr<V> Call(const K& key, size_t hash) const {
    const LoadScope scope(&core_, hash, &key);
    try {
      return core_.loader(key);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("paddock: the loader threw: ", e.what()));
    } catch (...) {
      return absl::InternalError(
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
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("paddock: the asynchronous loader threw: ", e.what()));
    } catch (...) {
      return absl::InternalError(
          "paddock: the asynchronous loader threw an exception that is not a "
          "std::exception");
    }
  }

 private:
  const Core& core_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LOADER_CALL_H_
