// File: paddock/internal/caught_error.h
// -----------------------------------------------------------------------------
// The exception being handled, as an Internal error. A loader, an
// asynchronous loader and the store of a loaded value may throw anything;
// every waiter of the load gets a Status instead, with the exception's
// message when it has one.

#ifndef PADDOCK_INTERNAL_CAUGHT_ERROR_H_
#define PADDOCK_INTERNAL_CAUGHT_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace paddock::internal {

// Call only inside a catch handler. Returns an Internal error whose message
// is `with_what` followed by the exception's what() for a std::exception,
// and `otherwise` for any other exception. Throws only what making the
// message throws (std::bad_alloc). Thread-safe.
absl::Status CaughtError(absl::string_view with_what,
                         absl::string_view otherwise);

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_CAUGHT_ERROR_H_
