// Tests of paddock/internal/caught_error.h: the exception being handled
// becomes an Internal error, with its what() when it has one.

#include "paddock/internal/caught_error.h"

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

// What CaughtError makes of the exception `raise` throws.
template <typename Raise>
absl::Status ErrorOf(const Raise& raise) {
  try {
    raise();
  } catch (...) {
    return CaughtError("threw: ", "threw something else");
  }
  return absl::OkStatus();
}

TEST(CaughtErrorTest, AStdExceptionGivesThePrefixAndItsWhat) {
  EXPECT_EQ(ErrorOf([] { throw std::runtime_error("disk full"); }),
            absl::InternalError("threw: disk full"));
  // Read as a std::exception whatever the handler caught it as.
  EXPECT_EQ(ErrorOf([] { throw std::out_of_range("index 7"); }),
            absl::InternalError("threw: index 7"));
}

TEST(CaughtErrorTest, AnyOtherExceptionGivesTheOtherMessage) {
  EXPECT_EQ(ErrorOf([] { throw 42; }),
            absl::InternalError("threw something else"));
  EXPECT_EQ(ErrorOf([] { throw std::string("not an exception class"); }),
            absl::InternalError("threw something else"));
}

}  // namespace
}  // namespace paddock::internal
