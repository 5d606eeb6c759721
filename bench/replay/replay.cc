// RunPolicy: a pod's request handling under each policy, and the
// orchestration of one run over the fleet.

#include "replay.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "arrivals.h"
#include "backend.h"
#include "cost_model.h"
#include "cpu_affinity.h"
#include "fleet.h"
#include "fmt/format.h"
#include "metrics.h"
#include "paddock/cache.h"
#include "paddock/codec.h"
#include "paddock/executor.h"
#include "paddock/listener.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/shared_tier.h"
#include "pg_backend.h"
#include "scenario.h"
#include "server.h"
#include "shared_arena.h"

#ifdef PADDOCK_REPLAY_REDIS
#include "paddock/redis.h"
#endif

namespace paddock::replay {
namespace {

// The seed's launch-day exhibition: the one key everybody reads.
constexpr char kHotKey[] = "exhibition:launch";

// What the cache stores: when it was built (a real page would follow).
struct Page {
  int64_t built_at = 0;  // MonotonicNanos() at the end of the rebuild.
};

}  // namespace
}  // namespace paddock::replay

// How a page crosses to the other pods through the shared tier: its build
// time as decimal text. CLOCK_MONOTONIC is one clock for every process on
// the machine, so another pod's build time reads as the same instant.
template <>
struct paddock::Codec<paddock::replay::Page> {
  static std::string Encode(const paddock::replay::Page& page) {
    return Codec<int64_t>::Encode(page.built_at);
  }
  static absl::StatusOr<paddock::replay::Page> Decode(std::string_view bytes) {
    absl::StatusOr<int64_t> built_at = Codec<int64_t>::Decode(bytes);
    if (!built_at.ok()) return built_at.status();
    return paddock::replay::Page{*built_at};
  }
};

namespace paddock::replay {
namespace {

// What a pod's request handling shares, in the pod's process.
struct PodState {
  const Scenario& scenario;
  RunMetrics& metrics;             // The fleet's, in shared memory.
  const std::atomic<bool>& abort;  // Set when the run is over.
  Backend& backend;                // This pod's.
  // --shared=redis: this pod's connection to the fleet's tier; else null.
  std::shared_ptr<SharedTier> shared;
};

// The hot key's rebuild, instrumented: counts the loads in flight.
absl::StatusOr<Page> Rebuild(PodState& state) {
  state.metrics.OnLoadStart(MonotonicNanos());
  const absl::Status status = state.backend.Rebuild(state.abort);
  state.metrics.OnLoadEnd();
  if (!status.ok()) return status;
  return Page{MonotonicNanos()};
}

RequestHandler::Result OtherOperation(PodState& state) {
  return Perform(state.scenario.other_cost, state.abort)
             ? RequestHandler::Result::kOk
             : RequestHandler::Result::kAborted;
}

// A pod's request handling.
class PodHandler : public RequestHandler {
 public:
  // The cache's counters; zero without a cache.
  virtual PolicyResult::CacheCounters Counters() const { return {}; }
};

// The seed's baseline: no cache, every hot request rebuilds.
class UncachedHandler final : public PodHandler {
 public:
  explicit UncachedHandler(PodState& state) : state_(state) {}
  Result Handle(const Request& request) override {
    if (!request.hot) return OtherOperation(state_);
    if (Rebuild(state_).ok()) return Result::kOk;
    return state_.abort.load() ? Result::kAborted : Result::kError;
  }

 private:
  PodState& state_;
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

// PodCacheOptions()
//
// The options of pod `pod`'s cache. Every pod builds its own cache, with its
// own refresh pool (`refresh_pool`, on the server CPU) and seed; this is the
// one place where a pod's cache is configured.
Options PodCacheOptions(const RunConfig& config, const PodState& state, int pod,
                        absl::Duration ttl, Executor* refresh_pool,
                        Listener* listener) {
  Options options{.ttl = ttl,
                  .wait_timeout = config.scenario.wait_timeout,
                  .executor = refresh_pool,
                  // Pods draw independently (pod 0 keeps --seed; 0 stays
                  // "random").
                  .seed = config.seed == 0 ? 0 : config.seed + pod,
                  .listener = listener,
                  .shared = state.shared};
  return options;
}

template <typename Policy>
class CachedHandler final : public PodHandler {
 public:
  // Throws std::invalid_argument if the library rejects the options.
  CachedHandler(PodState& state, const RunConfig& config, int pod,
                Policy policy, absl::Duration ttl)
      : state_(state),
        refresh_pool_(config.scenario.refresh_threads),
        stale_counter_(state.metrics),
        cache_([&state](const std::string&) { return Rebuild(state); },
               PodCacheOptions(config, state, pod, ttl, &refresh_pool_,
                               &stale_counter_),
               policy) {}

  Result Handle(const Request& request) override {
    if (!request.hot) return OtherOperation(state_);
    if (cache_.Get(hot_key_).ok()) return Result::kOk;
    return state_.abort.load() ? Result::kAborted : Result::kError;
  }

  PolicyResult::CacheCounters Counters() const override {
    const Stats s = cache_.stats();
    return {s.hits,          s.stale_hits,      s.misses,
            s.loads,         s.coalesced_waits, s.refreshes,
            s.wait_timeouts, s.stale_fallbacks};
  }

 private:
  PodState& state_;
  const std::string hot_key_ = kHotKey;
  // Background refreshes run on the server CPU: the pool's threads inherit
  // the affinity of the pod, which inherits the replay's main thread's.
  ThreadPool refresh_pool_;
  StaleCounter stale_counter_;
  Cache<std::string, Page, Policy> cache_;  // Destroyed first.
};

// Builds a pod's handler, in the pod. May throw std::invalid_argument.
using HandlerFactory =
    std::function<std::unique_ptr<PodHandler>(PodState&, int pod)>;

template <typename Policy>
HandlerFactory Cached(const RunConfig& config, Policy policy,
                      absl::Duration ttl) {
  return [&config, policy, ttl](PodState& state, int pod) {
    return std::make_unique<CachedHandler<Policy>>(state, config, pod, policy,
                                                   ttl);
  };
}

// A pod's life, in its own process: its backend, its handler, its server.
int PodMain(const RunConfig& config, const HandlerFactory& factory,
            RunMetrics& metrics, FleetControl& control, int pod,
            int requests_fd) {
  const Scenario& s = config.scenario;
  std::unique_ptr<Backend> backend = NewCpuBackend(s.load_cost);
  if (config.backend == BackendKind::kPostgres) {
#ifdef PADDOCK_REPLAY_POSTGRES
    absl::StatusOr<std::unique_ptr<Backend>> pg =
        NewPostgresBackend(config.pg_conninfo, config.db_pool, s, &metrics);
    if (!pg.ok()) {
      control.Fail(pod, pg.status());
      return 2;
    }
    backend = *std::move(pg);
#else
    control.Fail(pod, absl::UnimplementedError("built without libpq"));
    return 2;
#endif
  }
  PodState state{s, metrics, control.abort, *backend, nullptr};
  if (config.shared != SharedTierKind::kNone) {
#ifdef PADDOCK_REPLAY_REDIS
    // Each pod connects after the fork: a tier's connections and threads
    // belong to one process.
    RedisOptions tier_options;
    tier_options.address = config.redis_address;
    tier_options.cluster_nodes = config.redis_cluster_nodes;
    tier_options.key_prefix = config.redis_key_prefix;
    absl::StatusOr<std::shared_ptr<RedisTier>> tier =
        RedisTier::Connect(tier_options);
    if (!tier.ok()) {
      control.Fail(pod, tier.status());
      return 2;
    }
    state.shared = *std::move(tier);
#else
    control.Fail(pod, absl::UnimplementedError("built without paddock::redis"));
    return 2;
#endif
  }
  std::unique_ptr<PodHandler> handler;
  try {
    handler = factory(state, pod);
  } catch (const std::invalid_argument& e) {
    control.Fail(pod, absl::InvalidArgumentError(e.what()));
    return 2;
  }
  Server server(pod, s.workers, config.cpus.server_cpu,
                absl::ToInt64Nanoseconds(s.client_timeout), handler.get(),
                &metrics);
  return ServePod(pod, requests_fd, server, control,
                  [&] { return handler->Counters(); });
}

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

uint64_t Expiries(const Scenario& s, absl::Duration ttl) {
  return static_cast<uint64_t>(std::ceil(
      absl::ToDoubleSeconds(s.Duration()) / absl::ToDoubleSeconds(ttl) - 1e-9));
}

// Ends a fleet that cannot run: every pod stops and is reaped.
void Shutdown(Fleet& fleet, FleetControl& control) {
  fleet.CloseRequests();
  control.abort.store(true);
  control.phase.store(FleetControl::kStop, std::memory_order_release);
  fleet.Reap(absl::Now() + absl::Seconds(60)).IgnoreError();
}

// Runs the scenario on a fleet whose pods handle requests with `factory`'s
// handlers. `ttl`: the cache's (for the expiries), zero without a cache.
absl::StatusOr<PolicyResult> RunFleet(const RunConfig& config,
                                      const std::string& policy,
                                      const HandlerFactory& factory,
                                      absl::Duration ttl) {
  const Scenario& s = config.scenario;
  const int64_t duration = absl::ToInt64Nanoseconds(s.Duration());
  const int64_t timeout = absl::ToInt64Nanoseconds(s.client_timeout);
  const int seconds =
      static_cast<int>(
          std::ceil(absl::ToDoubleSeconds(s.Duration() + s.client_timeout))) +
      5;

  // Shared by the replay's process and its pods.
  SharedArena arena(RunMetrics::ArenaBytes(seconds) + sizeof(FleetControl) +
                    4096);
  RunMetrics& metrics = *arena.New<RunMetrics>(
      arena, seconds, timeout,
      static_cast<int>(std::ceil(s.saturation_share * s.workers - 1e-9)),
      config.pods);
  FleetControl& control = *arena.New<FleetControl>();

  absl::StatusOr<std::unique_ptr<Fleet>> forked =
      Fleet::Fork(config.pods, [&](int pod, int requests_fd) {
        return PodMain(config, factory, metrics, control, pod, requests_fd);
      });
  if (!forked.ok()) return forked.status();
  Fleet& fleet = **forked;
  // The pods build their caches and fill their connection pools first.
  if (absl::Status st = fleet.AwaitPods(control, FleetControl::kReady,
                                        absl::Now() + absl::Seconds(120));
      !st.ok()) {
    Shutdown(fleet, control);
    return st;
  }
  // Time 0 a little ahead, so that the generator is up when arrivals begin.
  const int64_t start = MonotonicNanos() + 200'000'000;
  metrics.Begin(start);

  // The sampler also splits the server CPU's time between the replay (its
  // pods, and this process's threads on that CPU) and other processes, per
  // second and over the arrivals, and measures the database's CPU.
  std::atomic<bool> sampler_stop{false};
  std::atomic<int64_t> generator_cpu{0};
  CpuMeter::Shares arrivals_cpu;
  // The database's CPU: busy, and used by the database's processes.
  std::optional<CpuMeter::Shares> db_cpu;
  std::atomic<bool> not_realtime{false};
  auto client_thread_setup = [&] {
    PinCurrentThread(config.cpus.client_cpu).IgnoreError();
    if (config.realtime_client && !MakeCurrentThreadRealTime().ok()) {
      not_realtime.store(true);
    }
  };
  std::thread sampler([&] {
    client_thread_setup();
    const double total_s = absl::ToDoubleSeconds(s.Duration());
    auto replay_cpu = [&] {
      return ProcessCpuNanos() - ThreadCpuNanos() - generator_cpu.load() +
             fleet.CpuNanos();
    };
    CpuMeter whole(config.cpus.server_cpu);
    CpuMeter per_second(config.cpus.server_cpu);
    CpuMeter db(std::max(config.db_cpu, 0));
    int64_t db_process_cpu = 0;
    int64_t next_draw = 0;
    int phase = 0;  // 0: before the arrivals, 1: during, 2: after.
    int64_t second = -1;
    while (!sampler_stop.load(std::memory_order_relaxed)) {
      absl::SleepFor(absl::Milliseconds(1));
      const int64_t now = MonotonicNanos();
      if (now < start) continue;
      if (phase == 0) {
        whole.Start(now, replay_cpu());
        if (config.db_pid >= 0) {
          db_process_cpu = ProcessTreeCpuNanos(config.db_pid);
        }
        db.Start(now, db_process_cpu);
        phase = 1;
      } else if (phase == 1 && now >= start + duration) {
        arrivals_cpu = whole.Lap(now, replay_cpu());
        if (config.db_cpu >= 0 && config.db_pid >= 0) {
          db_cpu = db.Lap(now, ProcessTreeCpuNanos(config.db_pid));
        }
        phase = 2;
      }
      const int64_t this_second = (now - start) / 1'000'000'000;
      if (second < 0) {
        per_second.Start(now, replay_cpu());
        second = this_second;
      } else if (this_second != second) {
        const CpuMeter::Shares lap = per_second.Lap(now, replay_cpu());
        metrics.OnCpuSecond(start + second * 1'000'000'000, lap.replay,
                            lap.other());
        second = this_second;
      }
      metrics.Sample(now, now < start + duration);
      if (config.live_status && now >= next_draw) {
        DrawStatus(policy, metrics, total_s, now);
        next_draw = now + 250'000'000;
      }
    }
  });

  const ArrivalSchedule schedule(s.rate, s.ramp, s.hold);
  std::atomic<bool> generator_stop{false};
  std::thread generator([&] {
    client_thread_setup();
    RunOpenLoop(
        schedule, start, s.hot_share, config.seed,
        [&](int64_t i, const Request& r) { fleet.Submit(i, r); }, metrics,
        generator_stop, generator_cpu);
  });
  generator.join();
  fleet.CloseRequests();

  // Every request's deadline is at most the last arrival plus the timeout:
  // past that, whatever is still queued or running has failed.
  while (metrics.ended() < metrics.arrivals() &&
         MonotonicNanos() < start + duration + timeout) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  // The caches' counters are read before the run's end aborts the loads
  // still running, whose failures would otherwise show as stale fallbacks.
  PolicyResult result;
  control.phase.store(FleetControl::kCollect, std::memory_order_release);
  absl::Status status = fleet.AwaitPods(control, FleetControl::kCollected,
                                        absl::Now() + absl::Seconds(60));
  for (int pod = 0; status.ok() && pod < config.pods; ++pod) {
    const PolicyResult::CacheCounters& c = control.pods[pod].cache;
    PolicyResult::CacheCounters& sum = result.cache;
    sum.hits += c.hits;
    sum.stale_hits += c.stale_hits;
    sum.misses += c.misses;
    sum.loads += c.loads;
    sum.coalesced_waits += c.coalesced_waits;
    sum.refreshes += c.refreshes;
    sum.wait_timeouts += c.wait_timeouts;
    sum.stale_fallbacks += c.stale_fallbacks;
  }
  control.abort.store(true);
  control.phase.store(FleetControl::kStop, std::memory_order_release);
  if (status.ok()) {
    status = fleet.AwaitPods(control, FleetControl::kStopped,
                             absl::Now() + absl::Seconds(120));
  }
  sampler_stop.store(true);
  sampler.join();
  if (config.live_status) std::fprintf(stderr, "\r\033[K");
  if (not_realtime.load()) {
    std::fprintf(stderr,
                 "paddock_replay: warning: the load generator could not run "
                 "under SCHED_FIFO (needs root or CAP_SYS_NICE); a busy "
                 "database on its CPU may delay the arrivals (see "
                 "generator_lag_ms)\n");
  }
  const absl::Status reaped = fleet.Reap(absl::Now() + absl::Seconds(60));
  if (!status.ok()) return status;
  if (!reaped.ok()) return reaped;

  result.policy = policy;
  metrics.Summarize(result);
  result.throughput_rps = static_cast<double>(result.completed) /
                          absl::ToDoubleSeconds(s.Duration());
  result.server_cpu_busy = arrivals_cpu.busy;
  result.server_cpu_replay = arrivals_cpu.replay;
  result.backend.kind = BackendName(config.backend);
  result.backend.pool =
      config.backend == BackendKind::kPostgres ? config.db_pool : 0;
  if (db_cpu.has_value()) {
    result.backend.cpu_busy = db_cpu->busy;
    result.backend.cpu_db = db_cpu->replay;
  }
  result.fleet.pods = config.pods;
  result.fleet.shared = SharedTierName(config.shared);
  if (ttl > absl::ZeroDuration()) {
    result.expiries = Expiries(s, ttl);
    // The caches' own count of stale values served (stale hits and stale
    // values given instead of an error or a timeout).
    result.hot_key.stale_served =
        result.cache.stale_hits + result.cache.stale_fallbacks;
  }
  return result;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  return {"none", "NaiveJitter", "SingleFlight", "XFetch", "SoftTtl"};
}

std::string SharedTierName(SharedTierKind kind) {
  switch (kind) {
    case SharedTierKind::kRedis:
      return "redis";
    case SharedTierKind::kRedisCluster:
      return "redis-cluster";
    case SharedTierKind::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<SharedTierKind> ParseSharedTier(const std::string& name) {
  if (name == "none") return SharedTierKind::kNone;
  if (name == "redis") return SharedTierKind::kRedis;
  if (name == "redis-cluster") return SharedTierKind::kRedisCluster;
  return absl::InvalidArgumentError(
      absl::StrCat("paddock_replay: unknown --shared '", name,
                   "'; expected none, redis or redis-cluster"));
}

absl::StatusOr<PolicyResult> RunPolicy(const RunConfig& config,
                                       const std::string& policy) {
  const Scenario& s = config.scenario;
  if (policy == "none") {
    return RunFleet(
        config, policy,
        [](PodState& state, int) {
          return std::make_unique<UncachedHandler>(state);
        },
        absl::ZeroDuration());
  }
  if (policy == "NaiveJitter") {
    return RunFleet(config, policy,
                    Cached(config, NaiveJitter{.jitter = s.jitter}, s.ttl),
                    s.ttl);
  }
  if (policy == "SingleFlight") {
    return RunFleet(config, policy, Cached(config, SingleFlight{}, s.ttl),
                    s.ttl);
  }
  if (policy == "XFetch") {
    return RunFleet(config, policy,
                    Cached(config, XFetch{.beta = s.beta}, s.ttl), s.ttl);
  }
  if (policy == "SoftTtl") {
    return RunFleet(
        config, policy,
        Cached(config, SoftTtl{.stale_for = s.stale_for}, s.soft_ttl),
        s.soft_ttl);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock_replay: unknown --policy '", policy,
      "'; expected all or one of: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace paddock::replay
