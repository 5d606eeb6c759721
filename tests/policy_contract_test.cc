// The policy contract (paddock/testing/policy_contract.h) over the four
// built-in policies and over RefreshAhead, the user-written policy of
// examples/custom_policy.cpp: what a user does to check a policy of their own.
//
// tests/CMakeLists.txt compiles this file once per policy
// (PADDOCK_CONTRACT_POLICY = its index in `Policies`, into
// policy_contract_test_<index>): all of them in one file took 209 s to compile,
// the longest step of the build, alone on one core at its end.

#include "paddock/testing/policy_contract.h"

#include "../examples/refresh_ahead_policy.h"
#include "built_in_policies.h"
#include "gtest/gtest.h"
#include "paddock/policy.h"

namespace paddock::testing {
namespace {

using Policies = BuiltInPolicyListAnd<paddock_examples::RefreshAhead>;

#ifndef PADDOCK_CONTRACT_POLICY
#error "tests/CMakeLists.txt defines PADDOCK_CONTRACT_POLICY(IES)"
#endif
static_assert(kSizeOf<Policies> == PADDOCK_CONTRACT_POLICIES,
              "tests/CMakeLists.txt builds one executable per policy: keep "
              "its count equal to the list's");
using Instantiated =
    ::testing::Types<typename NthOf<PADDOCK_CONTRACT_POLICY, Policies>::type>;

}  // namespace

// The prefix repeats the suite's name because CMake's gtest_discover_tests
// names a typed test after its prefix alone: ctest lists
// `PolicyContract.<Test><Policy>` and `PolicyStress.<Test><Policy>`.
INSTANTIATE_TYPED_TEST_SUITE_P(PolicyContract, PolicyContract, Instantiated);
INSTANTIATE_TYPED_TEST_SUITE_P(PolicyStress, PolicyStress, Instantiated);

}  // namespace paddock::testing
