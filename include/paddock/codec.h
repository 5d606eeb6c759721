// File: paddock/codec.h
// -----------------------------------------------------------------------------
// `paddock::Codec<T>`: how keys and values cross a process boundary (the
// shared tier, `paddock/shared_tier.h`). A specialisable trait, like
// `std::hash`:
//
//   template <>
//   struct paddock::Codec<Page> {
//     static std::string Encode(const Page& page);
//     static absl::StatusOr<Page> Decode(std::string_view bytes);
//   };
//
// Built in: `std::string`, every arithmetic type (as decimal text, so a value
// is readable with redis-cli), and, for encoding only, any type with an
// `AbslStringify` overload. Decode is strict: trailing bytes, overflow or an
// empty input are errors, never a partial value.
//
// Equal keys must encode alike: the tier tells keys apart by their bytes, so
// a key written by one process under one spelling and invalidated by another
// under a second would leave the first copy standing. Every built-in codec
// keeps that rule; a specialisation of your own must too.
//
// Version the encoding with the shared tier's key prefix (`svc:v1:`): a
// process running a new format must not read the old one.

#ifndef PADDOCK_CODEC_H_
#define PADDOCK_CODEC_H_

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "paddock/internal/subnormal.h"

namespace paddock {

// Codec
//
// Unspecialised: no codec. Specialise it for your own types (both members
// static, neither may throw what it can report as a status).
template <typename T>
struct Codec;

// Whether `T` can be written to a shared tier.
template <typename T>
concept Encodable = requires(const T& t) {
  { Codec<T>::Encode(t) } -> std::convertible_to<std::string>;
};

// Whether `T` can be read back from a shared tier.
template <typename T>
concept Decodable = requires(std::string_view bytes) {
  { Codec<T>::Decode(bytes) } -> std::same_as<absl::StatusOr<T>>;
};

template <>
struct Codec<std::string> {
  static std::string Encode(const std::string& s) { return s; }
  static absl::StatusOr<std::string> Decode(std::string_view bytes) {
    return std::string(bytes);
  }
};

template <>
struct Codec<bool> {
  static std::string Encode(bool b) { return b ? "1" : "0"; }
  static absl::StatusOr<bool> Decode(std::string_view bytes) {
    if (bytes == "1") return true;
    if (bytes == "0") return false;
    return absl::InvalidArgumentError("paddock::Codec<bool>: not 0 or 1");
  }
};

// Integers and floating point as shortest round-trip decimal text. Values
// that compare equal encode alike: -0.0 encodes as "0" (and so reads back as
// +0.0), since `==` and absl::Hash take it for 0.0. Every NaN encodes as
// "nan" (its sign and payload dropped): one spelling for what is, to the
// tier, one key. A NaN key is never equal to itself under `std::equal_to`,
// so a cache never finds it again, here or anywhere: give such keys a type
// whose equality says what they mean.
template <typename T>
requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) struct Codec<T> {
  static std::string Encode(T t) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(t)) return "nan";
      if (t == T{0}) t = T{0};  // -0.0 becomes +0.0.
    }
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), t);
    (void)ec;  // 64 bytes hold every arithmetic value's shortest form.
    return std::string(buf, end);
  }
  static absl::StatusOr<T> Decode(std::string_view bytes) {
    T t{};
    const char* const end = bytes.data() + bytes.size();
    const auto [ptr, ec] = std::from_chars(bytes.data(), end, t);
    if constexpr (std::is_same_v<T, long double>) {
      if (ec == std::errc::result_out_of_range && ptr == end) {
        const std::optional<long double> subnormal =
            internal::ParseSubnormalLongDouble(bytes);
        if (subnormal.has_value()) return *subnormal;
      }
    }
    if (bytes.empty() || ec != std::errc() || ptr != end) {
      // Debian's abseil has its own string_view type: convert explicitly.
      const std::string_view shown = bytes.substr(0, 32);
      return absl::InvalidArgumentError(
          absl::StrCat("paddock::Codec: not a number of this type: \"",
                       absl::string_view(shown.data(), shown.size()), "\""));
    }
    return t;
  }
};

// The sink an `AbslStringify` overload writes to. abseil's own sink arrived
// after LTS 20220623, so paddock detects the convention itself; the overload
// may call `sink.Append(...)` or `absl::Format(&sink, ...)`.
class StringifySink {
 public:
  void Append(std::string_view s) { out_.append(s); }
  void Append(size_t count, char c) { out_.append(count, c); }
  // What `absl::Format(&sink, ...)` writes through. It takes absl's own
  // string_view: absl::Format looks for that signature, and Debian's abseil
  // does not make it std::string_view.
  friend void AbslFormatFlush(StringifySink* sink, absl::string_view s) {
    sink->out_.append(s.data(), s.size());
  }
  std::string&& Take() && { return std::move(out_); }

 private:
  std::string out_;
};

// Whether `T` has an `AbslStringify(Sink&, const T&)` overload found by ADL.
template <typename T>
concept HasAbslStringify = requires(StringifySink& sink, const T& t) {
  AbslStringify(sink, t);
};

// Keys need only `Encode`: a type with an `AbslStringify` overload encodes as
// the text it writes. Specialise `Codec` to give such a key a `Decode` as
// well; without one, a cache cannot tell which of its keys another process
// invalidated and drops every value it took from the shared tier instead
// (docs/fleet.md).
template <typename T>
requires(!std::is_arithmetic_v<T> && HasAbslStringify<T>) struct Codec<T> {
  static std::string Encode(const T& t) {
    StringifySink sink;
    AbslStringify(sink, t);
    return std::move(sink).Take();
  }
};

}  // namespace paddock

#endif  // PADDOCK_CODEC_H_
