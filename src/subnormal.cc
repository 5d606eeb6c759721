// Subnormal long doubles for Codec<long double>.

#include "paddock/internal/subnormal.h"

#include <locale.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace paddock::internal {

std::optional<long double> ParseSubnormalLongDouble(
    std::string_view text) noexcept {
  // A copy to terminate the text: from_chars's inputs are not, and a long
  // double's longest shortest form is well under this.
  char buf[64];
  if (text.empty() || text.size() >= sizeof(buf)) return std::nullopt;
  text.copy(buf, text.size());
  buf[text.size()] = '\0';
  // strtold reads the thread's locale; Codec's text is always the C
  // locale's ('.' as the decimal point).
  static const locale_t c_locale =
      newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  if (c_locale == static_cast<locale_t>(nullptr)) return std::nullopt;
  const locale_t previous = uselocale(c_locale);
  char* end = nullptr;
  const long double value = std::strtold(buf, &end);
  uselocale(previous);
  if (end != buf + text.size()) return std::nullopt;
  if (std::fpclassify(value) != FP_SUBNORMAL) return std::nullopt;
  return value;
}

}  // namespace paddock::internal
