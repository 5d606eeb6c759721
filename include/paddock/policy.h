// File: paddock/policy.h
// -----------------------------------------------------------------------------
// Refresh policies: what a cache does with a stored value as it ages. The
// `RefreshPolicy` concept is what a policy must provide; `NaiveJitter`,
// `SingleFlight`, `XFetch` and `SoftTtl` are the four built in.
//
// A policy is data plus two pure decisions. It holds no locks, does no I/O and
// keeps no mutable state; the cache carries out what it decides.

#ifndef PADDOCK_POLICY_H_
#define PADDOCK_POLICY_H_

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/random.h"

namespace paddock {

// What the cache knows about a stored value when it asks a policy.
struct EntryState {
  absl::Time loaded_at;            // When the load that produced it completed.
  absl::Time expires_at;           // `loaded_at + Lifetime::expires_after`.
  absl::Duration load_duration;    // Δ: how long that load took.
  bool refresh_in_flight = false;  // A load of this key is running.
};

// What a lookup does with a stored value.
enum class Decision {
  kServe,            // Return the stored value.
  kServeAndRefresh,  // Return it and start a background refresh (at most one
                     // per key runs; the cache drops duplicates).
  kLoad,             // Do not serve it: load (and wait for) a new value.
};

// The schedule of a newly stored value, decided once when it is stored. All
// durations count from the end of its load.
struct Lifetime {
  // Until then the value is fresh; `EntryState::expires_at` marks its end.
  absl::Duration expires_after;
  // Until then a hit returns the value without asking the policy: the hit
  // path's fast window. At most `expires_after`.
  absl::Duration quiet_for;
  // After then the value is never served and its entry is dropped first. At
  // least `expires_after`. Between the two, `Decide` chooses, and a caller
  // whose wait for a load times out receives the value instead of an error.
  absl::Duration keep_for;
  // While younger than this, a failed load's callers receive the value
  // instead of the error (stale-if-error). At most `keep_for`.
  absl::Duration serve_on_error_for;
};

// RefreshPolicy
//
// A type the cache can consult. Requirements:
//  - `P::kCoalesceLoads`: whether concurrent loads of one key share one loader
//    call (true) or each caller loads (false).
//  - `p.OnStore(ttl, load_duration, rng)`: the `Lifetime` of a value that took
//    `load_duration` to load, given `Options::ttl`. Called once per store.
//  - `p.Decide(state, now, rng)`: what a lookup at `now` does with a value in
//    `state`, once `now` is past `quiet_for`. Called on lookups, concurrently:
//    it must be a pure function of its arguments (draws from `rng` aside) and
//    cheap. Draw from `rng` only when the decision needs it.
//  - optionally `p.Validate()` returning `absl::Status`: checked by the cache
//    constructor, which throws `std::invalid_argument` on an error.
//  - optionally `P::kFixedLifetime = true`: `OnStore`'s result depends only on
//    `ttl` and the policy's own settings, and it draws nothing, so the cache
//    calls it once, at construction, instead of on every store (SingleFlight,
//    SoftTtl).
//  - optionally `P::kFixedExpiry = true` (ignored with kFixedLifetime): of
//    `OnStore`'s result only `quiet_for` depends on `load_duration`, the
//    other three depend only on `ttl` and the policy's own settings, and it
//    draws nothing (XFetch). Entries then derive three of their times instead
//    of storing them (32 bytes less each). The cache checks this on every
//    store: a value whose lifetime breaks it keeps all its times, and is
//    served the same.
template <typename P>
concept RefreshPolicy = std::copy_constructible<P> &&
    requires(const P& p, const EntryState& state, absl::Time now,
             absl::Duration d, Random& rng) {
  { P::kCoalesceLoads } -> std::convertible_to<bool>;
  { p.OnStore(d, d, rng) } -> std::same_as<Lifetime>;
  { p.Decide(state, now, rng) } -> std::same_as<Decision>;
};

// NaiveJitter
//
// Plain cache-aside with a randomised TTL, the seeds' baseline: every caller
// that finds the key missing or expired calls the loader itself, and each
// stored TTL is multiplied by a factor drawn uniformly from
// [1 - jitter, 1 + jitter]. Spreads the expiries of many keys; does nothing
// for one hot key.
struct NaiveJitter {
  double jitter = 0.2;

  static constexpr bool kCoalesceLoads = false;

  Lifetime OnStore(absl::Duration ttl, absl::Duration, Random& rng) const {
    const double factor =
        jitter == 0 ? 1.0
                    : 1.0 - jitter + 2.0 * jitter * (rng.UniformOpenClosed());
    const absl::Duration life = ttl * factor;
    return {.expires_after = life,
            .quiet_for = life,
            .keep_for = life,
            .serve_on_error_for = life};
  }
  Decision Decide(const EntryState& s, absl::Time now, Random&) const {
    return now < s.expires_at ? Decision::kServe : Decision::kLoad;
  }
  absl::Status Validate() const {
    if (!(jitter >= 0 && jitter < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "paddock::NaiveJitter: jitter must be in [0, 1), got ", jitter));
    }
    return absl::OkStatus();
  }
};

// SingleFlight
//
// Coalesced loads: per key, one loader call at a time; every other caller
// waits for its result. A value is fresh for `ttl` and then reloaded; an
// expired value is kept for one more `ttl` only as the answer for callers
// whose wait times out.
struct SingleFlight {
  static constexpr bool kCoalesceLoads = true;
  static constexpr bool kFixedLifetime = true;

  Lifetime OnStore(absl::Duration ttl, absl::Duration, Random&) const {
    return {.expires_after = ttl,
            .quiet_for = ttl,
            .keep_for = 2 * ttl,
            .serve_on_error_for = ttl};
  }
  Decision Decide(const EntryState& s, absl::Time now, Random&) const {
    return now < s.expires_at ? Decision::kServe : Decision::kLoad;
  }
};

// XFetch
//
// Probabilistic early refresh (Vattani, Chierichetti, Lowenstein, VLDB 2015)
// on top of SingleFlight. A hit with time left τ = expires_at - now starts a
// background refresh when Δ·β·(−ln U) ≥ τ, U uniform in (0, 1], Δ the
// duration of the value's last load: the chance is e^(−τ/(βΔ)), so refreshes
// start shortly before expiry, earlier for slow loads. The caller that
// triggers one is served the current value at once.
//
// While τ > Δ·β·kCap the chance is below e^(−kCap) < 1e-9 and no number is
// drawn: far from expiry a hit costs what a SingleFlight hit costs.
struct XFetch {
  double beta = 1.0;

  // e^(−21) ≈ 7.6e-10: the trigger chance skipped by the fast window.
  static constexpr double kCap = 21.0;
  static constexpr bool kCoalesceLoads = true;
  // Only the quiet window depends on Δ (see RefreshPolicy).
  static constexpr bool kFixedExpiry = true;

  Lifetime OnStore(absl::Duration ttl, absl::Duration load_duration,
                   Random&) const {
    absl::Duration quiet = ttl - load_duration * (beta * kCap);
    if (quiet < absl::ZeroDuration()) quiet = absl::ZeroDuration();
    return {.expires_after = ttl,
            .quiet_for = quiet,
            .keep_for = 2 * ttl,
            .serve_on_error_for = ttl};
  }
  Decision Decide(const EntryState& s, absl::Time now, Random& rng) const {
    const absl::Duration left = s.expires_at - now;
    if (left <= absl::ZeroDuration()) return Decision::kLoad;
    if (s.refresh_in_flight || s.load_duration <= absl::ZeroDuration()) {
      return Decision::kServe;
    }
    const double scale = absl::ToDoubleSeconds(s.load_duration) * beta;
    const double tau = absl::ToDoubleSeconds(left);
    if (tau > scale * kCap) return Decision::kServe;
    return scale * -std::log(rng.UniformOpenClosed()) >= tau
               ? Decision::kServeAndRefresh
               : Decision::kServe;
  }
  absl::Status Validate() const {
    if (!(beta > 0 && std::isfinite(beta))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "paddock::XFetch: beta must be finite and > 0, got ", beta));
    }
    return absl::OkStatus();
  }
};

// SoftTtl
//
// Stale-while-revalidate (RFC 5861). Fresh for `ttl`; during the next
// `stale_for` the stale value is served at once while one background refresh
// runs; after `ttl + stale_for` a caller loads it (coalesced, blocking).
// When a load or refresh fails while the value is younger than
// `ttl + stale_if_error`, callers get the stale value instead of the error.
// No value is ever served older than `ttl + max(stale_for, stale_if_error)`.
struct SoftTtl {
  absl::Duration stale_for = absl::Seconds(30);
  absl::Duration stale_if_error = absl::ZeroDuration();

  static constexpr bool kCoalesceLoads = true;
  static constexpr bool kFixedLifetime = true;

  Lifetime OnStore(absl::Duration ttl, absl::Duration, Random&) const {
    return {.expires_after = ttl,
            .quiet_for = ttl,
            .keep_for = ttl + std::max(stale_for, stale_if_error),
            .serve_on_error_for = ttl + stale_if_error};
  }
  Decision Decide(const EntryState& s, absl::Time now, Random&) const {
    if (now < s.expires_at) return Decision::kServe;
    if (now < s.expires_at + stale_for) return Decision::kServeAndRefresh;
    return Decision::kLoad;
  }
  absl::Status Validate() const {
    if (stale_for < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("paddock::SoftTtl: stale_for must be >= 0, got ",
                       absl::FormatDuration(stale_for)));
    }
    if (stale_if_error < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("paddock::SoftTtl: stale_if_error must be >= 0, got ",
                       absl::FormatDuration(stale_if_error)));
    }
    return absl::OkStatus();
  }
};

}  // namespace paddock

#endif  // PADDOCK_POLICY_H_
