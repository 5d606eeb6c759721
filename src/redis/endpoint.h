// File: src/redis/endpoint.h
// -----------------------------------------------------------------------------
// `RedisEndpoint`: where a connection goes and who it says it is. Every new
// connection of the tier (pooled, the change subscription, probes) opens from
// one, and sends AUTH before any other command when it carries a password.
// The password is never put in a status, a log line or stats. In Sentinel
// mode the address is the master's, which `sentinel` finds at each open.

#ifndef PADDOCK_SRC_REDIS_ENDPOINT_H_
#define PADDOCK_SRC_REDIS_ENDPOINT_H_

#include <memory>
#include <string>

#include "redis/address.h"
#include "redis/tls.h"

namespace paddock::internal {

class MasterLocator;  // redis/sentinel.h

struct RedisEndpoint {
  // Where to connect; in Sentinel mode only its `text`, which names the
  // master for messages.
  RedisAddress address;
  // `RedisOptions::username` and `password`: AUTH <username> <password>, or
  // AUTH <password> for the default user; nothing when `password` is empty.
  std::string username = {};
  std::string password = {};
  // Set: the connection runs TLS with it (`RedisOptions::tls`).
  std::shared_ptr<const TlsContext> tls = nullptr;
  // Set in Sentinel mode (`RedisOptions::sentinels`): each connection opens
  // to the master it names, and checks it is one (ROLE).
  std::shared_ptr<MasterLocator> sentinel = nullptr;

  bool authenticates() const { return !password.empty(); }
  // "the default user" or `user "<username>"`, for messages.
  std::string user_for_messages() const {
    return username.empty() ? "the default user" : "user \"" + username + "\"";
  }
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_ENDPOINT_H_
