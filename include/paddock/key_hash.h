// File: paddock/key_hash.h
// -----------------------------------------------------------------------------
// The `Hash` and `Eq` a `paddock::Cache<K, V>` uses unless told otherwise.
// For most keys they are `absl::Hash<K>` and `std::equal_to<K>`. For
// `std::string` and `std::string_view` keys they are transparent: they hash
// and compare anything convertible to `std::string_view` as the string it
// holds, so that `cache.Get(std::string_view)` or `cache.Get("literal")`
// finds a `std::string` key without building one (heterogeneous lookup, as
// in `absl::flat_hash_map`). A hit then allocates nothing.
//
// A user's own `Hash` and `Eq` get the same lookups by declaring
// `using is_transparent = void;` and accepting the other key types, provided
// they hash and compare such a key exactly as the K made from it.

#ifndef PADDOCK_KEY_HASH_H_
#define PADDOCK_KEY_HASH_H_

#include <concepts>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace paddock {

// Hashes a string key as `absl::Hash<std::string>` does, for a
// `std::string` and any view of the same characters alike. Thread-safe
// (stateless).
struct StringKeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view key) const {
    // Through absl::string_view, not std::string_view: an abseil built with
    // its own string_view (Debian's) hashes a std::string_view by
    // std::hash, unseeded, so that keys an attacker picks could all
    // collide. absl::string_view gets absl's own seeded hash.
    return absl::Hash<absl::string_view>()(
        absl::string_view(key.data(), key.size()));
  }
};

// Compares string keys as `std::string_view`s. Thread-safe (stateless).
struct StringKeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const {
    return a == b;
  }
};

namespace internal {

template <typename K>
struct DefaultKeyFunctions {
  using Hash = absl::Hash<K>;
  using Eq = std::equal_to<K>;
};
template <>
struct DefaultKeyFunctions<std::string> {
  using Hash = StringKeyHash;
  using Eq = StringKeyEq;
};
template <>
struct DefaultKeyFunctions<std::string_view> {
  using Hash = StringKeyHash;
  using Eq = StringKeyEq;
};

// Whether a `Cache<K, V, P, Hash, Eq>` looks `K` up by a `Q` (see
// `Cache::kLooksUp`).
template <typename Q, typename K, typename Hash, typename Eq>
concept LooksUpWith =
    !std::same_as<Q, K> && std::constructible_from<K, const Q&> &&
    requires(const Hash& hash, const Eq& eq, const Q& q, const K& k) {
  typename Hash::is_transparent;
  typename Eq::is_transparent;
  { hash(q) } -> std::convertible_to<size_t>;
  { eq(k, q) } -> std::convertible_to<bool>;
};

}  // namespace internal

// The default `Hash` and `Eq` of `Cache<K, V>` (see the top of this file).
template <typename K>
using KeyHash = typename internal::DefaultKeyFunctions<K>::Hash;
template <typename K>
using KeyEq = typename internal::DefaultKeyFunctions<K>::Eq;

}  // namespace paddock

#endif  // PADDOCK_KEY_HASH_H_
