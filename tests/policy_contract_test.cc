// The policy contract (paddock/testing/policy_contract.h) over the four
// built-in policies and over RefreshAhead, the user-written policy of
// examples/custom_policy.cpp: what a user does to check a policy of their own.

#include "paddock/testing/policy_contract.h"

#include "../examples/refresh_ahead_policy.h"
#include "built_in_policies.h"
#include "gtest/gtest.h"
#include "paddock/policy.h"

namespace paddock::testing {
namespace {

using Policies = BuiltInPoliciesAnd<paddock_examples::RefreshAhead>;

}  // namespace

// The prefix repeats the suite's name because CMake's gtest_discover_tests
// names a typed test after its prefix alone: ctest lists
// `PolicyContract.<Test><Policy>` and `PolicyStress.<Test><Policy>`.
INSTANTIATE_TYPED_TEST_SUITE_P(PolicyContract, PolicyContract, Policies);
INSTANTIATE_TYPED_TEST_SUITE_P(PolicyStress, PolicyStress, Policies);

}  // namespace paddock::testing
