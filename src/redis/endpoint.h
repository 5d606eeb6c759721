// File: src/redis/endpoint.h
// -----------------------------------------------------------------------------
// `RedisEndpoint`: where a connection goes and who it says it is. Every new
// connection of the tier (pooled, the change subscription, probes) opens from
// one, and sends AUTH before any other command when it carries a password.
// The password is never put in a status, a log line or stats.

#ifndef PADDOCK_SRC_REDIS_ENDPOINT_H_
#define PADDOCK_SRC_REDIS_ENDPOINT_H_

#include <memory>
#include <string>

#include "redis/address.h"
#include "redis/tls.h"

namespace paddock::internal {

struct RedisEndpoint {
  RedisAddress address;
  // `RedisOptions::username` and `password`: AUTH <username> <password>, or
  // AUTH <password> for the default user; nothing when `password` is empty.
  std::string username = {};
  std::string password = {};
  // Set: the connection runs TLS with it (`RedisOptions::tls`).
  std::shared_ptr<const TlsContext> tls = nullptr;

  bool authenticates() const { return !password.empty(); }
  // "the default user" or `user "<username>"`, for messages.
  std::string user_for_messages() const {
    return username.empty() ? "the default user" : "user \"" + username + "\"";
  }
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_ENDPOINT_H_
