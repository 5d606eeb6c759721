// File: tests/redis/redis_fixture.h
// -----------------------------------------------------------------------------
// `RedisTest`: the one fixture of the tests against a real redis-server. Each
// test gets a server of its own (redis_server.h: a unix socket in a temporary
// directory, stopped by its pid), tier options generous enough for a busy
// machine or a sanitizer (fault tests shorten them), and Connect.

#ifndef PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_
#define PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/redis.h"
#include "redis_server.h"

namespace paddock::testing {

class RedisTest : public ::testing::Test {
 protected:
  // `prefix`: the key prefix of TierOptions().
  explicit RedisTest(std::string prefix = "test:v1:")
      : prefix_(std::move(prefix)) {}

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A tier of this test's server: io_timeout 2 s and lease_for 10 s.
  RedisOptions TierOptions() const {
    RedisOptions options;
    options.address = server_->address();
    options.key_prefix = prefix_;
    options.io_timeout = absl::Seconds(2);
    options.lease_for = absl::Seconds(10);
    return options;
  }

  // A tier connected with `options`, or nullptr (the test fails).
  std::shared_ptr<RedisTier> Connect(const RedisOptions& options) {
    absl::StatusOr<std::shared_ptr<RedisTier>> tier =
        RedisTier::Connect(options);
    EXPECT_TRUE(tier.ok()) << tier.status();
    return tier.ok() ? *tier : nullptr;
  }
  std::shared_ptr<RedisTier> Connect() { return Connect(TierOptions()); }

  const std::string prefix_;
  std::unique_ptr<RedisServer> server_;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_REDIS_FIXTURE_H_
