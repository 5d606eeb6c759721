// File: paddock/testing/policy_contract.h
// -----------------------------------------------------------------------------
// The behaviour every refresh policy must give a `paddock::Cache`, written once
// as GoogleTest type-parameterised suites, so that a policy of your own is
// checked by the same tests as the four built in (as abseil's
// `unordered_map_lookup_test.h` is instantiated for every map):
//
//   // my_policy_test.cc, linked with GTest::gtest_main and GTest::gmock.
//   #include "paddock/testing/policy_contract.h"
//   #include "my_policy.h"
//
//   namespace paddock::testing {
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyPolicy, PolicyContract,
//                                  ::testing::Types<my::MyPolicy>);
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyPolicy, PolicyStress,
//                                  ::testing::Types<my::MyPolicy>);
//   }  // namespace paddock::testing
//
// Instantiate inside `paddock::testing`, where the suites are declared, and
// spell GoogleTest's namespace `::testing` there.
//
//  - `PolicyContract`: hits, loads, writes, loader faults, slow and hung
//    loads, recursive loads, destruction with work pending, options at their
//    edges. Time moves only when a test says so (`ManualClock`), background
//    refreshes run only when a test says so (`ManualExecutor`); real threads
//    only where a caller must block. Must be instantiated.
//  - `PolicyStress`: 2 to 16 real threads for `PADDOCK_STRESS_MS` milliseconds
//    per thread count (default 500), checking invariants on every call.
//    Optional.
//
// Needs GoogleTest and GoogleMock (link them yourself: paddock does not), and a
// policy `P` that satisfies `paddock::RefreshPolicy` and is
// default-constructible: the suites test `P{}`. To check a configured policy,
// give the configuration a type:
//
//   struct ShortStale : paddock::SoftTtl {
//     ShortStale() : SoftTtl{.stale_for = absl::Seconds(5)} {}
//   };
//
// The suites do not know the policy's type. Where behaviour depends on it they
// branch on `P::kCoalesceLoads` and on what `P{}` declares (`PolicyProfile`):
// how long a value stays fresh and is kept, and whether and when a hit serves
// it while refreshing it in the background. The cache under test runs with
// `Options::ttl` = 10 s unless a test says otherwise.
//
// Every lookup goes through the fixtures' `Get` (see `PolicyContractTest`),
// the one place to change when the contract is run over another lookup API.
//
// The suites are written in one header per concern, as abseil writes
// `unordered_map_lookup_test.h`, `unordered_map_modifiers_test.h` and so on:
// policy_contract_doubles.h, _profile.h and _fixture.h hold what the tests
// share; _lookups.h, _faults.h, _slow_loads.h, _recursion.h, _races.h,
// _shutdown.h, _edges.h and _keys.h the `PolicyContract` tests; _stress.h
// `PolicyStress`. This header includes them all and registers
// `PolicyContract`: include it, not them.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_H_

#include "gtest/gtest.h"
#include "paddock/testing/policy_contract_edges.h"
#include "paddock/testing/policy_contract_faults.h"
#include "paddock/testing/policy_contract_keys.h"
#include "paddock/testing/policy_contract_lookups.h"
#include "paddock/testing/policy_contract_races.h"
#include "paddock/testing/policy_contract_recursion.h"
#include "paddock/testing/policy_contract_shutdown.h"
#include "paddock/testing/policy_contract_slow_loads.h"
#include "paddock/testing/policy_contract_stress.h"

namespace paddock::testing {

REGISTER_TYPED_TEST_SUITE_P(
    PolicyContract, FreshValueIsServedWithoutCallingTheLoader,
    ExpiredValueIsLoadedAgain, LifetimeStartsWhenTheLoadCompletes,
    PutValueIsServedWithoutLoading, InvalidateMakesTheNextGetLoad,
    SizeNeverExceedsMaxEntries, OneThousandConcurrentCallersOfAColdKey,
    LoaderErrorReachesTheCallerAndNothingIsStored,
    LoaderErrorIsRememberedForErrorTtlThenLoadedAgain,
    LoaderThrowingAStdExceptionBecomesInternalWithWhat,
    LoaderThrowingSomethingElseBecomesInternal,
    LoaderFailureReachesEveryWaiterOfThatLoad,
    FailedRefreshKeepsServingTheValueAndRetries,
    FailedRefreshWithErrorTtlKeepsServingTheValue,
    FlappingLoaderServesEachGoodValueAndCachesNoError,
    RecoversAtOnceAfterALongFailureStreak,
    LongFailureStreakWithErrorTtlLoadsOncePerErrorTtl,
    SlowLoadTimesOutItsWaitersAndStillStores,
    SlowLoadOfAnExpiredValueServesItStaleMeanwhile,
    HungLoadStopsBlockingItsKeyAfterMaxLoadAge,
    HungRefreshStopsBlockingItsKeyAfterMaxLoadAge,
    HungLoadHoldingTheOnlyLoadSlotDoesNotWedgeTheCache,
    RecursiveGetOnTheLoadersThreadFailsForItsOwnKey,
    RecursiveGetFromARefreshGetsTheStoredValue,
    RecursiveGetThroughAnotherThreadIsBoundedByWaitTimeout,
    WriteDuringAForegroundLoadWinsOverItsResult,
    WriteWhileARefreshIsQueuedWinsOverItsResult,
    WriteWhileARefreshRunsWinsOverItsResult,
    DestroyingTheCacheDropsRefreshesQueuedOnAnExecutor,
    DestroyingTheCacheDropsRefreshesQueuedOnAThreadPool,
    DestroyingTheCacheWaitsForARunningRefresh,
    DroppedRefreshEndsItsLoadWithCancelled,
    CallerNeedingAValueRunsTheRefreshQueuedForIt,
    MaxEntriesOfOneHoldsOnlyTheLatestEntry,
    TtlOfOneNanosecondReloadsAfterEveryTick, InfiniteTtlNeverExpires,
    WaitTimeoutZeroAnswersAtOnceWhileALoadRuns,
    WaitTimeoutZeroWithoutAFreeLoadSlotAnswersAtOnce,
    HugeWaitTimeoutWaitsForTheLoad, HugeKeysAreStoredFoundAndDetectedIntact,
    ExpensiveHashIsComputedOnceOnAHit, CollidingHashesKeepKeysApart);

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_H_
