// paddock_replay: replays seed 000's 00:00 launch (or seed 004's member page)
// on real threads and one real CPU, under no cache and each paddock policy,
// and prints one row per policy. See docs/replay.md.
//
//   paddock_replay --scenario=hotkey-200rps --policy=all --time-scale=0.1
//       --json=replay.json --csv=replay.csv
//   paddock_replay --scenario=member-page-90rps --backend=postgres --pods=4

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "backend.h"
#include "cpu_affinity.h"
#include "metrics.h"
#include "replay.h"
#include "report.h"
#include "scenario.h"
#ifdef PADDOCK_REPLAY_POSTGRES
#include "pg_backend.h"
#include "postgres/throwaway_postgres.h"
#endif
#ifdef PADDOCK_REPLAY_REDIS
#include "redis_cluster.h"
#include "redis_server.h"
#endif

ABSL_FLAG(std::string, scenario, "hotkey-200rps",
          "hotkey-200rps (seed 000) or member-page-90rps (seed 004)");
ABSL_FLAG(std::string, policy, "all",
          "all, none (no cache), NaiveJitter, SingleFlight, XFetch or SoftTtl");
ABSL_FLAG(double, time_scale, 1.0,
          "multiplies every duration of the scenario (ramp, hold, ttls, stale "
          "window, wait_timeout, client timeout), no cost and no rate");
ABSL_FLAG(std::optional<int>, workers, std::nullopt,
          "worker threads of the server (scenario default: 200 or 80)");
ABSL_FLAG(uint64_t, seed, 1, "seeds the traffic mix and the caches");
ABSL_FLAG(std::string, json, "", "write the summary as JSON to this path");
ABSL_FLAG(std::string, csv, "", "write the per-second series to this path");
ABSL_FLAG(int, server_cpu, -1, "CPU of the server (-1: the second allowed)");
ABSL_FLAG(int, client_cpu, -1,
          "CPU of the load generator (-1: the first allowed)");

// The fleet and the backend.
ABSL_FLAG(int, pods, 1,
          "server processes (forked), each with its own workers, cache and "
          "connection pool, all on the server CPU; requests go round-robin");
ABSL_FLAG(std::string, shared, "none",
          "the tier the pods' caches share: none, or (once built in) redis "
          "(one redis-server) or redis-cluster (3 masters, 3 replicas)");
ABSL_FLAG(std::string, backend, "cpu",
          "what the hot key's rebuild runs against: cpu (the cost model) or "
          "postgres (SQL on a real PostgreSQL)");
ABSL_FLAG(std::string, pg, "",
          "--backend=postgres: libpq conninfo of the database to use (the "
          "replay drops and creates schema paddock_replay there); empty: "
          "start a throwaway PostgreSQL");
ABSL_FLAG(int, db_pool, 40, "--backend=postgres: connections per pod");
ABSL_FLAG(int, db_cpu, -1,
          "CPU of the throwaway PostgreSQL (-1: the load generator's)");
ABSL_FLAG(bool, calibrate, false,
          "--backend=postgres: prepare the data, measure what a rebuild "
          "costs the database and what it can sustain, print it and exit");
ABSL_FLAG(std::optional<long>, pg_members, std::nullopt,
          "member-page-90rps with postgres: rows of the member table");
ABSL_FLAG(std::optional<long>, pg_goods, std::nullopt,
          "hotkey-200rps with postgres: rows of the goods table");
ABSL_FLAG(std::optional<int>, pg_group_goods, std::nullopt,
          "hotkey-200rps with postgres: goods per product group");

// Every other number of a scenario; unset keeps the scenario's value. Given
// as full-run values: --time-scale scales the durations among them too.
ABSL_FLAG(std::optional<double>, rate, std::nullopt,
          "target arrival rate, requests/s of all kinds");
ABSL_FLAG(std::optional<absl::Duration>, ramp, std::nullopt,
          "time to ramp from 0 to --rate");
ABSL_FLAG(std::optional<absl::Duration>, hold, std::nullopt,
          "time at --rate after the ramp");
ABSL_FLAG(std::optional<double>, hot_share, std::nullopt,
          "share of requests reading the hot key");
ABSL_FLAG(std::optional<absl::Duration>, other_cpu, std::nullopt,
          "CPU cost of an uncached operation");
ABSL_FLAG(std::optional<absl::Duration>, other_wait, std::nullopt,
          "waiting (I/O) of an uncached operation");
ABSL_FLAG(std::optional<int>, load_steps, std::nullopt,
          "sequential steps of the hot key's rebuild");
ABSL_FLAG(std::optional<absl::Duration>, load_step_cpu, std::nullopt,
          "CPU cost of one rebuild step");
ABSL_FLAG(std::optional<absl::Duration>, load_step_wait, std::nullopt,
          "waiting of one rebuild step");
ABSL_FLAG(std::optional<absl::Duration>, ttl, std::nullopt,
          "cache ttl (NaiveJitter, SingleFlight, XFetch)");
ABSL_FLAG(std::optional<absl::Duration>, soft_ttl, std::nullopt,
          "SoftTtl's ttl");
ABSL_FLAG(std::optional<absl::Duration>, stale_for, std::nullopt,
          "SoftTtl's stale window");
ABSL_FLAG(std::optional<double>, jitter, std::nullopt, "NaiveJitter's jitter");
ABSL_FLAG(std::optional<double>, beta, std::nullopt, "XFetch's beta");
ABSL_FLAG(std::optional<absl::Duration>, wait_timeout, std::nullopt,
          "how long a caller waits for another caller's load");
ABSL_FLAG(std::optional<absl::Duration>, client_timeout, std::nullopt,
          "a request not answered this long after its scheduled arrival "
          "fails");
ABSL_FLAG(std::optional<double>, saturation_share, std::nullopt,
          "share of busy workers that counts as saturated");
ABSL_FLAG(std::optional<int>, refresh_threads, std::nullopt,
          "threads of the cache's background-refresh executor");

namespace paddock::replay {
namespace {

template <typename T, typename F>
void Override(const absl::Flag<std::optional<T>>& flag, F&& apply) {
  if (const std::optional<T> v = absl::GetFlag(flag); v.has_value()) apply(*v);
}

absl::StatusOr<Scenario> ScenarioFromFlags() {
  absl::StatusOr<Scenario> named = NamedScenario(absl::GetFlag(FLAGS_scenario));
  if (!named.ok()) return named.status();
  Scenario s = *std::move(named);
  Override(FLAGS_workers, [&](int v) { s.workers = v; });
  Override(FLAGS_rate, [&](double v) { s.rate = v; });
  Override(FLAGS_ramp, [&](absl::Duration v) { s.ramp = v; });
  Override(FLAGS_hold, [&](absl::Duration v) { s.hold = v; });
  Override(FLAGS_hot_share, [&](double v) { s.hot_share = v; });
  Override(FLAGS_other_cpu,
           [&](absl::Duration v) { s.other_cost.step.cpu = v; });
  Override(FLAGS_other_wait,
           [&](absl::Duration v) { s.other_cost.step.wait = v; });
  Override(FLAGS_load_steps, [&](int v) { s.load_cost.steps = v; });
  Override(FLAGS_load_step_cpu,
           [&](absl::Duration v) { s.load_cost.step.cpu = v; });
  Override(FLAGS_load_step_wait,
           [&](absl::Duration v) { s.load_cost.step.wait = v; });
  Override(FLAGS_ttl, [&](absl::Duration v) { s.ttl = v; });
  Override(FLAGS_soft_ttl, [&](absl::Duration v) { s.soft_ttl = v; });
  Override(FLAGS_stale_for, [&](absl::Duration v) { s.stale_for = v; });
  Override(FLAGS_jitter, [&](double v) { s.jitter = v; });
  Override(FLAGS_beta, [&](double v) { s.beta = v; });
  Override(FLAGS_wait_timeout, [&](absl::Duration v) { s.wait_timeout = v; });
  Override(FLAGS_client_timeout,
           [&](absl::Duration v) { s.client_timeout = v; });
  Override(FLAGS_saturation_share, [&](double v) { s.saturation_share = v; });
  Override(FLAGS_refresh_threads, [&](int v) { s.refresh_threads = v; });
  Override(FLAGS_pg_members, [&](long v) { s.db.members = v; });
  Override(FLAGS_pg_goods, [&](long v) { s.db.goods = v; });
  Override(FLAGS_pg_group_goods, [&](int v) { s.db.group_goods = v; });

  const double scale = absl::GetFlag(FLAGS_time_scale);
  if (!(scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("paddock_replay: --time-scale must be > 0, got ", scale));
  }
  if (!(s.rate > 0) || !(s.hot_share >= 0 && s.hot_share <= 1) ||
      s.workers < 1 || s.load_cost.steps < 1 || s.other_cost.steps < 1 ||
      s.refresh_threads < 1 || s.client_timeout <= absl::ZeroDuration() ||
      s.Duration() <= absl::ZeroDuration() || s.db.members < 1 ||
      s.db.goods < 1 || s.db.group_goods < 1 ||
      s.db.group_goods * 7L >= s.db.goods) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paddock_replay: need --rate > 0 (got ", s.rate,
        "), --hot_share in [0, 1] (got ", s.hot_share,
        "), --workers >= 1 (got ", s.workers,
        "), --load_steps >= 1, --refresh_threads >= 1, "
        "--client_timeout > 0, --ramp + --hold > 0, --pg_members >= 1 and "
        "1 <= 7 x --pg_group_goods < --pg_goods"));
  }
  return Scaled(s, scale);
}

// absl flags spell names with underscores; accept the dashes too
// (--time-scale as --time_scale).
std::vector<char*> DashesToUnderscores(int argc, char** argv,
                                       std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  std::vector<char*> out;
  for (std::string& arg : storage) {
    if (arg.size() > 2 && arg[0] == '-' && arg[1] == '-') {
      const size_t end = std::min(arg.find('='), arg.size());
      for (size_t i = 2; i < end; ++i) {
        if (arg[i] == '-') arg[i] = '_';
      }
    }
    out.push_back(arg.data());
  }
  return out;
}

#ifdef PADDOCK_REPLAY_REDIS
// The exit code when the run's Redis did not start: 77 ("skipped"), as for a
// missing PostgreSQL server, when no redis-server is installed, which is not
// a failure of the replay; else 1.
int RedisNotStarted(const RunConfig& config, const absl::Status& status) {
  std::fprintf(stderr, "paddock_replay: --shared=%s: %s\n",
               SharedTierName(config.shared).c_str(),
               status.ToString().c_str());
  return absl::IsNotFound(status) ? 77 : 1;
}
#endif

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Replays the seeds' hot-key scenario under no cache and each paddock "
      "policy, on real threads and one pinned CPU, against the cost model "
      "or a real PostgreSQL, with one or several server processes.\n"
      "  paddock_replay --scenario=hotkey-200rps --policy=all "
      "--time-scale=0.1 --json=out.json --csv=out.csv");
  std::vector<std::string> storage;
  std::vector<char*> args = DashesToUnderscores(argc, argv, storage);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  absl::StatusOr<Scenario> scenario = ScenarioFromFlags();
  if (!scenario.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(scenario.status().message()).c_str());
    return 2;
  }
  std::vector<std::string> policies;
  const std::string policy = absl::GetFlag(FLAGS_policy);
  if (policy == "all") {
    policies = PolicyNames();
  } else {
    policies = {policy};
  }

  RunConfig config;
  config.scenario = *scenario;
  config.time_scale = absl::GetFlag(FLAGS_time_scale);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.cpus = PlanCpus(absl::GetFlag(FLAGS_server_cpu),
                         absl::GetFlag(FLAGS_client_cpu));
  config.live_status = isatty(STDERR_FILENO) != 0;
  config.pods = absl::GetFlag(FLAGS_pods);
  config.db_pool = absl::GetFlag(FLAGS_db_pool);
  if (config.pods < 1 || config.pods > kMaxPods || config.db_pool < 1) {
    std::fprintf(stderr,
                 "paddock_replay: need --pods in [1, %d] (got %d) and "
                 "--db_pool >= 1 (got %d)\n",
                 kMaxPods, config.pods, config.db_pool);
    return 2;
  }
  absl::StatusOr<SharedTierKind> shared =
      ParseSharedTier(absl::GetFlag(FLAGS_shared));
  absl::StatusOr<BackendKind> backend =
      ParseBackend(absl::GetFlag(FLAGS_backend));
  for (const absl::Status& s : {shared.status(), backend.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  config.shared = *shared;
  config.backend = *backend;
#ifndef PADDOCK_REPLAY_REDIS
  if (config.shared != SharedTierKind::kNone) {
    std::fprintf(stderr,
                 "paddock_replay: --shared=%s: built without the Redis "
                 "tier (Debian: libhiredis-dev, redis-server; "
                 "scripts/install-deps installs them)\n",
                 SharedTierName(config.shared).c_str());
    return 2;
  }
#endif
  if (!config.cpus.warning.empty()) {
    std::fprintf(stderr, "paddock_replay: %s\n", config.cpus.warning.c_str());
  }
  // Everything this thread creates from now on (the pods, whose workers and
  // refresh pools inherit it) runs on the server CPU; the generator and the
  // sampler move themselves to the client CPU, the database to its own.
  if (absl::Status s = PinCurrentThread(config.cpus.server_cpu); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }

#ifdef PADDOCK_REPLAY_POSTGRES
  std::unique_ptr<pg::ThrowawayPostgres> postgres;
  if (config.backend == BackendKind::kPostgres) {
    config.pg_conninfo = absl::GetFlag(FLAGS_pg);
    if (config.pg_conninfo.empty()) {
      const int db_cpu = absl::GetFlag(FLAGS_db_cpu) >= 0
                             ? absl::GetFlag(FLAGS_db_cpu)
                             : config.cpus.client_cpu;
      pg::ThrowawayPostgresOptions options;
      options.cpu = db_cpu;
      // The database shares its CPU with the load generator and the
      // sampler: saturated (160 busy backends with 4 pods), it delayed
      // their wake-ups by seconds, and the arrivals with them. They run
      // under SCHED_FIFO then (realtime_client); the database also yields
      // to everything else of the replay, and still gets all the CPU they
      // leave, which is nearly all of it.
      options.nice = 10;
      options.max_connections = config.pods * config.db_pool + 10;
      // Repeatable plans and no background work: the data does not change.
      options.settings = {"jit=off", "max_parallel_workers_per_gather=0",
                          "autovacuum=off"};
      absl::StatusOr<std::unique_ptr<pg::ThrowawayPostgres>> started =
          pg::ThrowawayPostgres::Start(options);
      if (!started.ok()) {
        std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
        // 77: what ctest and automake read as "skipped".
        return absl::IsNotFound(started.status()) ? 77 : 1;
      }
      postgres = *std::move(started);
      config.pg_conninfo = postgres->conninfo();
      config.db_cpu = db_cpu;
      config.db_pid = postgres->pid();
      config.realtime_client = db_cpu == config.cpus.client_cpu;
    }
    if (absl::Status s = PreparePgData(config.pg_conninfo, config.scenario);
        !s.ok()) {
      std::fprintf(stderr, "paddock_replay: preparing the data: %s\n",
                   s.ToString().c_str());
      return 1;
    }
    if (absl::GetFlag(FLAGS_calibrate)) {
      absl::StatusOr<PgCalibration> c =
          CalibratePg(config.pg_conninfo, *scenario, 200, config.db_pool,
                      absl::Seconds(5), config.db_cpu, config.db_pid);
      if (!c.ok()) {
        std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
        return 1;
      }
      std::fputs(FormatCalibration(*scenario, *c, config.db_cpu).c_str(),
                 stdout);
      return 0;
    }
  }
#else
  if (config.backend == BackendKind::kPostgres) {
    std::fprintf(stderr,
                 "paddock_replay: --backend=postgres: built without libpq "
                 "(Debian: libpq-dev; scripts/install-deps installs it)\n");
    return 2;
  }
#endif
  if (absl::GetFlag(FLAGS_calibrate) &&
      config.backend != BackendKind::kPostgres) {
    std::fprintf(stderr,
                 "paddock_replay: --calibrate needs --backend=postgres\n");
    return 2;
  }

#ifdef PADDOCK_REPLAY_REDIS
  // The fleet's tier: a redis-server of our own on a unix socket in a
  // temporary directory, or a cluster of our own on loopback ports, nothing
  // saved; stopped by pid when `redis` or `cluster` goes. On the database's
  // CPU: in production it is other machines, not the pods' CPU.
  std::unique_ptr<testing::RedisServer> redis;
  std::unique_ptr<testing::RedisCluster> cluster;
  std::vector<int> redis_pids;
  if (config.shared == SharedTierKind::kRedis) {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> started =
        testing::RedisServer::Start();
    if (!started.ok()) return RedisNotStarted(config, started.status());
    redis = *std::move(started);
    config.redis_address = redis->address();
    redis_pids.push_back(redis->pid());
  } else if (config.shared == SharedTierKind::kRedisCluster) {
    absl::StatusOr<std::unique_ptr<testing::RedisCluster>> started =
        testing::RedisCluster::Start();
    if (!started.ok()) return RedisNotStarted(config, started.status());
    cluster = *std::move(started);
    config.redis_cluster_nodes = cluster->addresses();
    for (int i = 0; i < cluster->size(); ++i) {
      redis_pids.push_back(cluster->node(i).pid());
    }
  }
  const int redis_cpu =
      config.db_cpu >= 0 ? config.db_cpu : config.cpus.client_cpu;
  for (int pid : redis_pids) {
    if (absl::Status s = PinProcess(pid, redis_cpu); !s.ok()) {
      std::fprintf(stderr, "paddock_replay: %s\n", s.ToString().c_str());
      return 1;
    }
  }
#endif

  std::vector<PolicyResult> results;
  for (const std::string& name : policies) {
    // Every policy's fleet starts cold, its local caches and its tier alike.
    config.redis_key_prefix = absl::StrCat("replay:", name, ":");
    absl::StatusOr<PolicyResult> result = RunPolicy(config, name);
    if (!result.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(result.status().message()).c_str());
      return 2;
    }
    results.push_back(*std::move(result));
  }

  std::fputs(FormatTable(config, results).c_str(), stdout);
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    if (absl::Status s = WriteJson(path, config, results); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_csv); !path.empty()) {
    if (absl::Status s = WriteCsv(path, results); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace paddock::replay

int main(int argc, char** argv) { return paddock::replay::Main(argc, argv); }
