// File: paddock/internal/hash_mix.h
// -----------------------------------------------------------------------------
// A cache picks a key's shard from the high bits of its hash and its slot
// from the low bits, so every bit must depend on the whole key. `absl::Hash`
// guarantees that; a user's `Hash` need not (libstdc++'s `std::hash` of an
// integer is the identity, which would put every small key in shard 0).
// `MixedHash` applies a cheap finaliser to any hash but absl's.

#ifndef PADDOCK_INTERNAL_HASH_MIX_H_
#define PADDOCK_INTERNAL_HASH_MIX_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/hash/hash.h"
#include "paddock/key_hash.h"

namespace paddock::internal {

template <typename Hash>
inline constexpr bool kHashIsMixed = false;
template <typename K>
inline constexpr bool kHashIsMixed<absl::Hash<K>> = true;
template <>
inline constexpr bool kHashIsMixed<StringKeyHash> = true;  // absl::Hash.

// Spreads every input bit over the high and the low half (a
// multiply-xorshift finaliser).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t MixBits(uint64_t h) {
  h ^= h >> 32;
  h *= 0x9e3779b97f4a7c15ULL;
  h ^= h >> 32;
  return h;
}

template <typename Hash, typename K>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline size_t MixedHash(const Hash& hash,
                                                     const K& key) {
  const size_t h = hash(key);
  if constexpr (kHashIsMixed<Hash>) {
    return h;
  } else {
    return static_cast<size_t>(MixBits(h));
  }
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_HASH_MIX_H_
