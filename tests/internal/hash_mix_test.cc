// Tests for internal::MixedHash: a hash the shard and slot choice can use as
// it is (absl's) passes through unchanged, and any other is mixed so that
// keys differing only in their low bits still spread over the top bits,
// which pick a key's shard.

#include "paddock/internal/hash_mix.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "paddock/key_hash.h"

namespace paddock::internal {
namespace {

TEST(HashMixTest, AbslsHashPassesThroughUnchanged) {
  const absl::Hash<std::string> hash;
  EXPECT_EQ(MixedHash(hash, std::string("key")), hash(std::string("key")));
  EXPECT_EQ(MixedHash(StringKeyHash(), std::string_view("key")),
            StringKeyHash()(std::string_view("key")));
}

// libstdc++'s std::hash<int> is the identity: unmixed, keys 0..N-1 would
// all land in shard 0 (the top bits choose it).
TEST(HashMixTest, AnIdentityHashIsSpreadOverTheTopBits) {
  constexpr size_t kShards = 8;
  std::array<int, kShards> per_shard{};
  for (int key = 0; key < 8000; ++key) {
    const size_t h = MixedHash(std::hash<int>(), key);
    ++per_shard[((h >> 32) * kShards) >> 32];
  }
  for (size_t shard = 0; shard < kShards; ++shard) {
    EXPECT_GT(per_shard[shard], 800) << "shard " << shard;
    EXPECT_LT(per_shard[shard], 1200) << "shard " << shard;
  }
}

TEST(HashMixTest, MixingIsAFunctionOfTheHashAlone) {
  EXPECT_EQ(MixedHash(std::hash<int>(), 42), MixedHash(std::hash<int>(), 42));
  EXPECT_NE(MixedHash(std::hash<int>(), 42), MixedHash(std::hash<int>(), 43));
  EXPECT_EQ(MixBits(0), 0u);  // A fixed point, harmless: one key.
}

}  // namespace
}  // namespace paddock::internal
