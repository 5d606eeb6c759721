// Tests for internal::ParseSubnormalLongDouble: what std::from_chars refuses
// as out of range (a subnormal long double, on libstdc++) is read back
// exactly, and nothing else is accepted.

#include "paddock/internal/subnormal.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

std::string ShortestText(long double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  EXPECT_EQ(ec, std::errc());
  return std::string(buf, end);
}

TEST(SubnormalTest, TheSmallestSubnormalsComeBackExactly) {
  using L = std::numeric_limits<long double>;
  for (const long double v :
       {L::denorm_min(), -L::denorm_min(), L::min() / 4, -L::min() / 3}) {
    const std::optional<long double> parsed =
        ParseSubnormalLongDouble(ShortestText(v));
    ASSERT_TRUE(parsed.has_value()) << ShortestText(v);
    EXPECT_EQ(*parsed, v);
  }
}

TEST(SubnormalTest, AnythingButOneWholeSubnormalIsRefused) {
  EXPECT_FALSE(ParseSubnormalLongDouble("").has_value());
  EXPECT_FALSE(ParseSubnormalLongDouble("1").has_value());  // Normal.
  EXPECT_FALSE(ParseSubnormalLongDouble("0").has_value());
  EXPECT_FALSE(ParseSubnormalLongDouble("1e-5000").has_value());  // Zero.
  EXPECT_FALSE(ParseSubnormalLongDouble("3.6e-4951x").has_value());
  EXPECT_FALSE(ParseSubnormalLongDouble(std::string(200, '1')).has_value());
}

}  // namespace
}  // namespace paddock::internal
