// File: src/redis/protocol.h
// -----------------------------------------------------------------------------
// What the Redis tier writes and reads, apart from the scripts themselves
// (scripts.h): key and channel names, change messages, the script arguments
// that carry a record, and the parsing of the scripts' replies. Pure
// functions; docs/fleet.md describes the same protocol in prose.

#ifndef PADDOCK_SRC_REDIS_PROTOCOL_H_
#define PADDOCK_SRC_REDIS_PROTOCOL_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/shared_tier.h"

namespace paddock::internal {

// ---- Keys ----------------------------------------------------------------

// The key as it appears between the braces of its Redis keys: '%', '{' and
// '}' escaped as %25, %7B and %7D, and the empty key written "%" (a hash tag
// must not be empty, or Redis Cluster would hash the whole key and put the
// record and the lease in different slots).
std::string EscapeKey(std::string_view key);

// `<prefix>{<escaped key>}:v`: the record, a hash.
std::string RecordKey(std::string_view prefix, std::string_view key);
// `<prefix>{<escaped key>}:l`: the lease, a string holding the token.
std::string LeaseKey(std::string_view prefix, std::string_view key);
// `<prefix>changes`: where writes are announced.
std::string ChangeChannel(std::string_view prefix);

// ---- Change messages -----------------------------------------------------

enum class ChangeKind { kFill, kPut, kInvalidate, kRelease };

struct ChangeMessage {
  ChangeKind kind = ChangeKind::kFill;
  // The writer's subscription id (Put, Invalidate), or 0.
  uint64_t origin = 0;
  std::string key;
};

// "<kind> <origin> <key>": kind is fill, put, invalidate or release, origin
// a decimal number, key the raw encoded key (any bytes, to the end).
std::string EncodeChangeMessage(ChangeKind kind, uint64_t origin,
                                std::string_view key);
// Returns nullopt for anything else.
std::optional<ChangeMessage> ParseChangeMessage(std::string_view payload);

// ---- Durations -----------------------------------------------------------

// Durations travel as whole microseconds in decimal. Anything from
// kForeverMicros up (31.7 years) means forever; negative means zero.
inline constexpr int64_t kForeverMicros = 1'000'000'000'000'000;
std::string DurationToMicros(absl::Duration d);
absl::Duration MicrosToDuration(int64_t micros);
// A PEXPIRE/PX argument: milliseconds rounded up, at least 1.
std::string DurationToMillis(absl::Duration d);

// ---- Records -------------------------------------------------------------

// The script arguments that describe a record (see scripts.cc, `store`):
// version, fresh_us, keep_us, serve_on_error_us, load_us, expire_ms ("" for
// none, "0" to store nothing), kind ("value" or "error"), payload (the value
// or the error message), error_code.
inline constexpr int kRecordArgCount = 9;
std::vector<std::string> RecordArgs(const SharedFill& fill,
                                    std::string_view version);

// The size the tier limits: the value's, or the error message's.
size_t PayloadBytes(const SharedFill& fill);

// ---- Replies -------------------------------------------------------------

// The lookup script's reply, parsed.
struct ParsedLookup {
  SharedLookup lookup;  // lease_token is left empty: the caller knows it.
  // With kHeldElsewhere: the holder's token (for polling, never shown).
  std::string holder;
  // The script found something it could not read at the record key.
  bool bad_record = false;
  // The script found a value larger than the asker's max_value_bytes: its
  // size. It read neither the value nor took the lease; `lookup` says
  // nothing then.
  std::optional<uint64_t> oversized_bytes;
};

// Returns `absl::DataLossError` for a reply of the wrong shape. The reply is
// {lease, lease_remaining_ms, holder, bad}, followed by the record's 9 fields
// when there is one; or {0, 0, "", 2, value_bytes} for a value over
// max_value_bytes.
absl::StatusOr<ParsedLookup> ParseLookupReply(const redisReply& reply);

// An integer reply (the other scripts' 0 or 1); `absl::DataLossError`
// otherwise.
absl::StatusOr<int64_t> ParseIntegerReply(const redisReply& reply);

// A lease key's content for polling: the token, or nullopt when there is no
// lease (nil). `absl::DataLossError` for anything else.
absl::StatusOr<std::optional<std::string>> ParseLeaseReply(
    const redisReply& reply);

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_PROTOCOL_H_
