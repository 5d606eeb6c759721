// RunPolicy: the server's request handling under each policy, and the
// orchestration of one run.

#include "replay.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "arrivals.h"
#include "cost_model.h"
#include "cpu_affinity.h"
#include "fmt/format.h"
#include "metrics.h"
#include "paddock/cache.h"
#include "paddock/executor.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "scenario.h"
#include "server.h"

namespace paddock::replay {
namespace {

// The seed's launch-day exhibition: the one key everybody reads.
constexpr char kHotKey[] = "exhibition:launch";

// What the cache stores: when it was built (a real page would follow).
struct Page {
  int64_t built_at = 0;  // MonotonicNanos() at the end of the rebuild.
};

// Everything one run shares between its threads.
struct RunState {
  const Scenario& scenario;
  RunMetrics metrics;
  std::atomic<bool> abort{false};  // Set when the run is over: work stops.
};

// The hot key's rebuild, instrumented: counts the loads in flight.
absl::StatusOr<Page> Rebuild(RunState& state) {
  state.metrics.OnLoadStart(MonotonicNanos());
  const bool done = Perform(state.scenario.load_cost, state.abort);
  state.metrics.OnLoadEnd();
  if (!done) return absl::CancelledError("paddock_replay: run over");
  return Page{MonotonicNanos()};
}

RequestHandler::Result OtherOperation(RunState& state) {
  return Perform(state.scenario.other_cost, state.abort)
             ? RequestHandler::Result::kOk
             : RequestHandler::Result::kAborted;
}

// The seed's baseline: no cache, every hot request rebuilds.
class UncachedHandler final : public RequestHandler {
 public:
  explicit UncachedHandler(RunState& state) : state_(state) {}
  Result Handle(const Request& request) override {
    if (!request.hot) return OtherOperation(state_);
    return Rebuild(state_).ok() ? Result::kOk : Result::kAborted;
  }

 private:
  RunState& state_;
};

// Forwards the cache's stale serves to the metrics.
class StaleCounter final : public Listener {
 public:
  explicit StaleCounter(RunMetrics& metrics) : metrics_(metrics) {}
  void OnStaleServed(absl::Duration age) override {
    metrics_.OnStaleServed(MonotonicNanos(), absl::ToInt64Nanoseconds(age));
  }

 private:
  RunMetrics& metrics_;
};

template <typename Policy>
class CachedHandler final : public RequestHandler {
 public:
  CachedHandler(RunState& state, Options options, Policy policy)
      : state_(state),
        cache_([&state](const std::string&) { return Rebuild(state); }, options,
               policy) {}

  Result Handle(const Request& request) override {
    if (!request.hot) return OtherOperation(state_);
    if (cache_.Get(hot_key_).ok()) return Result::kOk;
    return state_.abort.load() ? Result::kAborted : Result::kError;
  }

  PolicyResult::CacheCounters Counters() const {
    const Stats s = cache_.stats();
    return {s.hits,          s.stale_hits,      s.misses,
            s.loads,         s.coalesced_waits, s.refreshes,
            s.wait_timeouts, s.stale_fallbacks};
  }

 private:
  RunState& state_;
  const std::string hot_key_ = kHotKey;
  Cache<std::string, Page, Policy> cache_;
};

// Live status on stderr: policy, elapsed / total, req/s, p95, loads in flight.
void DrawStatus(const std::string& policy, const RunMetrics& metrics,
                double total_s, int64_t now) {
  const double elapsed = static_cast<double>(now - metrics.start_nanos()) / 1e9;
  const std::string line = fmt::format(
      "{:<12} {:6.1f} / {:.1f} s  {:5.0f} req/s  p95 {:9.1f} ms  loads in "
      "flight {}",
      policy, std::max(elapsed, 0.0), total_s, metrics.RecentRate(now),
      metrics.RecentP95Millis(now), metrics.loads_in_flight());
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

// Runs the scenario against `handler` and fills `result` (but the cache's
// counters). Calls `at_end` once the arrivals are over and the server is
// idle or past the last deadline, before work still running is aborted.
void Drive(const RunConfig& config, const std::string& policy, RunState& state,
           RequestHandler& handler, PolicyResult& result,
           absl::FunctionRef<void()> at_end) {
  const Scenario& s = config.scenario;
  const int64_t duration = absl::ToInt64Nanoseconds(s.Duration());
  const int64_t timeout = absl::ToInt64Nanoseconds(s.client_timeout);
  const int64_t start = state.metrics.start_nanos();

  Server server(s.workers, config.cpus.server_cpu, timeout, &handler,
                &state.metrics);

  // The sampler also splits the server CPU's time between the replay and
  // other processes, per second and over the arrivals.
  std::atomic<bool> sampler_stop{false};
  std::atomic<int64_t> generator_cpu{0};
  ServerCpuMeter::Shares arrivals_cpu;
  std::thread sampler([&] {
    PinCurrentThread(config.cpus.client_cpu).IgnoreError();
    const double total_s = absl::ToDoubleSeconds(s.Duration());
    auto client_cpu = [&] { return ThreadCpuNanos() + generator_cpu.load(); };
    ServerCpuMeter whole(config.cpus.server_cpu);
    ServerCpuMeter per_second(config.cpus.server_cpu);
    int64_t next_draw = 0;
    int phase = 0;  // 0: before the arrivals, 1: during, 2: after.
    int64_t second = -1;
    while (!sampler_stop.load(std::memory_order_relaxed)) {
      absl::SleepFor(absl::Milliseconds(1));
      const int64_t now = MonotonicNanos();
      if (now < start) continue;
      if (phase == 0) {
        whole.Start(now, client_cpu());
        phase = 1;
      } else if (phase == 1 && now >= start + duration) {
        arrivals_cpu = whole.Lap(now, client_cpu());
        phase = 2;
      }
      const int64_t this_second = (now - start) / 1'000'000'000;
      if (second < 0) {
        per_second.Start(now, client_cpu());
        second = this_second;
      } else if (this_second != second) {
        const ServerCpuMeter::Shares lap = per_second.Lap(now, client_cpu());
        state.metrics.OnCpuSecond(start + second * 1'000'000'000, lap.replay,
                                  lap.other());
        second = this_second;
      }
      state.metrics.Sample(now, now < start + duration);
      if (config.live_status && now >= next_draw) {
        DrawStatus(policy, state.metrics, total_s, now);
        next_draw = now + 250'000'000;
      }
    }
  });

  const ArrivalSchedule schedule(s.rate, s.ramp, s.hold);
  std::atomic<bool> generator_stop{false};
  std::thread generator([&] {
    PinCurrentThread(config.cpus.client_cpu).IgnoreError();
    RunOpenLoop(schedule, start, s.hot_share, config.seed, server,
                state.metrics, generator_stop, generator_cpu);
  });
  generator.join();

  // Every request's deadline is at most the last arrival plus the timeout:
  // past that, whatever is still queued or running has failed.
  server.WaitIdle(start + duration + timeout);
  at_end();
  state.abort.store(true);
  server.Stop();
  sampler_stop.store(true);
  sampler.join();
  if (config.live_status) std::fprintf(stderr, "\r\033[K");

  result.policy = policy;
  state.metrics.Summarize(result);
  result.throughput_rps = static_cast<double>(result.completed) /
                          absl::ToDoubleSeconds(s.Duration());
  result.server_cpu_busy = arrivals_cpu.busy;
  result.server_cpu_replay = arrivals_cpu.replay;
}

uint64_t Expiries(const Scenario& s, absl::Duration ttl) {
  return static_cast<uint64_t>(std::ceil(
      absl::ToDoubleSeconds(s.Duration()) / absl::ToDoubleSeconds(ttl) - 1e-9));
}

template <typename Policy>
absl::StatusOr<PolicyResult> RunCached(const RunConfig& config,
                                       const std::string& name, RunState& state,
                                       Policy policy, absl::Duration ttl) {
  const Scenario& s = config.scenario;
  // Background refreshes run on the server CPU: the pool's threads inherit
  // the affinity of this thread, which main() pinned there.
  ThreadPool refresh_pool(s.refresh_threads);
  StaleCounter stale_counter(state.metrics);
  const Options options{.ttl = ttl,
                        .wait_timeout = s.wait_timeout,
                        .executor = &refresh_pool,
                        .seed = config.seed,
                        .listener = &stale_counter};
  PolicyResult result;
  try {
    CachedHandler<Policy> handler(state, options, policy);
    // The counters are read before the run's end aborts the loads still
    // running, whose failures would otherwise show as stale fallbacks.
    Drive(config, name, state, handler, result,
          [&] { result.cache = handler.Counters(); });
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(e.what());
  }
  result.expiries = Expiries(s, ttl);
  // The cache's own count of stale values served (stale hits and stale
  // values given instead of an error or a timeout).
  result.hot_key.stale_served =
      result.cache.stale_hits + result.cache.stale_fallbacks;
  return result;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  return {"none", "NaiveJitter", "SingleFlight", "XFetch", "SoftTtl"};
}

absl::StatusOr<PolicyResult> RunPolicy(const RunConfig& config,
                                       const std::string& policy) {
  const Scenario& s = config.scenario;
  // Time 0 a little ahead, so that every thread is up when arrivals begin.
  const int64_t start = MonotonicNanos() + 200'000'000;
  const int seconds =
      static_cast<int>(
          std::ceil(absl::ToDoubleSeconds(s.Duration() + s.client_timeout))) +
      5;
  RunState state{
      s, RunMetrics(start, seconds, absl::ToInt64Nanoseconds(s.client_timeout),
                    static_cast<int>(
                        std::ceil(s.saturation_share * s.workers - 1e-9)))};
  if (policy == "none") {
    UncachedHandler handler(state);
    PolicyResult result;
    Drive(config, policy, state, handler, result, [] {});
    return result;
  }
  if (policy == "NaiveJitter") {
    return RunCached(config, policy, state, NaiveJitter{.jitter = s.jitter},
                     s.ttl);
  }
  if (policy == "SingleFlight") {
    return RunCached(config, policy, state, SingleFlight{}, s.ttl);
  }
  if (policy == "XFetch") {
    return RunCached(config, policy, state, XFetch{.beta = s.beta}, s.ttl);
  }
  if (policy == "SoftTtl") {
    return RunCached(config, policy, state, SoftTtl{.stale_for = s.stale_for},
                     s.soft_ttl);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock_replay: unknown --policy '", policy,
      "'; expected all or one of: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace paddock::replay
