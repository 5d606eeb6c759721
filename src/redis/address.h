// File: src/redis/address.h
// -----------------------------------------------------------------------------
// Where Redis listens: a unix socket or a TCP host and port, parsed from
// `RedisOptions::address`.

#ifndef PADDOCK_SRC_REDIS_ADDRESS_H_
#define PADDOCK_SRC_REDIS_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddock::internal {

struct RedisAddress {
  // The text it was parsed from, for error messages.
  std::string text;
  // Set for "unix:<path>".
  std::string unix_path;
  // Set for "<host>:<port>" and "[<ipv6>]:<port>" (without the brackets).
  std::string host;
  int port = 0;

  bool is_unix() const { return !unix_path.empty(); }
};

// Returns the address, or `absl::InvalidArgumentError` saying what is wrong
// with it.
absl::StatusOr<RedisAddress> ParseRedisAddress(std::string_view text);

// The address of `host` (a name, an IPv4 or an IPv6 address) and `port`, as
// a server names it (Sentinel, CLUSTER SLOTS): its `text` is
// "<host>:<port>", with brackets around an IPv6 address.
absl::StatusOr<RedisAddress> TcpAddress(absl::string_view host, int port);

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_ADDRESS_H_
