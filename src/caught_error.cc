// The exception being handled, as an Internal error (caught_error.h).

#include "paddock/internal/caught_error.h"

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace paddock::internal {

absl::Status CaughtError(absl::string_view with_what,
                         absl::string_view otherwise) {
  // Rethrowing the handled exception is the only portable way to read it.
  try {
    throw;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(with_what, e.what()));
  } catch (...) {
    return absl::InternalError(otherwise);
  }
}

}  // namespace paddock::internal
