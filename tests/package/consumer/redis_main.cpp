// A tiny consumer of paddock::redis (tests/package/run.sh): links the Redis
// tier and checks that Connect reports what it should, without a server.

#include <paddock/redis.h>

#include <cstdio>
#include <memory>

int main() {
  paddock::RedisOptions options;
  options.address = "not an address";
  absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
      paddock::RedisTier::Connect(options);
  if (tier.status().code() != absl::StatusCode::kInvalidArgument) return 1;

  options.address = "unix:/nonexistent-paddock-consumer/redis.sock";
  tier = paddock::RedisTier::Connect(options);
  if (tier.status().code() != absl::StatusCode::kUnavailable) return 1;
  std::printf("paddock::redis: %s\n", tier.status().ToString().c_str());
  return 0;
}
