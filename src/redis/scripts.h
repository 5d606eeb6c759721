// File: src/redis/scripts.h
// -----------------------------------------------------------------------------
// The Lua scripts the Redis tier runs, one per operation. Each runs
// atomically on the server and reads the time from Redis (TIME), never from
// the caller. docs/fleet.md walks through them.

#ifndef PADDOCK_SRC_REDIS_SCRIPTS_H_
#define PADDOCK_SRC_REDIS_SCRIPTS_H_

#include <string>

namespace paddock::internal {

enum class Script {
  // KEYS: record, lease. ARGV: have_version, new token, lease period (ms),
  // max_value_bytes. Returns the lookup reply (protocol.cc); a value over
  // max_value_bytes is neither read nor leased over, only its size returned.
  kLookup,
  // KEYS: record, lease. ARGV: token, channel, message, record args.
  // Returns 1 if stored, 0 if the token no longer holds the lease.
  kFill,
  // KEYS: lease. ARGV: token, channel, message. Returns 1 or 0 (not held).
  kRelease,
  // KEYS: lease. ARGV: token, period (ms). Returns 1 or 0 (not held).
  kExtend,
  // KEYS: record, lease. ARGV: channel, message, record args. Returns 1.
  kPut,
  // KEYS: record, lease. ARGV: channel, message. Returns keys deleted.
  kInvalidate,
  // KEYS: record, lease (of any key). ARGV: channel. Touches nothing: asks
  // Redis's ACL whether this connection's user may run each command the
  // other scripts (and the subscription) run, on those keys and that
  // channel. Returns the names of those it may not, or -1 on a server
  // without `redis.acl_check_cmd` (before 7.0).
  kAclProbe,
};

inline constexpr int kScriptCount = 7;

// The script's Lua source.
const std::string& ScriptSource(Script script);

// A short name for messages ("lookup", "fill", ...).
const char* ScriptName(Script script);

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_SCRIPTS_H_
