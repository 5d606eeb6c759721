// File: paddock/internal/subnormal.h
// -----------------------------------------------------------------------------
// Reads back a subnormal `long double` that `std::from_chars` refuses.
// libstdc++ parses `long double` with strtold, which flags a subnormal result
// as an underflow, and reports it as out of range (LWG 3081); float and
// double have parsers of their own that do not.

#ifndef PADDOCK_INTERNAL_SUBNORMAL_H_
#define PADDOCK_INTERNAL_SUBNORMAL_H_

#include <optional>
#include <string_view>

namespace paddock::internal {

// Returns the value `text` (all of it, in the C locale's format) denotes if
// that value is subnormal; nullopt for anything else, including text that
// underflows to zero or overflows. Thread-safe; never throws.
std::optional<long double> ParseSubnormalLongDouble(
    std::string_view text) noexcept;

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_SUBNORMAL_H_
