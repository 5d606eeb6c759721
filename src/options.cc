// Options::Validate.

#include "paddock/options.h"

#include "absl/strings/str_cat.h"

namespace paddock {
namespace {

absl::Status Invalid(const char* field, const char* rule,
                     const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock::Options: ", field, " must be ", rule, ", got ", got));
}

}  // namespace

absl::Status Options::Validate() const {
  if (ttl <= absl::ZeroDuration()) {
    return Invalid("ttl", "> 0", absl::FormatDuration(ttl));
  }
  if (max_entries == 0) return Invalid("max_entries", ">= 1", "0");
  static_assert(kMaxShards == 65536, "the message below");
  if (shards < 0 || shards > kMaxShards) {
    return Invalid("shards", "between 0 (one per CPU) and 65536",
                   absl::StrCat(shards));
  }
  if (wait_timeout < absl::ZeroDuration()) {
    return Invalid("wait_timeout", ">= 0", absl::FormatDuration(wait_timeout));
  }
  if (error_ttl < absl::ZeroDuration()) {
    return Invalid("error_ttl", ">= 0", absl::FormatDuration(error_ttl));
  }
  static_assert(kMaxConcurrentLoadsLimit == 65536, "the message below");
  // The cache makes every slot up front (so that taking one never
  // allocates): INT_MAX, meant as "no limit", would be 64 GiB.
  if (max_concurrent_loads < 0 ||
      max_concurrent_loads > kMaxConcurrentLoadsLimit) {
    return Invalid("max_concurrent_loads", "between 0 (no limit) and 65536",
                   absl::StrCat(max_concurrent_loads));
  }
  if (max_load_age <= absl::ZeroDuration()) {
    return Invalid("max_load_age", "> 0", absl::FormatDuration(max_load_age));
  }
  return absl::OkStatus();
}

}  // namespace paddock
