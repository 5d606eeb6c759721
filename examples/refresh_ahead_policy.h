// File: examples/refresh_ahead_policy.h
// -----------------------------------------------------------------------------
// `RefreshAhead`, a user-written refresh policy: once a value has lived a fixed
// fraction of its ttl, the next hit starts one background refresh while it is
// served the current value. No randomness: the same traffic gives the same
// refreshes. Used by examples/custom_policy.cpp, tested in
// tests/custom_policy_test.cc and run through the policy contract in
// tests/policy_contract_test.cc.
//
// A policy needs no registration: any type satisfying `paddock::RefreshPolicy`
// can be the third template argument of `paddock::Cache`.

#ifndef PADDOCK_EXAMPLES_REFRESH_AHEAD_POLICY_H_
#define PADDOCK_EXAMPLES_REFRESH_AHEAD_POLICY_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/policy.h"

namespace paddock_examples {

// RefreshAhead
//
// Fresh for `ttl`. From `refresh_at * ttl` on, a hit is served the value and
// starts a background refresh (at most one per key runs). A value not
// refreshed in time expires at `ttl` and the next caller loads it, coalesced,
// as with `paddock::SingleFlight`; no value is served past its ttl.
struct RefreshAhead {
  // The fraction of the ttl after which hits refresh, in (0, 1]; 1 never
  // refreshes ahead.
  double refresh_at = 0.75;

  static constexpr bool kCoalesceLoads = true;

  // Hits before `refresh_at * ttl` take the cache's fast path and never reach
  // `Decide`.
  paddock::Lifetime OnStore(absl::Duration ttl, absl::Duration,
                            paddock::Random&) const {
    return {.expires_after = ttl,
            .quiet_for = ttl * refresh_at,
            .keep_for = ttl,
            .serve_on_error_for = ttl};
  }

  paddock::Decision Decide(const paddock::EntryState& s, absl::Time now,
                           paddock::Random&) const {
    if (now >= s.expires_at) return paddock::Decision::kLoad;
    if (s.refresh_in_flight) return paddock::Decision::kServe;
    const absl::Time refresh_from =
        s.loaded_at + (s.expires_at - s.loaded_at) * refresh_at;
    return now >= refresh_from ? paddock::Decision::kServeAndRefresh
                               : paddock::Decision::kServe;
  }

  absl::Status Validate() const {
    if (!(refresh_at > 0 && refresh_at <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RefreshAhead: refresh_at must be in (0, 1], got ", refresh_at));
    }
    return absl::OkStatus();
  }
};

static_assert(paddock::RefreshPolicy<RefreshAhead>);

}  // namespace paddock_examples

#endif  // PADDOCK_EXAMPLES_REFRESH_AHEAD_POLICY_H_
