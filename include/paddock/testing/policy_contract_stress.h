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
  const auto run_time = StressRunTime();
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    ManualClock clock;
    ThreadPool refreshes(2);
    std::array<std::atomic<int>, kKeys> running{}, loads{};
    std::atomic<int> overlapping{0}, wrong{0}, went_back{0}, failed{0};
    Cache<int, std::string, TypeParam> cache(
        [&](const int& key) -> absl::StatusOr<std::string> {
          if (running[key].fetch_add(1) != 0) ++overlapping;
          const int generation = ++loads[key];
          std::this_thread::yield();  // Widen the window for a second load.
          running[key].fetch_sub(1);
          return absl::StrCat(key, ":", generation);
        },
        Options{.ttl = kTtl,
                .wait_timeout = absl::Minutes(1),
                .clock = &clock,
                .executor = &refreshes,
                .seed = 1,
                .max_load_age = absl::InfiniteDuration()});
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    for (int t = 0; t < threads; ++t) {
      readers.emplace_back([&, t] {
        StressRng rng(t + 1);
        std::array<int, kKeys> last_seen{};
        while (!stop.load(std::memory_order_relaxed)) {
          const int key = rng.Below(kKeys);
          const absl::StatusOr<std::string> v = this->Get(cache, key);
          if (!v.ok()) {
            ++failed;
            continue;
          }
          const std::string prefix = absl::StrCat(key, ":");
          int generation = 0;
          if (!absl::StartsWith(*v, prefix) ||
              !absl::SimpleAtoi(absl::string_view(*v).substr(prefix.size()),
                                &generation) ||
              generation < 1 || generation > loads[key].load()) {
            ++wrong;
            continue;
          }
          if (generation < last_seen[key]) ++went_back;
          last_seen[key] = generation;
        }
      });
    }
    // Step the clock through expiries while the readers run.
    int steps = 0;
    const auto deadline = std::chrono::steady_clock::now() + run_time;
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      clock.Advance(kTtl);
      ++steps;
    }
    stop = true;
    for (std::thread& t : readers) t.join();
    // A background refresh may still be queued or running: let it finish
    // (no writes here, so every refresh stays registered until it does).
    const auto quiet_by = std::chrono::steady_clock::now() + kQuiesce;
    while (cache.loads_in_flight() != 0 &&
           std::chrono::steady_clock::now() < quiet_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(cache.loads_in_flight(), 0u);

    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(failed, 0);
    int total_loads = 0;
    for (const auto& n : loads) total_loads += n.load();
    EXPECT_EQ(cache.stats().loads, static_cast<uint64_t>(total_loads));
    if constexpr (TypeParam::kCoalesceLoads) {
      EXPECT_EQ(overlapping, 0);
      EXPECT_EQ(went_back, 0);
      for (int key = 0; key < kKeys; ++key) {
        EXPECT_LE(loads[key].load(), steps + 1) << "key " << key;
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
  const auto run_time = StressRunTime();
  for (const int threads : kStressThreadCounts) {
    SCOPED_TRACE(absl::StrCat(threads, " threads"));
    std::atomic<uint64_t> calls{0}, failures{0};
    std::atomic<uint64_t> gets{0};
    std::atomic<int> wrong{0}, unexpected_error{0}, oversize{0}, too_slow{0};
    std::atomic<int64_t> slowest_nanos{0};
    std::optional<Cache<int, std::string, TypeParam>> cache;
    cache.emplace(
        [&](const int& key) -> absl::StatusOr<std::string> {
          const uint64_t call = ++calls;
          switch (StressLoadOf(call)) {
            case StressLoad::kError:
              ++failures;
              return absl::UnavailableError(
                  absl::StrCat("backend down: ", key));
            case StressLoad::kThrowStd:
              ++failures;
              throw std::runtime_error(absl::StrCat("disk on fire: ", key));
            case StressLoad::kThrowOther:
              ++failures;
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
        },
        Options{.ttl = absl::Milliseconds(5),
                .max_entries = kMaxEntries,
                .wait_timeout = wait_timeout,
                .seed = 7,
                .error_ttl = absl::Microseconds(500),
                .max_concurrent_loads = 4,
                .max_load_age = absl::Milliseconds(50)});
    // A value is the loader's for the key ("7#123") or a Put's ("7@put").
    auto valid = [&](int key, const std::string& value) {
      return absl::StartsWith(value, absl::StrCat(key, "#")) ||
             value == absl::StrCat(key, "@put");
    };
    const absl::Duration bound =
        wait_timeout + absl::FromChrono(kAncientLoad) + kMargin;
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        StressRng rng(t + 100);
        while (!stop.load(std::memory_order_relaxed)) {
          const int key = rng.Below(kKeys);
          const int op = rng.Below(100);
          if (op < 80) {
            ++gets;
            const auto start = std::chrono::steady_clock::now();
            const absl::StatusOr<std::string> v = this->Get(*cache, key);
            const auto took = std::chrono::steady_clock::now() - start;
            RaiseTo(slowest_nanos,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(took)
                        .count());
            if (absl::FromChrono(took) > bound) ++too_slow;
            if (v.ok()) {
              if (!valid(key, *v)) ++wrong;
            } else if (v.status().code() != absl::StatusCode::kUnavailable &&
                       v.status().code() != absl::StatusCode::kInternal &&
                       v.status().code() !=
                           absl::StatusCode::kDeadlineExceeded) {
              ++unexpected_error;
              ADD_FAILURE() << v.status();
            }
          } else if (op < 88) {
            const std::optional<std::string> v = cache->GetIfPresent(key);
            if (v.has_value() && !valid(key, *v)) ++wrong;
          } else if (op < 94) {
            cache->Put(key, absl::StrCat(key, "@put"));
          } else if (op < 99) {
            cache->Invalidate(key);
          } else {
            cache->InvalidateAll();
          }
          if (cache->size() > kMaxEntries) ++oversize;
        }
      });
    }
    std::this_thread::sleep_for(run_time);
    stop = true;
    for (std::thread& t : workers) t.join();

    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(unexpected_error, 0);
    EXPECT_EQ(oversize, 0);
    EXPECT_EQ(too_slow, 0) << "slowest Get: "
                           << absl::Nanoseconds(slowest_nanos.load());
    // Background refreshes still queued or running finish (or are dropped by
    // the destructor); after that the counters are final.
    const auto quiet_by = std::chrono::steady_clock::now() + kQuiesce;
    while (cache->loads_in_flight() != 0 &&
           std::chrono::steady_clock::now() < quiet_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(cache->loads_in_flight(), 0u);
    const Stats s = cache->stats();
    cache.reset();
    EXPECT_EQ(s.loads, calls.load());
    EXPECT_EQ(s.load_failures, failures.load());
    const uint64_t answered =
        s.hits + s.stale_hits + s.negative_hits + s.misses;
    EXPECT_LE(answered, gets.load());
    EXPECT_GE(answered + s.stale_fallbacks, gets.load());
    EXPECT_LE(s.coalesced_waits, s.misses);
    EXPECT_LE(s.wait_timeouts, s.coalesced_waits);
    ::testing::Test::RecordProperty(
        absl::StrCat("slowest_get_us_", threads),
        static_cast<int>(slowest_nanos.load() / 1000));
  }
}

REGISTER_TYPED_TEST_SUITE_P(PolicyStress,
                            HotKeysLoadOncePerExpiryAndValuesNeverGoBack,
                            MixedOperationsWithFailingLoadsKeepEveryInvariant);

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_STRESS_H_
