// File: bench/replay/pg_backend.h
// -----------------------------------------------------------------------------
// `--backend=postgres`: the scenarios' data in a real PostgreSQL, the hot
// key's rebuild as the SQL of the seeds' services, and its calibration.
//
//   member-page-90rps (seed 004)   a page of members by id and their count:
//     SELECT id, name FROM member ORDER BY id LIMIT $1 OFFSET $2
//     SELECT count(*) FROM member
//   hotkey-200rps (seed 000)       one aggregation per product group, the 8
//                                  groups one after the other:
//     SELECT g.brand_id, count(*), min(g.price), max(g.price), sum(g.stock)
//       FROM group_goods p JOIN goods g ON g.id = p.goods_id
//      WHERE p.group_id = $1 GROUP BY g.brand_id ORDER BY g.brand_id
//
// The tables live in schema `paddock_replay`, which the replay drops and
// creates. Each pod borrows connections from its own pool of `--db_pool`
// (the loader of examples/postgres_loader.cpp: examples/postgres/), one per
// statement.

#ifndef PADDOCK_BENCH_REPLAY_PG_BACKEND_H_
#define PADDOCK_BENCH_REPLAY_PG_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backend.h"
#include "metrics.h"
#include "scenario.h"

namespace paddock::replay {

// The statements one rebuild runs.
int PgStatementsPerRebuild(const Scenario& s);

// PreparePgData()
//
// Drops schema `paddock_replay` if it exists and creates it with the tables
// of `s.db.workload`, filled (generate_series), vacuumed and analysed. Run in
// the replay's own process before the pods exist; closes its connection.
absl::Status PreparePgData(const std::string& conninfo, const Scenario& s);

// NewPostgresBackend()
//
// Returns a pod's backend: a pool of `pool_size` connections to `conninfo`,
// all opened now (HikariCP's default: the pool is full at start), each with
// the statements prepared. A rebuild borrows a connection per statement,
// waiting for one while all are busy; `metrics` (may be null) counts the
// statements and the connections in use.
absl::StatusOr<std::unique_ptr<Backend>> NewPostgresBackend(
    const std::string& conninfo, int pool_size, const Scenario& s,
    RunMetrics* metrics);

// What CalibratePg measured.
struct PgCalibration {
  int statements = 0;  // Per rebuild.
  // One client on an idle database: the cost of a rebuild.
  int sequential_rebuilds = 0;
  double mean_ms = 0, p50_ms = 0, p95_ms = 0;
  // `clients` clients rebuilding as fast as they can: the capacity.
  int clients = 0;
  double seconds = 0;
  double rebuilds_per_s = 0;
  // Meanwhile, shares of the database's CPU: busy with anything, and used by
  // the database's processes; < 0 unknown.
  double db_cpu_busy = -1;
  double db_cpu_used = -1;
};

// CalibratePg()
//
// Measures, on the prepared data, `sequential` rebuilds by one client, then
// `clients` clients rebuilding for `duration`; with `db_cpu` >= 0 and the
// postmaster's `db_pid` >= 0, how that CPU was used meanwhile.
absl::StatusOr<PgCalibration> CalibratePg(const std::string& conninfo,
                                          const Scenario& s, int sequential,
                                          int clients, absl::Duration duration,
                                          int db_cpu, int db_pid);

// The calibration as text: the measurements and what they mean for the
// scenario without a cache (demand against capacity).
std::string FormatCalibration(const Scenario& s, const PgCalibration& c,
                              int db_cpu);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_PG_BACKEND_H_
