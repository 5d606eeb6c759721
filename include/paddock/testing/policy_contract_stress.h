// File: paddock/testing/policy_contract_stress.h
// -----------------------------------------------------------------------------
// PolicyStress: real threads, 2 to 16 of them, for a bounded time, with
// invariants checked on every call (optional to instantiate).
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_STRESS_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_STRESS_H_

#include "paddock/testing/policy_contract_fixture.h"

namespace paddock::testing {

// Stress: real threads, 2 to 16 of them, for a bounded time, with invariants
// checked on every call rather than a result checked at the end:
//  - at most one load per key per expiry, and never two loads of one key at
//    once, for the coalescing policies;
//  - every value returned was produced by the loader (or a Put) for that key;
//  - size() <= max_entries;
//  - every Get returns within wait_timeout plus the longest load plus a
//    margin;
//  - the stats agree with what the loader and the callers saw.

inline constexpr int kStressThreadCounts[] = {2, 4, 8, 16};

// How long the end of a stress run may take to quiesce before the test fails.
inline constexpr std::chrono::seconds kQuiesce{30};

// How long each stress run lasts: PADDOCK_STRESS_MS, default 500 ms.
inline std::chrono::milliseconds StressRunTime() {
  if (const char* ms = std::getenv("PADDOCK_STRESS_MS")) {
    int value = 0;
    if (absl::SimpleAtoi(ms, &value) && value > 0) {
      return std::chrono::milliseconds(value);
    }
  }
  return std::chrono::milliseconds(500);
}

// A small fast PRNG per thread (xorshift64*).
class StressRng {
 public:
  explicit StressRng(uint64_t seed)
      : state_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dULL;
  }
  int Below(int n) {
    return static_cast<int>(Next() % static_cast<uint64_t>(n));
  }

 private:
  uint64_t state_;
};

// Keeps the largest value seen.
inline void RaiseTo(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value)) {
  }
}

// What a stressed loader does on one call, decided by the call number.
enum class StressLoad {
  kValue,
  kSlowValue,     // 2 ms: waiters wait for it.
  kLateValue,     // 30 ms: longer than wait_timeout.
  kAncientValue,  // 80 ms: older than max_load_age before it returns.
  kError,
  kThrowStd,
  kThrowOther,
};

inline constexpr auto kSlowLoad = std::chrono::milliseconds(2);
inline constexpr auto kLateLoad = std::chrono::milliseconds(30);
inline constexpr auto kAncientLoad = std::chrono::milliseconds(80);

inline StressLoad StressLoadOf(uint64_t call) {
  const uint64_t roll = (call * 0x9e3779b97f4a7c15ULL) >> 54;  // 0..1023
  if (roll < 80) return StressLoad::kError;
  if (roll < 120) return StressLoad::kThrowStd;
  if (roll < 140) return StressLoad::kThrowOther;
  if (roll < 240) return StressLoad::kSlowValue;
  if (roll < 260) return StressLoad::kLateValue;
  if (roll < 265) return StressLoad::kAncientValue;
  return StressLoad::kValue;
}

// Waits up to `kQuiesce` for the refreshes still queued or running on
// `cache` to finish; true if none is left.
template <typename C>
bool QuiesceLoads(const C& cache) {
  const auto quiet_by = std::chrono::steady_clock::now() + kQuiesce;
  while (cache.loads_in_flight() != 0 &&
         std::chrono::steady_clock::now() < quiet_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cache.loads_in_flight() == 0;
}

// Runs `work(t)` on `threads` threads for `run_time` (or, given `clock`,
// while advancing it by `step` every 2 ms); returns the steps taken.
template <typename Work>
int RunThreads(int threads, std::chrono::milliseconds run_time, Work work,
               ManualClock* clock = nullptr,
               absl::Duration step = absl::ZeroDuration()) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] { work(t, stop); });
  }
  int steps = 0;
  if (clock == nullptr) {
    std::this_thread::sleep_for(run_time);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + run_time;
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      clock->Advance(step);
      ++steps;
    }
  }
  stop = true;
  for (std::thread& t : workers) t.join();
  return steps;
}

// The hot-key test's loader: "key:generation", counting loads per key and
// loads of one key that overlapped.
template <int kKeys>
struct HotKeyBackend {
  absl::StatusOr<std::string> Load(int key) {
    if (running[key].fetch_add(1) != 0) ++overlapping;
    const int generation = ++loads[key];
    std::this_thread::yield();  // Widen the window for a second load.
    running[key].fetch_sub(1);
    return absl::StrCat(key, ":", generation);
  }

  std::array<std::atomic<int>, kKeys> running{}, loads{};
  std::atomic<int> overlapping{0};
};

// What the hot-key readers saw that they should not have.
struct HotKeyTally {
  std::atomic<int> wrong{0}, went_back{0}, failed{0};
};

// One hot-key reader: random keys until `stop`. Each value must be
// "key:generation" with 1 <= generation <= the key's loads so far, and no
// older than the last this thread saw of that key.
template <int kKeys, typename Get>
void ReadHotKeys(Get get, const HotKeyBackend<kKeys>& backend, uint64_t seed,
                 const std::atomic<bool>& stop, HotKeyTally& tally) {
  StressRng rng(seed);
  std::array<int, kKeys> last_seen{};
  while (!stop.load(std::memory_order_relaxed)) {
    const int key = rng.Below(kKeys);
    const absl::StatusOr<std::string> v = get(key);
    if (!v.ok()) {
      ++tally.failed;
      continue;
    }
    const std::string prefix = absl::StrCat(key, ":");
    int generation = 0;
    if (!absl::StartsWith(*v, prefix) ||
        !absl::SimpleAtoi(absl::string_view(*v).substr(prefix.size()),
                          &generation) ||
        generation < 1 || generation > backend.loads[key].load()) {
      ++tally.wrong;
      continue;
    }
    if (generation < last_seen[key]) ++tally.went_back;
    last_seen[key] = generation;
  }
}

// What the mixed-operations test counts.
struct MixedTally {
  std::atomic<uint64_t> calls{0}, failures{0}, gets{0};
  std::atomic<int> wrong{0}, unexpected_error{0}, oversize{0}, too_slow{0};
  std::atomic<int64_t> slowest_nanos{0};
};

// The mixed-operations test's loader: by call number a value, a slow, late
// or ancient one, an error, or a throw.
inline absl::StatusOr<std::string> MixedLoad(int key, MixedTally& tally) {
  const uint64_t call = ++tally.calls;
  switch (StressLoadOf(call)) {
    case StressLoad::kError:
      ++tally.failures;
      return absl::UnavailableError(absl::StrCat("backend down: ", key));
    case StressLoad::kThrowStd:
      ++tally.failures;
      throw std::runtime_error(absl::StrCat("disk on fire: ", key));
    case StressLoad::kThrowOther:
      ++tally.failures;
      throw call;
    case StressLoad::kSlowValue:
      std::this_thread::sleep_for(kSlowLoad);
      break;
    case StressLoad::kLateValue:
      std::this_thread::sleep_for(kLateLoad);
      break;
    case StressLoad::kAncientValue:
      std::this_thread::sleep_for(kAncientLoad);
      break;
    case StressLoad::kValue:
      break;
  }
  return absl::StrCat(key, "#", call);
}

// A value is the loader's for the key ("7#123") or a Put's ("7@put").
inline bool IsMixedValue(int key, const std::string& value) {
  return absl::StartsWith(value, absl::StrCat(key, "#")) ||
         value == absl::StrCat(key, "@put");
}

// One timed lookup of the mixed test: a valid value or an expected error,
// within `bound`.
template <typename Get>
void MixedGet(Get get, int key, absl::Duration bound, MixedTally& tally) {
  ++tally.gets;
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<std::string> v = get(key);
  const auto took = std::chrono::steady_clock::now() - start;
  RaiseTo(tally.slowest_nanos,
          std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
  if (absl::FromChrono(took) > bound) ++tally.too_slow;
  if (v.ok()) {
    if (!IsMixedValue(key, *v)) ++tally.wrong;
  } else if (v.status().code() != absl::StatusCode::kUnavailable &&
             v.status().code() != absl::StatusCode::kInternal &&
             v.status().code() != absl::StatusCode::kDeadlineExceeded) {
    ++tally.unexpected_error;
    ADD_FAILURE() << v.status();
  }
}

// One mixed-operations worker: 80 % lookups, then GetIfPresent, Put,
// Invalidate and InvalidateAll, checking size() after each.
template <typename C, typename Get>
void RunMixedOperations(C& cache, Get get, int keys, size_t max_entries,
                        absl::Duration bound, uint64_t seed,
                        const std::atomic<bool>& stop, MixedTally& tally) {
  StressRng rng(seed);
  while (!stop.load(std::memory_order_relaxed)) {
    const int key = rng.Below(keys);
    const int op = rng.Below(100);
    if (op < 80) {
      MixedGet(get, key, bound, tally);
    } else if (op < 88) {
      const std::optional<std::string> v = cache.GetIfPresent(key);
      if (v.has_value() && !IsMixedValue(key, *v)) ++tally.wrong;
    } else if (op < 94) {
      cache.Put(key, absl::StrCat(key, "@put"));
    } else if (op < 99) {
      cache.Invalidate(key);
    } else {
      cache.InvalidateAll();
    }
    if (cache.size() > max_entries) ++tally.oversize;
  }
}

// The stats of a finished mixed run agree with what the loader and the
// callers counted.
inline void ExpectStatsAgree(const Stats& s, const MixedTally& tally) {
  EXPECT_EQ(s.loads, tally.calls.load());
  EXPECT_EQ(s.load_failures, tally.failures.load());
  const uint64_t answered = s.hits + s.stale_hits + s.negative_hits + s.misses;
  EXPECT_LE(answered, tally.gets.load());
  EXPECT_GE(answered + s.stale_fallbacks, tally.gets.load());
  EXPECT_LE(s.coalesced_waits, s.misses);
  EXPECT_LE(s.wait_timeouts, s.coalesced_waits);
}

// PolicyStress
//
// The fixture of the stress suite: each test builds its own caches.
template <typename P>
class PolicyStress : public PolicyContractTest {
  static_assert(RefreshPolicy<P>, "PolicyStress needs a RefreshPolicy");
};

TYPED_TEST_SUITE_P(PolicyStress);

// Optional: instantiating only PolicyContract is not an error.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PolicyStress);

// Readers hammer a few hot keys while the ManualClock steps through expiries.
// With coalescing there is never more than one load of a key at a time, and
// no more than one per expiry; for every policy every value is the loader's
// for that key, and a thread never sees a key's value go back in time.
TYPED_TEST_P(PolicyStress, HotKeysLoadOncePerExpiryAndValuesNeverGoBack) {
  constexpr int kKeys = 16;
  constexpr absl::Duration kTtl = absl::Seconds(10);
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    ManualClock clock;
    ThreadPool refreshes(2);
    HotKeyBackend<kKeys> backend;
    HotKeyTally tally;
    Cache<int, std::string, TypeParam> cache(
        [&](const int& key) { return backend.Load(key); },
        Options{.ttl = kTtl,
                .wait_timeout = absl::Minutes(1),
                .clock = &clock,
                .executor = &refreshes,
                .seed = 1,
                .max_load_age = absl::InfiniteDuration()});
    const auto get = [&](int key) { return this->Get(cache, key); };
    const int steps = RunThreads(
        threads, StressRunTime(),
        [&](int t, const std::atomic<bool>& stop) {
          ReadHotKeys(get, backend, t + 1, stop, tally);
        },
        &clock, kTtl);
    // No writes here, so every refresh stays registered until it ends.
    ASSERT_TRUE(QuiesceLoads(cache));

    EXPECT_EQ(tally.wrong, 0);
    EXPECT_EQ(tally.failed, 0);
    int total_loads = 0;
    for (const auto& n : backend.loads) total_loads += n.load();
    EXPECT_EQ(cache.stats().loads, static_cast<uint64_t>(total_loads));
    if constexpr (TypeParam::kCoalesceLoads) {
      EXPECT_EQ(backend.overlapping, 0);
      EXPECT_EQ(tally.went_back, 0);
      for (int key = 0; key < kKeys; ++key) {
        EXPECT_LE(backend.loads[key].load(), steps + 1) << "key " << key;
      }
    }
  }
}

// Real time and every operation at once: short ttl, small capacity, failing
// and slow loads, Put, Invalidate, InvalidateAll, a load limit and a short
// max_load_age.
TYPED_TEST_P(PolicyStress, MixedOperationsWithFailingLoadsKeepEveryInvariant) {
  constexpr int kKeys = 64;
  constexpr size_t kMaxEntries = 32;
  const absl::Duration wait_timeout = absl::Milliseconds(20);
  const absl::Duration bound =
      wait_timeout + absl::FromChrono(kAncientLoad) + kMargin;
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    MixedTally tally;
    std::optional<Cache<int, std::string, TypeParam>> cache;
    cache.emplace([&](const int& key) { return MixedLoad(key, tally); },
                  Options{.ttl = absl::Milliseconds(5),
                          .max_entries = kMaxEntries,
                          .wait_timeout = wait_timeout,
                          .seed = 7,
                          .error_ttl = absl::Microseconds(500),
                          .max_concurrent_loads = 4,
                          .max_load_age = absl::Milliseconds(50)});
    const auto get = [&](int key) { return this->Get(*cache, key); };
    RunThreads(threads, StressRunTime(),
               [&](int t, const std::atomic<bool>& stop) {
                 RunMixedOperations(*cache, get, kKeys, kMaxEntries, bound,
                                    t + 100, stop, tally);
               });

    EXPECT_EQ(tally.wrong, 0);
    EXPECT_EQ(tally.unexpected_error, 0);
    EXPECT_EQ(tally.oversize, 0);
    EXPECT_EQ(tally.too_slow, 0)
        << "slowest Get: " << absl::Nanoseconds(tally.slowest_nanos.load());
    // Background refreshes still queued or running finish (or are dropped by
    // the destructor); after that the counters are final.
    EXPECT_TRUE(QuiesceLoads(*cache));
    const Stats s = cache->stats();
    cache.reset();
    ExpectStatsAgree(s, tally);
    ::testing::Test::RecordProperty(
        absl::StrCat("slowest_get_us_", threads),
        static_cast<int>(tally.slowest_nanos.load() / 1000));
  }
}

REGISTER_TYPED_TEST_SUITE_P(PolicyStress,
                            HotKeysLoadOncePerExpiryAndValuesNeverGoBack,
                            MixedOperationsWithFailingLoadsKeepEveryInvariant);

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_STRESS_H_
