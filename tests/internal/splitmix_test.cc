// Tests for internal::SplitMixNext: SplitMix64 exactly (Steele et al.), so
// that a seeded run repeats on every platform.

#include "paddock/internal/splitmix.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(SplitMixTest, FromZeroGivesTheReferenceSequence) {
  uint64_t state = 0;
  EXPECT_EQ(SplitMixNext(&state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMixNext(&state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(SplitMixNext(&state), 0x06c45d188009454fULL);
  EXPECT_EQ(state, 3 * kSplitMixGamma);
}

TEST(SplitMixTest, IsAConstantExpression) {
  constexpr uint64_t kFirst = [] {
    uint64_t state = 0;
    return SplitMixNext(&state);
  }();
  static_assert(kFirst == 0xe220a8397b1dcdafULL);
  static_assert(SplitMixFinalize(0) == 0);
}

}  // namespace
}  // namespace paddock::internal
