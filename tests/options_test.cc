// Tests of paddock/options.h: the defaults, Options::Validate(), and the cache
// constructor's refusal of invalid options, policies and loaders.

#include "paddock/options.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/policy.h"

namespace paddock {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

using IntCache = Cache<int, int, SingleFlight>;

absl::StatusOr<int> Identity(const int& key) { return key; }

// Matches an error message that names `field` (as a word) and the value given.
auto NamesFieldAndValue(const std::string& field, const std::string& value) {
  return AllOf(HasSubstr(" " + field + " "), HasSubstr("got " + value));
}

// Constructs a cache with `policy` and throws what its constructor throws.
template <typename Policy>
void ConstructCache(const Options& options, const Policy& policy) {
  Cache<int, int, Policy> cache(Identity, options, policy);
}

TEST(OptionsTest, DefaultsAreTheDocumentedValues) {
  const Options options;
  EXPECT_EQ(options.ttl, absl::Seconds(10));
  EXPECT_EQ(options.max_entries, 65536u);
  EXPECT_EQ(options.shards, 0);
  EXPECT_EQ(options.wait_timeout, absl::Seconds(5));
  EXPECT_EQ(options.clock, nullptr);
  EXPECT_EQ(options.executor, nullptr);
  EXPECT_EQ(options.seed, 0u);
  EXPECT_EQ(options.error_ttl, absl::ZeroDuration());
  EXPECT_EQ(options.max_concurrent_loads, 0);
  EXPECT_EQ(options.max_load_age, absl::Seconds(30));
  EXPECT_EQ(options.listener, nullptr);
}

TEST(OptionsTest, DefaultsAreValid) { EXPECT_TRUE(Options{}.Validate().ok()); }

TEST(OptionsTest, TheMostConcurrentLoadsAllowedIsValid) {
  EXPECT_TRUE(Options{.max_concurrent_loads = Options::kMaxConcurrentLoadsLimit}
                  .Validate()
                  .ok());
}

TEST(OptionsTest, TheMostShardsAllowedAreValid) {
  EXPECT_TRUE(Options{.shards = Options::kMaxShards}.Validate().ok());
}

TEST(OptionsTest, TheSmallestValuesInRangeAreValid) {
  const Options options{
      .ttl = absl::Nanoseconds(1),
      .max_entries = 1,
      .shards = 0,
      .wait_timeout = absl::ZeroDuration(),
      .error_ttl = absl::ZeroDuration(),
      .max_concurrent_loads = 0,
      .max_load_age = absl::Nanoseconds(1),
  };
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  EXPECT_NO_THROW(ConstructCache(options, SingleFlight{}));
}

TEST(OptionsTest, AnInfiniteMaxLoadAgeIsValid) {
  const Options options{.max_load_age = absl::InfiniteDuration()};
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  EXPECT_NO_THROW(ConstructCache(options, SingleFlight{}));
}

TEST(OptionsTest, ValidateNamesTheFirstInvalidField) {
  const Options options{.ttl = absl::Seconds(-1),
                        .max_load_age = absl::ZeroDuration()};
  const absl::Status status = options.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), NamesFieldAndValue("ttl", "-1s"));
}

// One option out of range, and what its error must say.
struct InvalidOption {
  std::string test_name;
  Options options;
  std::string field;
  std::string value;
};

class InvalidOptionTest : public ::testing::TestWithParam<InvalidOption> {};

TEST_P(InvalidOptionTest, ValidateReturnsInvalidArgumentNamingFieldAndValue) {
  const absl::Status status = GetParam().options.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              NamesFieldAndValue(GetParam().field, GetParam().value));
}

TEST_P(InvalidOptionTest, CacheConstructorThrowsNamingFieldAndValue) {
  EXPECT_THAT([] { ConstructCache(GetParam().options, SingleFlight{}); },
              ThrowsMessage<std::invalid_argument>(
                  NamesFieldAndValue(GetParam().field, GetParam().value)));
}

INSTANTIATE_TEST_SUITE_P(
    EveryField, InvalidOptionTest,
    ::testing::Values(
        InvalidOption{"ZeroTtl", Options{.ttl = absl::ZeroDuration()}, "ttl",
                      "0"},
        InvalidOption{"NegativeTtl", Options{.ttl = absl::Seconds(-1)}, "ttl",
                      "-1s"},
        InvalidOption{"NegativeInfiniteTtl",
                      Options{.ttl = -absl::InfiniteDuration()}, "ttl", "-inf"},
        InvalidOption{"ZeroMaxEntries", Options{.max_entries = 0},
                      "max_entries", "0"},
        InvalidOption{"NegativeShards", Options{.shards = -2}, "shards", "-2"},
        InvalidOption{"HugeShards", Options{.shards = 65537}, "shards",
                      "65537"},
        InvalidOption{"NegativeWaitTimeout",
                      Options{.wait_timeout = absl::Milliseconds(-5)},
                      "wait_timeout", "-5ms"},
        InvalidOption{"NegativeErrorTtl",
                      Options{.error_ttl = absl::Seconds(-3)}, "error_ttl",
                      "-3s"},
        InvalidOption{"NegativeMaxConcurrentLoads",
                      Options{.max_concurrent_loads = -1},
                      "max_concurrent_loads", "-1"},
        InvalidOption{"HugeMaxConcurrentLoads",
                      Options{.max_concurrent_loads = 65537},
                      "max_concurrent_loads", "65537"},
        InvalidOption{"ZeroMaxLoadAge",
                      Options{.max_load_age = absl::ZeroDuration()},
                      "max_load_age", "0"},
        InvalidOption{"NegativeMaxLoadAge",
                      Options{.max_load_age = absl::Seconds(-30)},
                      "max_load_age", "-30s"}),
    [](const ::testing::TestParamInfo<InvalidOption>& info) {
      return info.param.test_name;
    });

TEST(PolicyValidationTest, NaiveJitterOfOneAndAHalfThrowsNamingJitter) {
  EXPECT_THAT([] { ConstructCache(Options{}, NaiveJitter{.jitter = 1.5}); },
              ThrowsMessage<std::invalid_argument>(
                  NamesFieldAndValue("jitter", "1.5")));
}

TEST(PolicyValidationTest, NaiveJitterOfOneThrowsNamingJitter) {
  EXPECT_THAT(
      [] { ConstructCache(Options{}, NaiveJitter{.jitter = 1.0}); },
      ThrowsMessage<std::invalid_argument>(NamesFieldAndValue("jitter", "1")));
}

TEST(PolicyValidationTest, NegativeNaiveJitterThrowsNamingJitter) {
  EXPECT_THAT([] { ConstructCache(Options{}, NaiveJitter{.jitter = -0.25}); },
              ThrowsMessage<std::invalid_argument>(
                  NamesFieldAndValue("jitter", "-0.25")));
}

TEST(PolicyValidationTest, ZeroNaiveJitterIsValid) {
  EXPECT_NO_THROW(ConstructCache(Options{}, NaiveJitter{.jitter = 0}));
}

TEST(PolicyValidationTest, XFetchBetaOfZeroThrowsNamingBeta) {
  EXPECT_THAT(
      [] { ConstructCache(Options{}, XFetch{.beta = 0}); },
      ThrowsMessage<std::invalid_argument>(NamesFieldAndValue("beta", "0")));
}

TEST(PolicyValidationTest, NegativeXFetchBetaThrowsNamingBeta) {
  EXPECT_THAT(
      [] { ConstructCache(Options{}, XFetch{.beta = -2}); },
      ThrowsMessage<std::invalid_argument>(NamesFieldAndValue("beta", "-2")));
}

TEST(PolicyValidationTest, InfiniteXFetchBetaThrowsNamingBeta) {
  EXPECT_THAT(
      [] { ConstructCache(Options{}, XFetch{.beta = INFINITY}); },
      ThrowsMessage<std::invalid_argument>(NamesFieldAndValue("beta", "inf")));
}

TEST(PolicyValidationTest, NanXFetchBetaThrowsNamingBeta) {
  EXPECT_THAT(
      [] { ConstructCache(Options{}, XFetch{.beta = NAN}); },
      ThrowsMessage<std::invalid_argument>(NamesFieldAndValue("beta", "nan")));
}

TEST(PolicyValidationTest, NegativeSoftTtlStaleForThrowsNamingStaleFor) {
  EXPECT_THAT(
      [] {
        ConstructCache(Options{}, SoftTtl{.stale_for = absl::Seconds(-1)});
      },
      ThrowsMessage<std::invalid_argument>(
          NamesFieldAndValue("stale_for", "-1s")));
}

TEST(PolicyValidationTest,
     NegativeSoftTtlStaleIfErrorThrowsNamingStaleIfError) {
  EXPECT_THAT(
      [] {
        ConstructCache(Options{},
                       SoftTtl{.stale_if_error = absl::Milliseconds(-20)});
      },
      ThrowsMessage<std::invalid_argument>(
          NamesFieldAndValue("stale_if_error", "-20ms")));
}

TEST(PolicyValidationTest, SoftTtlWithZeroDurationsIsValid) {
  EXPECT_NO_THROW(ConstructCache(
      Options{}, SoftTtl{.stale_for = absl::ZeroDuration(),
                         .stale_if_error = absl::ZeroDuration()}));
}

TEST(CacheConstructorTest, AnEmptyLoaderThrowsNamingTheLoader) {
  EXPECT_THAT(
      [] {
        IntCache::Loader empty;
        IntCache cache(std::move(empty));
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("loader")));
}

}  // namespace
}  // namespace paddock
