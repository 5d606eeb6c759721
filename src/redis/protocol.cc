// Key names, change messages, record arguments and reply parsing.

#include "redis/protocol.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paddock::internal {
namespace {

// The lookup reply: {lease, lease_remaining_ms, holder, bad} followed, when
// there is a record, by {version, age_us, fresh_us, keep_us,
// serve_on_error_us, load_us, value, error_code, error_message}; or, for a
// value over max_value_bytes, {0, 0, "", 2, value_bytes}.
constexpr size_t kLookupHead = 4;
constexpr size_t kLookupWithRecord = kLookupHead + 9;
constexpr size_t kLookupOversized = kLookupHead + 1;
constexpr int64_t kBadOversized = 2;

absl::Status BadReply(std::string_view what) {
  return absl::DataLossError(absl::StrCat(
      "paddock::RedisTier: unexpected reply: ", std::string(what)));
}

std::optional<int64_t> ParseDecimal(std::string_view text) {
  int64_t value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

bool IsString(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_STRING && r->str != nullptr;
}
bool IsNil(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_NIL;
}
std::string_view View(const redisReply* r) { return {r->str, r->len}; }

// An integer element, or a string element holding a decimal integer.
std::optional<int64_t> Integer(const redisReply* r) {
  if (r == nullptr) return std::nullopt;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (IsString(r)) return ParseDecimal(View(r));
  return std::nullopt;
}

std::optional<absl::Duration> Micros(const redisReply* r) {
  const std::optional<int64_t> micros = Integer(r);
  if (!micros.has_value() || *micros < 0) return std::nullopt;
  return MicrosToDuration(*micros);
}

// The lookup reply's lease fields, checked already: `lease` is 0, 1 or 2,
// `holder` a string.
void SetLease(int64_t lease, int64_t remaining_ms, const redisReply* holder,
              ParsedLookup* parsed) {
  switch (lease) {
    case 0:
      parsed->lookup.lease = SharedLookup::Lease::kNotNeeded;
      break;
    case 1:
      parsed->lookup.lease = SharedLookup::Lease::kGranted;
      break;
    default:
      parsed->lookup.lease = SharedLookup::Lease::kHeldElsewhere;
      parsed->lookup.lease_remaining =
          absl::Milliseconds(remaining_ms < 0 ? 0 : remaining_ms);
      parsed->holder = std::string(View(holder));
      break;
  }
}

// The record fields of the lookup reply's elements `e`, e[4] to e[12].
absl::StatusOr<SharedRecord> ParseRecord(redisReply* const* e) {
  SharedRecord record;
  const std::optional<absl::Duration> age = Micros(e[5]);
  const std::optional<absl::Duration> fresh_for = Micros(e[6]);
  const std::optional<absl::Duration> keep_for = Micros(e[7]);
  const std::optional<absl::Duration> serve_on_error_for = Micros(e[8]);
  const std::optional<absl::Duration> load_duration = Micros(e[9]);
  if (!IsString(e[4]) || !age || !fresh_for || !keep_for ||
      !serve_on_error_for || !load_duration) {
    return BadReply("lookup: bad record fields");
  }
  record.version = std::string(View(e[4]));
  record.age = *age;
  record.fresh_for = *fresh_for;
  record.keep_for = *keep_for;
  record.serve_on_error_for = *serve_on_error_for;
  record.load_duration = *load_duration;
  if (IsString(e[10]) && IsNil(e[11]) && IsNil(e[12])) {
    record.value = std::string(View(e[10]));
  } else if (IsNil(e[10]) && IsString(e[12])) {
    const std::optional<int64_t> code = Integer(e[11]);
    if (!code.has_value() || *code < 1 || *code > 16) {
      return BadReply("lookup: bad error code");
    }
    const std::string_view message = View(e[12]);
    record.value =
        absl::Status(static_cast<absl::StatusCode>(*code),
                     absl::string_view(message.data(), message.size()));
  } else {
    return BadReply("lookup: neither a value nor an error");
  }
  return record;
}

}  // namespace

std::string EscapeKey(std::string_view key) {
  if (key.empty()) return "%";
  std::string escaped;
  escaped.reserve(key.size());
  for (char c : key) {
    switch (c) {
      case '%':
        escaped += "%25";
        break;
      case '{':
        escaped += "%7B";
        break;
      case '}':
        escaped += "%7D";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string RecordKey(std::string_view prefix, std::string_view key) {
  return absl::StrCat(std::string(prefix), "{", EscapeKey(key), "}:v");
}

std::string LeaseKey(std::string_view prefix, std::string_view key) {
  return absl::StrCat(std::string(prefix), "{", EscapeKey(key), "}:l");
}

std::string ChangeChannel(std::string_view prefix) {
  return absl::StrCat(std::string(prefix), "changes");
}

std::string EncodeChangeMessage(ChangeKind kind, uint64_t origin,
                                std::string_view key) {
  const char* name = "fill";
  switch (kind) {
    case ChangeKind::kFill:
      name = "fill";
      break;
    case ChangeKind::kPut:
      name = "put";
      break;
    case ChangeKind::kInvalidate:
      name = "invalidate";
      break;
    case ChangeKind::kRelease:
      name = "release";
      break;
  }
  return absl::StrCat(name, " ", origin, " ", std::string(key));
}

std::optional<ChangeMessage> ParseChangeMessage(std::string_view payload) {
  const size_t first = payload.find(' ');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = payload.find(' ', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const std::string_view name = payload.substr(0, first);
  const std::string_view origin = payload.substr(first + 1, second - first - 1);

  ChangeMessage message;
  if (name == "fill") {
    message.kind = ChangeKind::kFill;
  } else if (name == "put") {
    message.kind = ChangeKind::kPut;
  } else if (name == "invalidate") {
    message.kind = ChangeKind::kInvalidate;
  } else if (name == "release") {
    message.kind = ChangeKind::kRelease;
  } else {
    return std::nullopt;
  }
  const char* const end = origin.data() + origin.size();
  const auto [ptr, ec] = std::from_chars(origin.data(), end, message.origin);
  if (origin.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  message.key = std::string(payload.substr(second + 1));
  return message;
}

std::string DurationToMicros(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return "0";
  if (d >= absl::Microseconds(kForeverMicros)) {
    return absl::StrCat(kForeverMicros);
  }
  return absl::StrCat(absl::ToInt64Microseconds(d));
}

absl::Duration MicrosToDuration(int64_t micros) {
  if (micros <= 0) return absl::ZeroDuration();
  if (micros >= kForeverMicros) return absl::InfiniteDuration();
  return absl::Microseconds(micros);
}

std::string DurationToMillis(absl::Duration d) {
  const int64_t millis =
      absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  return absl::StrCat(millis < 1 ? 1 : millis);
}

std::vector<std::string> RecordArgs(const SharedFill& fill,
                                    std::string_view version) {
  std::string expire_ms;  // Empty: no expiry.
  if (fill.keep_for <= absl::ZeroDuration()) {
    expire_ms = "0";  // Store nothing.
  } else if (fill.keep_for < absl::Microseconds(kForeverMicros)) {
    expire_ms = DurationToMillis(fill.keep_for);
  }
  std::vector<std::string> args;
  args.reserve(kRecordArgCount);
  args.emplace_back(version);
  args.push_back(DurationToMicros(fill.fresh_for));
  args.push_back(DurationToMicros(fill.keep_for));
  args.push_back(DurationToMicros(fill.serve_on_error_for));
  args.push_back(DurationToMicros(fill.load_duration));
  args.push_back(std::move(expire_ms));
  if (fill.value.ok()) {
    args.emplace_back("value");
    args.push_back(*fill.value);
    args.emplace_back("");
  } else {
    args.emplace_back("error");
    const absl::string_view message = fill.value.status().message();
    args.emplace_back(message.data(), message.size());
    args.push_back(absl::StrCat(static_cast<int>(fill.value.status().code())));
  }
  return args;
}

size_t PayloadBytes(const SharedFill& fill) {
  return fill.value.ok() ? fill.value->size()
                         : fill.value.status().message().size();
}

absl::StatusOr<ParsedLookup> ParseLookupReply(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY ||
      (reply.elements != kLookupHead && reply.elements != kLookupWithRecord &&
       reply.elements != kLookupOversized)) {
    return BadReply("lookup: not an array of 4, 5 or 13 elements");
  }
  redisReply* const* e = reply.element;
  const std::optional<int64_t> lease = Integer(e[0]);
  const std::optional<int64_t> remaining_ms = Integer(e[1]);
  const std::optional<int64_t> bad = Integer(e[3]);
  if (!lease.has_value() || *lease < 0 || *lease > 2 ||
      !remaining_ms.has_value() || !IsString(e[2]) || !bad.has_value()) {
    return BadReply("lookup: bad lease fields");
  }

  ParsedLookup parsed;
  if (reply.elements == kLookupOversized) {
    const std::optional<int64_t> bytes = Integer(e[4]);
    if (*lease != 0 || *bad != kBadOversized || !bytes.has_value() ||
        *bytes < 0) {
      return BadReply("lookup: bad oversized record");
    }
    parsed.oversized_bytes = static_cast<uint64_t>(*bytes);
    return parsed;
  }
  parsed.bad_record = *bad != 0;
  SetLease(*lease, *remaining_ms, e[2], &parsed);
  if (reply.elements == kLookupHead) {
    if (parsed.lookup.lease == SharedLookup::Lease::kNotNeeded) {
      return BadReply("lookup: no lease needed but no record");
    }
    return parsed;
  }
  absl::StatusOr<SharedRecord> record = ParseRecord(e);
  if (!record.ok()) return record.status();
  parsed.lookup.record = *std::move(record);
  return parsed;
}

absl::StatusOr<int64_t> ParseIntegerReply(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_INTEGER) return BadReply("not an integer");
  return reply.integer;
}

absl::StatusOr<std::optional<std::string>> ParseLeaseReply(
    const redisReply& reply) {
  if (reply.type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if (IsString(&reply)) {
    return std::optional<std::string>(std::string(View(&reply)));
  }
  return BadReply("lease: not a string or nil");
}

}  // namespace paddock::internal
