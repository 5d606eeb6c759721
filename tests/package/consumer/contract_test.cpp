// A consumer's own policy checked by paddock's policy contract, built against
// an installed or vendored paddock (tests/package/run.sh) to prove that the
// installed paddock/testing/policy_contract.h is usable as documented.

#include <paddock/testing/policy_contract.h>

namespace consumer {

// Fresh for ttl; for one more ttl served stale while one background refresh
// runs; then loaded, coalesced.
struct RefreshWhenStale {
  static constexpr bool kCoalesceLoads = true;

  paddock::Lifetime OnStore(absl::Duration ttl, absl::Duration,
                            paddock::Random&) const {
    return {.expires_after = ttl,
            .quiet_for = ttl,
            .keep_for = 2 * ttl,
            .serve_on_error_for = ttl};
  }
  paddock::Decision Decide(const paddock::EntryState& s, absl::Time now,
                           paddock::Random&) const {
    return now < s.expires_at ? paddock::Decision::kServe
                              : paddock::Decision::kServeAndRefresh;
  }
};

}  // namespace consumer

namespace paddock::testing {
INSTANTIATE_TYPED_TEST_SUITE_P(RefreshWhenStale, PolicyContract,
                               ::testing::Types<consumer::RefreshWhenStale>);
}  // namespace paddock::testing
