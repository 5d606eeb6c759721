// File: paddock/testing/policy_contract_profile.h
// -----------------------------------------------------------------------------
// What a policy declares (`PolicyProfile`), learnt by asking `P{}`: how long
// a value stays fresh and is kept, and when a hit refreshes it.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_PROFILE_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_PROFILE_H_

#include "paddock/testing/policy_contract_doubles.h"

namespace paddock::testing {

// What a policy declares.

// PolicyProfile
//
// What `P{}` declares about values stored with one ttl, learnt by asking it
// (`OnStore` drawn 1000 times, for policies that randomise it; `Decide` 100
// times per age) rather than by knowing its type. Ages count from the end of
// the value's load.
struct PolicyProfile {
  // The range of `Lifetime::expires_after`.
  absl::Duration shortest_fresh;
  absl::Duration longest_fresh;
  // The range of `Lifetime::keep_for`.
  absl::Duration shortest_kept;
  absl::Duration longest_kept;
  // Whether some hits serve the value and queue a background refresh; if so,
  // an age at which at least half of them do, and the load duration the
  // policy must see for it (0, or 100 ms for policies such as XFetch that
  // refresh early only values that were slow to load).
  bool refreshes = false;
  absl::Duration refresh_age = absl::ZeroDuration();
  absl::Duration refresh_load_duration = absl::ZeroDuration();
};

// A duration as the cache stores it: in whole nanoseconds.
inline absl::Duration AsStored(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return d;
  }
  return absl::Nanoseconds(absl::ToInt64Nanoseconds(d));
}

// RefreshChance()
//
// Returns the share of 100 hits, `age` after a value was stored with `ttl`
// from a load that took `load_duration`, that `policy` serves while it queues
// a background refresh. Follows the cache: past `keep_for` nothing is served,
// and before `quiet_for` the policy is not asked.
template <typename P>
double RefreshChance(const P& policy, absl::Duration ttl,
                     absl::Duration load_duration, absl::Duration age) {
  constexpr int kHits = 100;
  Random rng(1);
  int refreshes = 0;
  for (int i = 0; i < kHits; ++i) {
    const Lifetime life = policy.OnStore(ttl, load_duration, rng);
    if (age >= AsStored(life.keep_for) || age < AsStored(life.quiet_for)) {
      continue;
    }
    const absl::Time loaded_at = absl::UnixEpoch();
    const EntryState state{loaded_at, loaded_at + AsStored(life.expires_after),
                           AsStored(load_duration),
                           /*refresh_in_flight=*/false};
    if (policy.Decide(state, loaded_at + age, rng) ==
        Decision::kServeAndRefresh) {
      ++refreshes;
    }
  }
  return static_cast<double>(refreshes) / kHits;
}

// ProfileOf()
//
// Returns what `P{}` declares for values stored with `ttl`.
template <typename P>
PolicyProfile ProfileOf(absl::Duration ttl) {
  const P policy{};
  PolicyProfile profile{.shortest_fresh = absl::InfiniteDuration(),
                        .longest_fresh = absl::ZeroDuration(),
                        .shortest_kept = absl::InfiniteDuration(),
                        .longest_kept = absl::ZeroDuration()};
  Random rng(1);
  for (int i = 0; i < 1000; ++i) {
    const Lifetime life = policy.OnStore(ttl, absl::ZeroDuration(), rng);
    profile.shortest_fresh =
        std::min(profile.shortest_fresh, AsStored(life.expires_after));
    profile.longest_fresh =
        std::max(profile.longest_fresh, AsStored(life.expires_after));
    profile.shortest_kept =
        std::min(profile.shortest_kept, AsStored(life.keep_for));
    profile.longest_kept =
        std::max(profile.longest_kept, AsStored(life.keep_for));
  }
  // Where to look for a refresh: just before expiry, where early refreshes
  // are likeliest; just after it, where stale-while-revalidate serves; else
  // across what the policy keeps. First with loads that take no time.
  std::vector<absl::Duration> ages = {
      profile.shortest_fresh - absl::Milliseconds(10),
      profile.longest_fresh + absl::Seconds(1)};
  for (int i = 1; i < 100; ++i) ages.push_back(profile.longest_kept * i / 100);
  for (const absl::Duration load_duration :
       {absl::ZeroDuration(), absl::Milliseconds(100)}) {
    for (const absl::Duration age : ages) {
      if (RefreshChance(policy, ttl, load_duration, age) >= 0.5) {
        profile.refreshes = true;
        profile.refresh_age = age;
        profile.refresh_load_duration = load_duration;
        return profile;
      }
    }
  }
  return profile;
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_PROFILE_H_
