// Tests for paddock::Codec: what crosses a process boundary comes back the
// same, and bytes that are not a whole value of the type are an error.

#include "paddock/codec.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddock {
namespace {

using ::testing::HasSubstr;

template <typename T>
class ArithmeticCodecTest : public ::testing::Test {};

using ArithmeticTypes =
    ::testing::Types<char, signed char, unsigned char, int16_t, uint16_t,
                     int32_t, uint32_t, int64_t, uint64_t, float, double,
                     long double>;
TYPED_TEST_SUITE(ArithmeticCodecTest, ArithmeticTypes);

// The values at the edges of `T`: its limits and, for floating point, the
// subnormals, the infinities and the signed zero.
template <typename T>
std::vector<T> EdgeValues() {
  using L = std::numeric_limits<T>;
  std::vector<T> values = {T{0}, T{1}, L::min(), L::max(), L::lowest()};
  if constexpr (std::is_floating_point_v<T>) {
    values.insert(values.end(),
                  {L::denorm_min(), -L::denorm_min(), L::min() / 4,
                   -L::min() / 3, L::infinity(), -L::infinity(), -T{0}, T{0.1L},
                   T{-1e10L}, L::epsilon()});
  }
  return values;
}

TYPED_TEST(ArithmeticCodecTest, EveryEdgeValueComesBackTheSame) {
  using T = TypeParam;
  for (const T value : EdgeValues<T>()) {
    const std::string bytes = Codec<T>::Encode(value);
    const absl::StatusOr<T> decoded = Codec<T>::Decode(bytes);
    ASSERT_TRUE(decoded.ok()) << bytes << ": " << decoded.status();
    EXPECT_EQ(*decoded, value) << bytes;
    if constexpr (std::is_floating_point_v<T>) {
      // A zero reads back as +0.0 (see the next test); anything else keeps
      // its sign.
      if (value != T{0}) {
        EXPECT_EQ(std::signbit(*decoded), std::signbit(value)) << bytes;
      }
    }
  }
}

// The tier tells keys apart by their bytes: keys the cache's default Eq
// takes for one must be one key there too, or a Put of one leaves other
// processes serving the other's record.
TYPED_TEST(ArithmeticCodecTest, EqualValuesEncodeToEqualBytes) {
  using T = TypeParam;
  const std::vector<T> values = EdgeValues<T>();
  for (const T a : values) {
    for (const T b : values) {
      if (a == b) {
        EXPECT_EQ(Codec<T>::Encode(a), Codec<T>::Encode(b))
            << absl::StrFormat("%.30Lg", static_cast<long double>(a));
      }
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    EXPECT_EQ(Codec<T>::Encode(-T{0}), "0");
  }
}

TYPED_TEST(ArithmeticCodecTest, EveryNanEncodesAsOneCanonicalNan) {
  using T = TypeParam;
  if constexpr (std::is_floating_point_v<T>) {
    using L = std::numeric_limits<T>;
    for (const T nan : {L::quiet_NaN(), -L::quiet_NaN(), L::signaling_NaN(),
                        std::copysign(L::quiet_NaN(), T{-1})}) {
      EXPECT_EQ(Codec<T>::Encode(nan), "nan");
    }
  }
}

TYPED_TEST(ArithmeticCodecTest, ANanComesBackANan) {
  using T = TypeParam;
  if constexpr (std::is_floating_point_v<T>) {
    const absl::StatusOr<T> decoded =
        Codec<T>::Decode(Codec<T>::Encode(std::numeric_limits<T>::quiet_NaN()));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(std::isnan(*decoded));
  }
}

TYPED_TEST(ArithmeticCodecTest, BytesThatAreNotOneWholeValueAreAnError) {
  using T = TypeParam;
  for (const std::string_view bytes :
       {"", " 1", "1 ", "1x", "x", "+1", "--1", "1e99999", "-1e99999"}) {
    const absl::StatusOr<T> decoded = Codec<T>::Decode(bytes);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << bytes << "\"";
  }
}

TYPED_TEST(ArithmeticCodecTest, AnIntegerOutsideTheTypeIsAnError) {
  using T = TypeParam;
  if constexpr (std::is_unsigned_v<T>) {
    EXPECT_EQ(Codec<T>::Decode("-1").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  if constexpr (std::is_integral_v<T>) {
    const std::string one_past =
        absl::StrFormat("%d0", std::numeric_limits<T>::max());
    EXPECT_EQ(Codec<T>::Decode(one_past).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(FloatingPointCodec, AValueTooSmallForEvenASubnormalIsAnError) {
  // Not rounded to zero: a strict decoder gives no value it was not sent.
  EXPECT_FALSE(Codec<double>::Decode("1e-400").ok());
  EXPECT_FALSE(Codec<long double>::Decode("1e-5000").ok());
  EXPECT_FALSE(Codec<float>::Decode("1e-50").ok());
}

TEST(FloatingPointCodec, EncodesTheShortestTextThatRoundTrips) {
  EXPECT_EQ(Codec<double>::Encode(0.1), "0.1");
  EXPECT_EQ(Codec<float>::Encode(0.1F), "0.1");
  EXPECT_EQ(Codec<int64_t>::Encode(-42), "-42");
}

TEST(BoolCodec, IsOneOrZero) {
  EXPECT_EQ(Codec<bool>::Encode(true), "1");
  EXPECT_EQ(Codec<bool>::Encode(false), "0");
  EXPECT_EQ(*Codec<bool>::Decode("1"), true);
  EXPECT_EQ(*Codec<bool>::Decode("0"), false);
  for (const std::string_view bytes : {"", "true", "2", "01", "1 "}) {
    EXPECT_EQ(Codec<bool>::Decode(bytes).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "\"" << bytes << "\"";
  }
}

TEST(StringCodec, KeepsEveryByte) {
  const std::string bytes("a\0b\xff\n", 5);
  EXPECT_EQ(Codec<std::string>::Encode(bytes), bytes);
  EXPECT_EQ(*Codec<std::string>::Decode(bytes), bytes);
  EXPECT_EQ(*Codec<std::string>::Decode(""), "");
}

TEST(StringCodec, ShowsAtMost32BytesOfWhatItCouldNotDecode) {
  const absl::StatusOr<int> decoded = Codec<int>::Decode(std::string(100, 'z'));
  EXPECT_THAT(std::string(decoded.status().message()),
              HasSubstr("\"" + std::string(32, 'z') + "\""));
}

struct OrderId {
  int region;
  int64_t number;

  template <typename Sink>
  friend void AbslStringify(Sink& sink, const OrderId& id) {
    absl::Format(&sink, "%d/%d", id.region, id.number);
  }
};

struct Sku {
  std::string text;

  template <typename Sink>
  friend void AbslStringify(Sink& sink, const Sku& sku) {
    sink.Append("sku:");
    sink.Append(sku.text);
    sink.Append(2, '!');
  }
};

TEST(BoolCodec, EqualValuesEncodeToEqualBytes) {
  EXPECT_EQ(Codec<bool>::Encode(true), Codec<bool>::Encode(bool{1}));
  EXPECT_EQ(Codec<bool>::Encode(false), Codec<bool>::Encode(bool{0}));
  EXPECT_NE(Codec<bool>::Encode(true), Codec<bool>::Encode(false));
}

TEST(StringCodec, EqualStringsEncodeToEqualBytes) {
  const std::string a("k\0ey", 4);
  const std::string b = std::string("k") + '\0' + "ey";
  ASSERT_EQ(a, b);
  EXPECT_EQ(Codec<std::string>::Encode(a), Codec<std::string>::Encode(b));
  EXPECT_NE(Codec<std::string>::Encode("k"), Codec<std::string>::Encode("k "));
}

TEST(StringifyCodec, AKeyWithAnAbslStringifyOverloadEncodesAsItsText) {
  EXPECT_EQ(Codec<OrderId>::Encode(OrderId{7, 1234567890123}),
            "7/1234567890123");
  EXPECT_EQ(Codec<Sku>::Encode(Sku{"x1"}), "sku:x1!!");
  static_assert(Encodable<OrderId>);
  static_assert(!Decodable<OrderId>);  // No Decode unless specialised.
}

TEST(Concepts, ArithmeticTypesStringsAndBoolsGoBothWays) {
  static_assert(Encodable<int> && Decodable<int>);
  static_assert(Encodable<long double> && Decodable<long double>);
  static_assert(Encodable<std::string> && Decodable<std::string>);
  static_assert(Encodable<bool> && Decodable<bool>);
  static_assert(!Encodable<std::vector<int>>);
}

}  // namespace
}  // namespace paddock
