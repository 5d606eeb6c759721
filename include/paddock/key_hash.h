// File: paddock/key_hash.h
// -----------------------------------------------------------------------------
// How a `paddock::Cache<K, V>` hashes and compares keys. Its `Hash` and `Eq`
// default to `absl::Hash<K>` and `std::equal_to<K>`. For `std::string` (and
// `std::string_view`) keys with those defaults, lookups call
// `StringKeyHash` and `StringKeyEq` in their place: they hash and compare
// exactly as the defaults do for a `std::string`, and they are transparent,
// taking anything convertible to `std::string_view` as the string it holds,
// so that `cache.Get(std::string_view)` or `cache.Get("literal")` finds a
// `std::string` key without building one (heterogeneous lookup, as in
// `absl::flat_hash_map`). A hit then allocates nothing.
//
// A user's own `Hash` and `Eq` get the same lookups by declaring
// `using is_transparent = void;` and accepting the other key types, provided
// they hash and compare such a key exactly as the K made from it;
// `StringKeyHash` and `StringKeyEq` may be named for that, too.

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

// What a cache hashes keys with for lookups: its `Hash`, except that
// `StringKeyHash` takes the place of the default `absl::Hash` of string
// keys. For a `std::string` it gives the same values (both hash the
// characters as an `absl::string_view`) and is transparent; for a
// `std::string_view` it is absl's seeded hash, where
// `absl::Hash<std::string_view>` is libstdc++'s unseeded `std::hash` when
// abseil has a string_view of its own (Debian's does).
template <typename K, typename Hash>
struct LookupHashOf {
  using type = Hash;
};
template <>
struct LookupHashOf<std::string, absl::Hash<std::string>> {
  using type = StringKeyHash;
};
template <>
struct LookupHashOf<std::string_view, absl::Hash<std::string_view>> {
  using type = StringKeyHash;
};

// The same for the comparison: `StringKeyEq` in place of `std::equal_to`.
template <typename K, typename Eq>
struct LookupEqOf {
  using type = Eq;
};
template <>
struct LookupEqOf<std::string, std::equal_to<std::string>> {
  using type = StringKeyEq;
};
template <>
struct LookupEqOf<std::string_view, std::equal_to<std::string_view>> {
  using type = StringKeyEq;
};

// Whether a cache whose lookups call `Hash` and `Eq` looks `K` up by a `Q`
// (see `Cache::kLooksUp`).
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

// The default `Hash` and `Eq` of `Cache<K, V>`: `absl::Hash<K>` and
// `std::equal_to<K>`, for every K.
template <typename K>
using KeyHash = absl::Hash<K>;
template <typename K>
using KeyEq = std::equal_to<K>;

}  // namespace paddock

#endif  // PADDOCK_KEY_HASH_H_
