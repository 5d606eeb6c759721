// File: src/redis/endpoint.h
// -----------------------------------------------------------------------------
// `RedisEndpoint`: where a connection goes and who it says it is. Every new
// connection of the tier (pooled, the change subscription, probes) opens from
// one, and sends AUTH before any other command when it carries a password.
// The password is never put in a status, a log line or stats. In Sentinel
// and Cluster mode some connections have no fixed address: an
// `AddressSource` names one at each open.

#ifndef PADDOCK_SRC_REDIS_ENDPOINT_H_
#define PADDOCK_SRC_REDIS_ENDPOINT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "redis/address.h"
#include "redis/tls.h"

namespace paddock::internal {

// Where the next connection of an endpoint goes: the master the sentinels
// name (MasterLocator, redis/sentinel.h), or any node of a cluster
// (ClusterMap, redis/cluster_map.h). Implementations are thread-safe.
class AddressSource {
 public:
  virtual ~AddressSource() = default;

  // The address to open now, found by `deadline` (`MonotonicNow()`); may
  // block to ask. An error names why there is none.
  virtual absl::StatusOr<RedisAddress> Locate(absl::Time deadline) = 0;

  // A connection to `address_text` failed or found the wrong server: the
  // next Locate() names another, or asks again. Never blocks on I/O.
  virtual void Forget(std::string_view address_text) = 0;

  // Whether a connection must check that the server is a master (ROLE)
  // before it is used.
  virtual bool requires_master() const = 0;
};

struct RedisEndpoint {
  // Where to connect; with a `source` only its `text`, which names what is
  // reached for messages.
  RedisAddress address;
  // `RedisOptions::username` and `password`: AUTH <username> <password>, or
  // AUTH <password> for the default user; nothing when `password` is empty.
  std::string username = {};
  std::string password = {};
  // Set: the connection runs TLS with it (`RedisOptions::tls`).
  std::shared_ptr<const TlsContext> tls = nullptr;
  // Set: each connection opens to the address it names (Sentinel mode: the
  // master, checked with ROLE; Cluster mode: the change subscription's node).
  std::shared_ptr<AddressSource> source = nullptr;

  bool authenticates() const { return !password.empty(); }
  // "the default user" or `user "<username>"`, for messages.
  std::string user_for_messages() const {
    return username.empty() ? "the default user" : "user \"" + username + "\"";
  }
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_ENDPOINT_H_
