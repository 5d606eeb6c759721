// File: bench/replay/replay.h
// -----------------------------------------------------------------------------
// One run of a scenario under one policy: a fresh fleet of pods (each a
// process with an empty cache and a fresh worker pool, all on the server
// CPU), the open-loop generator on the client CPU, then a drain bounded by
// the client timeout.

#ifndef PADDOCK_BENCH_REPLAY_REPLAY_H_
#define PADDOCK_BENCH_REPLAY_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend.h"
#include "cpu_affinity.h"
#include "metrics.h"
#include "scenario.h"

namespace paddock::replay {

// The policies the replay knows, in the order `--policy=all` runs them:
// "none" (no cache, the seed's baseline), then the four of paddock.
std::vector<std::string> PolicyNames();

// The tier the pods' caches share (`--shared`).
enum class SharedTierKind { kNone, kRedis, kRedisCluster };

// "none", "redis" or "redis-cluster".
std::string SharedTierName(SharedTierKind kind);

// Parses `--shared`; InvalidArgumentError naming the choices.
absl::StatusOr<SharedTierKind> ParseSharedTier(const std::string& name);

struct RunConfig {
  Scenario scenario;  // Already scaled.
  double time_scale = 1;
  CpuPlan cpus;
  uint64_t seed = 1;
  bool live_status = false;  // Redraw a status line on stderr.

  // The server: `pods` processes, each with `scenario.workers` workers.
  int pods = 1;
  SharedTierKind shared = SharedTierKind::kNone;
  // kRedis: the server every pod connects to ("unix:<path>"), and the key
  // prefix of this run (each policy's run starts with an empty tier).
  std::string redis_address;
  // kRedisCluster: the cluster's nodes ("127.0.0.1:<port>" each).
  std::vector<std::string> redis_cluster_nodes;
  std::string redis_key_prefix = "replay:v1:";

  // What the hot key's rebuild runs against.
  BackendKind backend = BackendKind::kCpu;
  std::string pg_conninfo;  // kPostgres: the database, its data prepared.
  int db_pool = 40;         // kPostgres: connections per pod.
  int db_cpu = -1;          // The CPU the database is pinned to; -1 if unknown.
  int db_pid = -1;          // The database's postmaster (ours); -1 if unknown.
  // Run the load generator and the sampler under SCHED_FIFO: the database
  // shares their CPU and, saturated, would delay their wake-ups by seconds.
  bool realtime_client = false;
};

// Runs `policy` (one of PolicyNames()) once. InvalidArgumentError for an
// unknown policy or a cache option the library rejects; the error of a pod
// that cannot start (e.g. no connection to the database) or dies.
// Forks the pods: call with no other thread running.
absl::StatusOr<PolicyResult> RunPolicy(const RunConfig& config,
                                       const std::string& policy);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_REPLAY_H_
