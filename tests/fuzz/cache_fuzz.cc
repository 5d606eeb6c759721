// libFuzzer target: a Cache<std::string, std::string, PADDOCK_FUZZ_POLICY>
// driven by one thread with a ManualClock and a ManualExecutor, every step
// checked against the reference model in model.h.
//
// Input: 8 bytes of configuration, then operations of two bytes each (an
// opcode and an argument); missing bytes read as 0.
//
//   config[0]  ttl                  10 s, 10 s, 1 ms, 1 ns
//   config[1]  max_entries          1, 2, 3, 1000
//   config[2]  error_ttl            0, ttl/4, 2·ttl, 0
//   config[3]  max_concurrent_loads 0, 1, 2, 0
//   config[4]  max_load_age         infinite, 3·ttl, ttl/2, 30 s
//   config[5]  policy parameter     jitter / beta / stale_for (4 choices)
//   config[6]  policy parameter     SoftTtl's stale_if_error (4 choices)
//   config[7]  seed
//
//   op % 12   0-2 Get, 3 GetIfPresent, 4 Put, 5 Invalidate, 6 InvalidateAll,
//             7 advance the clock, 8 run one queued refresh, 9 run all,
//             10 set what the loader does (value, error, throw a
//             std::exception, throw something else), 11 set how long a load
//             takes on the clock, or (argument >= 192) drop every queued
//             refresh by destroying the executor's queue.
//
// The key is argument % 4. A failure prints the operations so far and the
// model's state, then aborts (libFuzzer saves the input). With
// PADDOCK_FUZZ_TRACE set, every input prints its trace.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "model.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

#ifndef PADDOCK_FUZZ_POLICY
#error "define PADDOCK_FUZZ_POLICY (NaiveJitter, SingleFlight, XFetch, SoftTtl)"
#endif

namespace paddock::fuzz {
namespace {

using Policy = ::paddock::PADDOCK_FUZZ_POLICY;
using StringCache = Cache<std::string, std::string, Policy>;

constexpr int kKeys = 4;
constexpr size_t kMaxOps = 4096;

// A ManualExecutor whose queue can be thrown away: destroying it destroys the
// queued tasks unrun, as an executor that shuts down does.
class DroppingExecutor final : public Executor {
 public:
  void Schedule(Task task) override { queue_->Schedule(std::move(task)); }
  bool RunOne() { return queue_->RunOne(); }
  size_t RunAll() { return queue_->RunAll(); }
  size_t pending() const { return queue_->pending(); }
  size_t DropAll() {
    const size_t dropped = queue_->pending();
    queue_ = std::make_unique<ManualExecutor>();
    return dropped;
  }

 private:
  std::unique_ptr<ManualExecutor> queue_ = std::make_unique<ManualExecutor>();
};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <typename T, size_t N>
T Pick(const T (&choices)[N], uint8_t byte) {
  return choices[byte % N];
}

template <typename P>
P MakePolicy(uint8_t a, uint8_t b, absl::Duration ttl) {
  if constexpr (std::is_same_v<P, NaiveJitter>) {
    (void)b, (void)ttl;
    const double jitters[] = {0.0, 0.2, 0.5, 0.9};
    return NaiveJitter{.jitter = Pick(jitters, a)};
  } else if constexpr (std::is_same_v<P, XFetch>) {
    (void)b, (void)ttl;
    const double betas[] = {1.0, 0.5, 2.0, 10.0};
    return XFetch{.beta = Pick(betas, a)};
  } else if constexpr (std::is_same_v<P, SoftTtl>) {
    const absl::Duration stale_for[] = {absl::ZeroDuration(), ttl / 2, 3 * ttl,
                                        absl::Seconds(30)};
    const absl::Duration stale_if_error[] = {absl::ZeroDuration(), ttl, 5 * ttl,
                                             ttl / 2};
    return SoftTtl{.stale_for = Pick(stale_for, a),
                   .stale_if_error = Pick(stale_if_error, b)};
  } else {
    (void)a, (void)b, (void)ttl;
    return P{};
  }
}

// Aborts with the trace and the model's state.
[[noreturn]] void Fail(const std::vector<std::string>& trace,
                       const std::string& what, const std::string& model) {
  std::fprintf(stderr, "paddock fuzz: MISMATCH: %s\noperations:\n",
               what.c_str());
  for (const std::string& op : trace) {
    std::fprintf(stderr, "  %s\n", op.c_str());
  }
  std::fprintf(stderr, "model:\n%s", model.c_str());
  std::abort();
}

std::string Show(const absl::StatusOr<std::string>& v) {
  return v.ok() ? absl::StrCat("\"", *v, "\"") : v.status().ToString();
}

std::string Show(const std::optional<std::string>& v) {
  return v.has_value() ? absl::StrCat("\"", *v, "\"") : "nullopt";
}

// The cache's answer matches the model's: the same value, or the same error
// code with the model's message (if it has one) inside the cache's.
bool Matches(const absl::StatusOr<std::string>& got,
             const absl::StatusOr<std::string>& want) {
  if (got.ok() != want.ok()) return false;
  if (got.ok()) return *got == *want;
  return got.status().code() == want.status().code() &&
         got.status().message().find(want.status().message()) !=
             absl::string_view::npos;
}

void Run(const uint8_t* data, size_t size) {
  Input in(data, size);
  const absl::Duration ttls[] = {absl::Seconds(10), absl::Seconds(10),
                                 absl::Milliseconds(1), absl::Nanoseconds(1)};
  const absl::Duration ttl = Pick(ttls, in.Byte());
  const size_t max_entries_choices[] = {1, 2, 3, 1000};
  const size_t max_entries = Pick(max_entries_choices, in.Byte());
  const absl::Duration error_ttls[] = {absl::ZeroDuration(), ttl / 4, 2 * ttl,
                                       absl::ZeroDuration()};
  const absl::Duration error_ttl = Pick(error_ttls, in.Byte());
  const int load_limits[] = {0, 1, 2, 0};
  const int max_concurrent_loads = Pick(load_limits, in.Byte());
  const absl::Duration max_load_ages[] = {absl::InfiniteDuration(), 3 * ttl,
                                          ttl / 2, absl::Seconds(30)};
  const absl::Duration max_load_age = Pick(max_load_ages, in.Byte());
  const uint8_t policy_a = in.Byte();
  const uint8_t policy_b = in.Byte();
  const uint64_t seed = 1 + in.Byte();
  const Policy policy = MakePolicy<Policy>(policy_a, policy_b, ttl);
  const int64_t ttl_nanos = absl::ToInt64Nanoseconds(ttl);

  ManualClock clock(absl::UnixEpoch() + absl::Hours(1));
  DroppingExecutor executor;
  LoaderMode mode = LoaderMode::kValue;
  int64_t load_nanos = 0;
  uint64_t calls = 0;
  auto loader = [&](const std::string& key) -> absl::StatusOr<std::string> {
    const uint64_t call = ++calls;
    clock.Advance(absl::Nanoseconds(load_nanos));
    switch (mode) {
      case LoaderMode::kValue:
        break;
      case LoaderMode::kError:
        return absl::UnavailableError(absl::StrCat("backend down: ", key));
      case LoaderMode::kThrowStd:
        throw std::runtime_error(absl::StrCat("disk on fire: ", key));
      case LoaderMode::kThrowOther:
        throw 42;
    }
    return absl::StrCat(key, "#", call);
  };
  auto cache = std::make_unique<StringCache>(
      loader,
      Options{.ttl = ttl,
              .max_entries = max_entries,
              .shards = 1,
              .wait_timeout = absl::ZeroDuration(),
              .clock = &clock,
              .executor = &executor,
              .seed = seed,
              .error_ttl = error_ttl,
              .max_concurrent_loads = max_concurrent_loads,
              .max_load_age = max_load_age},
      policy);
  CacheModel<Policy> model(
      ModelOptions{ttl, max_entries, error_ttl, max_concurrent_loads,
                   max_load_age, seed},
      policy, absl::ToUnixNanos(clock.Now()));

  std::vector<std::string> trace;
  trace.push_back(absl::StrCat(
      "config: ttl=", absl::FormatDuration(ttl), " max_entries=", max_entries,
      " error_ttl=", absl::FormatDuration(error_ttl),
      " max_concurrent_loads=", max_concurrent_loads,
      " max_load_age=", absl::FormatDuration(max_load_age),
      " policy_bytes=", policy_a, ",", policy_b, " seed=", seed));
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) Fail(trace, what, model.Describe());
  };
  // With a load limit, two slots taken at one instant would leave the
  // write-off of a hung one to hash-map order: give every lookup its own
  // nanosecond.
  auto tick = [&] {
    if (max_concurrent_loads > 0) {
      clock.Advance(absl::Nanoseconds(1));
      model.Advance(1);
    }
  };

  for (size_t ops = 0; !in.empty() && ops < kMaxOps; ++ops) {
    const uint8_t op = in.Byte();
    const uint8_t arg = in.Byte();
    const std::string key = absl::StrCat("k", arg % kKeys);
    switch (op % 12) {
      case 0:
      case 1:
      case 2: {
        tick();
        const absl::StatusOr<std::string> want = model.Get(key);
        const absl::StatusOr<std::string> got = cache->Get(key);
        trace.push_back(absl::StrCat("Get(", key, ") -> ", Show(got)));
        check(Matches(got, want),
              absl::StrCat("Get(", key, "): cache ", Show(got), ", model ",
                           Show(want)));
        break;
      }
      case 3: {
        tick();
        const std::optional<std::string> want = model.GetIfPresent(key);
        const std::optional<std::string> got = cache->GetIfPresent(key);
        trace.push_back(absl::StrCat("GetIfPresent(", key, ") -> ", Show(got)));
        check(got == want, absl::StrCat("GetIfPresent(", key, "): cache ",
                                        Show(got), ", model ", Show(want)));
        break;
      }
      case 4: {
        const std::string value = absl::StrCat(key, "@put", ops);
        trace.push_back(absl::StrCat("Put(", key, ", ", value, ")"));
        model.Put(key, value);
        cache->Put(key, value);
        break;
      }
      case 5:
        trace.push_back(absl::StrCat("Invalidate(", key, ")"));
        model.Invalidate(key);
        cache->Invalidate(key);
        break;
      case 6:
        trace.emplace_back("InvalidateAll()");
        model.InvalidateAll();
        cache->InvalidateAll();
        break;
      case 7: {
        // Coarse steps of ttl/32 up to 4·ttl, or fine steps of 1-127 ns.
        const int64_t nanos =
            arg < 128 ? arg * (ttl_nanos / 32) : int64_t{arg - 127};
        trace.push_back(absl::StrCat("Advance(", nanos, "ns)"));
        clock.Advance(absl::Nanoseconds(nanos));
        model.Advance(nanos);
        break;
      }
      case 8: {
        const bool want = model.RunOne();
        const bool got = executor.RunOne();
        trace.push_back(absl::StrCat("RunOne() -> ", got));
        check(got == want,
              absl::StrCat("RunOne: cache ", got, ", model ", want));
        break;
      }
      case 9: {
        const size_t want = model.RunAll();
        const size_t got = executor.RunAll();
        trace.push_back(absl::StrCat("RunAll() -> ", got));
        check(got == want,
              absl::StrCat("RunAll: cache ", got, ", model ", want));
        break;
      }
      case 10: {
        const LoaderMode modes[] = {LoaderMode::kValue, LoaderMode::kError,
                                    LoaderMode::kThrowStd,
                                    LoaderMode::kThrowOther};
        mode = Pick(modes, arg);
        model.set_loader_mode(mode);
        trace.push_back(absl::StrCat("loader mode ", arg % 4));
        break;
      }
      case 11: {
        if (arg >= 192) {
          const size_t want = model.DropAll();
          const size_t got = executor.DropAll();
          trace.push_back(absl::StrCat("DropAll() -> ", got));
          check(got == want,
                absl::StrCat("DropAll: cache ", got, ", model ", want));
        } else {
          // Up to 3·ttl in steps of ttl/64.
          load_nanos = arg * (ttl_nanos / 64);
          model.set_load_nanos(load_nanos);
          trace.push_back(absl::StrCat("load time ", load_nanos, "ns"));
        }
        break;
      }
    }
    check(!model.ambiguous(), "the model met an ambiguous slot write-off");
    check(absl::ToUnixNanos(clock.Now()) == model.now(),
          absl::StrCat("clock: cache ", absl::ToUnixNanos(clock.Now()),
                       ", model ", model.now()));
    check(calls == model.loader_calls(),
          absl::StrCat("loader calls: cache ", calls, ", model ",
                       model.loader_calls()));
    check(
        cache->size() == model.size(),
        absl::StrCat("size: cache ", cache->size(), ", model ", model.size()));
    check(cache->size() <= max_entries, "size above max_entries");
    check(cache->loads_in_flight() == model.loads_in_flight(),
          absl::StrCat("loads_in_flight: cache ", cache->loads_in_flight(),
                       ", model ", model.loads_in_flight()));
    check(executor.pending() == model.pending(),
          absl::StrCat("queued refreshes: cache ", executor.pending(),
                       ", model ", model.pending()));
    const Stats got = cache->stats();
    const Stats want = model.stats();
    check(got == want,
          fmt::format("stats:\n  cache {}\n  model {}", got, want));
  }

  if (std::getenv("PADDOCK_FUZZ_TRACE") != nullptr) {
    for (const std::string& op : trace) {
      std::fprintf(stderr, "%s\n", op.c_str());
    }
    std::fprintf(stderr, "%s", model.Describe().c_str());
  }

  // Destroyed with refreshes queued: they must not call the loader later.
  const uint64_t calls_before = calls;
  cache.reset();
  executor.RunAll();
  check(calls == calls_before, "a refresh ran after the cache was destroyed");
}

}  // namespace
}  // namespace paddock::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  paddock::fuzz::Run(data, size);
  return 0;
}
