// File: tests/built_in_policies.h
// -----------------------------------------------------------------------------
// The built-in policies, written once, as GoogleTest type lists: a test that
// holds for every policy is typed over `BuiltInPolicies`, one that holds for
// the coalescing ones over `CoalescingPolicies`, and a suite over pairs (an
// API and a policy, say) over `EveryPair<Pair, TypeList<A...>>`, every A
// with every built-in policy.

#ifndef PADDOCK_TESTS_BUILT_IN_POLICIES_H_
#define PADDOCK_TESTS_BUILT_IN_POLICIES_H_

#include <cstddef>
#include <tuple>

#include "gtest/gtest.h"
#include "paddock/policy.h"

namespace paddock::testing {

template <typename... Ts>
struct TypeList {};

// Every policy paddock ships.
using BuiltInPolicyList = TypeList<NaiveJitter, SingleFlight, XFetch, SoftTtl>;

namespace built_in_internal {

template <typename... Lists>
struct Concat;
template <typename... Ts>
struct Concat<TypeList<Ts...>> {
  using type = TypeList<Ts...>;
};
template <typename... As, typename... Bs, typename... Rest>
struct Concat<TypeList<As...>, TypeList<Bs...>, Rest...>
    : Concat<TypeList<As..., Bs...>, Rest...> {};

template <typename List>
struct ToTypes;
template <typename... Ts>
struct ToTypes<TypeList<Ts...>> {
  using type = ::testing::Types<Ts...>;
};

template <template <typename, typename> class Pair, typename First,
          typename Policies>
struct WithEach;
template <template <typename, typename> class Pair, typename First,
          typename... Ps>
struct WithEach<Pair, First, TypeList<Ps...>> {
  using type = TypeList<Pair<First, Ps>...>;
};

template <template <typename, typename> class Pair, typename Firsts>
struct Cross;
template <template <typename, typename> class Pair, typename... Fs>
struct Cross<Pair, TypeList<Fs...>> {
  using type = typename Concat<
      TypeList<>,
      typename WithEach<Pair, Fs, BuiltInPolicyList>::type...>::type;
};

}  // namespace built_in_internal

using BuiltInPolicies =
    typename built_in_internal::ToTypes<BuiltInPolicyList>::type;

// The built-in policies and `Extra...` (a user's policy, an example's) as a
// TypeList, and one policy of such a list by index: a suite too slow to
// compile in one file is split into one file per policy
// (tests/policy_contract_test.cc).
template <typename... Extra>
using BuiltInPolicyListAnd =
    typename built_in_internal::Concat<BuiltInPolicyList,
                                       TypeList<Extra...>>::type;

template <typename List>
inline constexpr size_t kSizeOf = 0;
template <typename... Ts>
inline constexpr size_t kSizeOf<TypeList<Ts...>> = sizeof...(Ts);

template <size_t I, typename List>
struct NthOf;
template <size_t I, typename... Ts>
struct NthOf<I, TypeList<Ts...>> {
  using type = std::tuple_element_t<I, std::tuple<Ts...>>;
};

// Those that load a key once however many callers want it.
using CoalescingPolicies = ::testing::Types<SingleFlight, XFetch, SoftTtl>;

// `::testing::Types<Pair<F, P>...>` for every F of `Firsts` (a TypeList)
// with every built-in policy P, in that order.
template <template <typename, typename> class Pair, typename Firsts>
using EveryPair = typename built_in_internal::ToTypes<
    typename built_in_internal::Cross<Pair, Firsts>::type>::type;

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_BUILT_IN_POLICIES_H_
