// File: bench/replay/scenario.h
// -----------------------------------------------------------------------------
// The scenarios the replay reproduces: their load profile, traffic mix, costs,
// server and cache settings. Every number can be overridden by a flag
// (main.cc); docs/replay.md says where each default comes from in the seeds.

#ifndef PADDOCK_BENCH_REPLAY_SCENARIO_H_
#define PADDOCK_BENCH_REPLAY_SCENARIO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cost_model.h"

namespace paddock::replay {

// What the hot key's rebuild runs as SQL with --backend=postgres, and the
// data the replay creates for it.
struct DbData {
  enum class Workload {
    // Seed 000: one aggregation (a join and a GROUP BY) per product group,
    // the `load_cost.steps` groups one after the other.
    kProductGroups,
    // Seed 004: one page of members by id (LIMIT/OFFSET) and the total
    // count.
    kMemberPage,
  };
  Workload workload = Workload::kProductGroups;
  long members = 100'000;  // kMemberPage: the member table.
  int page = 0;            // kMemberPage: member:page:0:size:10.
  int page_size = 10;
  long goods = 60'000;      // kProductGroups: the goods joined to.
  int group_goods = 2'000;  // kProductGroups: goods per product group.
};

struct Scenario {
  std::string name;
  std::string description;

  // Open-loop arrivals: the rate rises linearly from 0 to `rate` (requests
  // per second, all kinds together) over `ramp`, then stays for `hold`.
  double rate = 200;
  absl::Duration ramp = absl::Seconds(10);
  absl::Duration hold = absl::Seconds(180);

  // Share of requests that read the one hot, cached key; the rest are
  // uncached operations costing `other_cost`.
  double hot_share = 0.19;
  StepCost other_cost{1, {absl::Milliseconds(3), absl::Milliseconds(5)}};
  // What rebuilding the hot key costs (the cache's loader) with
  // --backend=cpu, and what it runs with --backend=postgres.
  StepCost load_cost{8, {absl::Milliseconds(5), absl::Milliseconds(5)}};
  DbData db;

  // The server: a fixed pool of workers behind an unbounded queue. A request
  // not finished `client_timeout` after its scheduled arrival has failed.
  int workers = 200;
  absl::Duration client_timeout = absl::Seconds(60);
  // "Saturated" means at least this share of the workers is busy.
  double saturation_share = 0.875;

  // The cache.
  absl::Duration ttl = absl::Seconds(10);
  absl::Duration soft_ttl = absl::Seconds(10);   // SoftTtl's own ttl.
  absl::Duration stale_for = absl::Seconds(30);  // SoftTtl.
  double jitter = 0.2;                           // NaiveJitter.
  double beta = 1.0;                             // XFetch.
  absl::Duration wait_timeout = absl::Seconds(5);
  int refresh_threads = 2;  // The executor of background refreshes.

  // The time the arrivals last.
  absl::Duration Duration() const { return ramp + hold; }

  // The number of requests the profile issues.
  long ExpectedRequests() const;
};

// The names of the built-in scenarios.
std::vector<std::string> ScenarioNames();

// Returns the scenario called `name`, or InvalidArgumentError listing the
// names.
absl::StatusOr<Scenario> NamedScenario(const std::string& name);

// Returns `s` with every duration of the scenario (ramp, hold, ttls, stale
// window, wait_timeout, client timeout) multiplied by `scale`; costs and
// rates unchanged, so the number of expiries and the size of each stampede
// are those of the full run.
Scenario Scaled(const Scenario& s, double scale);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_SCENARIO_H_
