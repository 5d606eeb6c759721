// File: bench/replay/replay.h
// -----------------------------------------------------------------------------
// One run of a scenario under one policy: a fresh (empty) cache, a fresh
// worker pool on the server CPU, the open-loop generator on the client CPU,
// then a drain bounded by the client timeout.

#ifndef PADDOCK_BENCH_REPLAY_REPLAY_H_
#define PADDOCK_BENCH_REPLAY_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_affinity.h"
#include "metrics.h"
#include "scenario.h"

namespace paddock::replay {

// The policies the replay knows, in the order `--policy=all` runs them:
// "none" (no cache, the seed's baseline), then the four of paddock.
std::vector<std::string> PolicyNames();

struct RunConfig {
  Scenario scenario;  // Already scaled.
  double time_scale = 1;
  CpuPlan cpus;
  uint64_t seed = 1;
  bool live_status = false;  // Redraw a status line on stderr.
};

// Runs `policy` (one of PolicyNames()) once. InvalidArgumentError for an
// unknown policy or a cache option the library rejects.
absl::StatusOr<PolicyResult> RunPolicy(const RunConfig& config,
                                       const std::string& policy);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_REPLAY_H_
