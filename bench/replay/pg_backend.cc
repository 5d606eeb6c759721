// The PostgreSQL backend: data, rebuilds, calibration.

#include "pg_backend.h"

#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backend.h"
#include "cost_model.h"
#include "cpu_affinity.h"
#include "fmt/format.h"
#include "metrics.h"
#include "postgres/connection_pool.h"
#include "scenario.h"

namespace paddock::replay {
namespace {

using pg::ConnectionPool;
using pg::Result;

constexpr char kMemberPage[] = "member_page";
constexpr char kMemberCount[] = "member_count";
constexpr char kGroupSummary[] = "group_summary";

bool IsMemberPage(const Scenario& s) {
  return s.db.workload == DbData::Workload::kMemberPage;
}

absl::Status PrepareStatements(PGconn* conn, const Scenario& s,
                               absl::Time deadline) {
  if (IsMemberPage(s)) {
    absl::Status st = pg::PrepareStatement(
        conn, kMemberPage,
        "SELECT id, name FROM paddock_replay.member ORDER BY id "
        "LIMIT $1 OFFSET $2",
        deadline);
    if (!st.ok()) return st;
    return pg::PrepareStatement(conn, kMemberCount,
                                "SELECT count(*) FROM paddock_replay.member",
                                deadline);
  }
  return pg::PrepareStatement(
      conn, kGroupSummary,
      "SELECT g.brand_id, count(*), min(g.price), max(g.price), sum(g.stock) "
      "FROM paddock_replay.group_goods p "
      "JOIN paddock_replay.goods g ON g.id = p.goods_id "
      "WHERE p.group_id = $1 GROUP BY g.brand_id ORDER BY g.brand_id",
      deadline);
}

class PostgresBackend final : public Backend {
 public:
  PostgresBackend(const std::string& conninfo, int pool_size, const Scenario& s,
                  RunMetrics* metrics)
      : scenario_(s),
        metrics_(metrics),
        pool_(conninfo, pool_size, [this](PGconn* c, absl::Time deadline) {
          return PrepareStatements(c, scenario_, deadline);
        }) {}

  absl::Status Fill() { return pool_.Fill(); }

  absl::Status Rebuild(const std::atomic<bool>& abort) override {
    if (IsMemberPage(scenario_)) return MemberPage(abort);
    for (int group = 1; group <= scenario_.load_cost.steps; ++group) {
      const std::string id = absl::StrCat(group);
      absl::StatusOr<Result> rows = Query(kGroupSummary, {id.c_str()}, abort);
      if (!rows.ok()) return rows.status();
      if (PQntuples(rows->get()) == 0) {
        return absl::DataLossError(
            absl::StrCat("paddock_replay: product group ", group, " is empty"));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status MemberPage(const std::atomic<bool>& abort) {
    const DbData& db = scenario_.db;
    const std::string limit = absl::StrCat(db.page_size);
    const std::string offset =
        absl::StrCat(int64_t{db.page} * int64_t{db.page_size});
    absl::StatusOr<Result> page =
        Query(kMemberPage, {limit.c_str(), offset.c_str()}, abort);
    if (!page.ok()) return page.status();
    const long expected = std::clamp<long>(
        db.members - long{db.page} * db.page_size, 0, db.page_size);
    if (PQntuples(page->get()) != expected) {
      return absl::DataLossError(
          absl::StrCat("paddock_replay: member page has ",
                       PQntuples(page->get()), " rows, expected ", expected));
    }
    absl::StatusOr<Result> count = Query(kMemberCount, {}, abort);
    if (!count.ok()) return count.status();
    if (PQntuples(count->get()) != 1 ||
        std::atol(PQgetvalue(count->get(), 0, 0)) != db.members) {
      return absl::DataLossError("paddock_replay: wrong member count");
    }
    return absl::OkStatus();
  }

  // Runs one statement on a borrowed connection, waiting for one while all
  // are busy (until the run is aborted).
  absl::StatusOr<Result> Query(const char* statement,
                               std::initializer_list<const char*> params,
                               const std::atomic<bool>& abort) {
    absl::StatusOr<ConnectionPool::Lease> conn =
        absl::CancelledError("paddock_replay: run over");
    while (!abort.load(std::memory_order_relaxed)) {
      conn = pool_.Acquire(absl::Now() + absl::Milliseconds(100));
      if (conn.ok() || !absl::IsDeadlineExceeded(conn.status())) break;
    }
    if (!conn.ok()) return conn.status();
    if (metrics_ != nullptr) {
      metrics_->OnDbAcquire(MonotonicNanos());
      metrics_->OnDbQuery();
    }
    // No deadline: the replay times its database and never makes it hang,
    // and the abort flag ends only the wait for a connection, as before.
    absl::StatusOr<Result> rows =
        conn->ExecPrepared(statement, params, absl::InfiniteFuture());
    // Counted free before the pool has it back: the count never exceeds
    // the connections really in use.
    if (metrics_ != nullptr) metrics_->OnDbRelease();
    return rows;
  }

  const Scenario scenario_;
  RunMetrics* const metrics_;
  ConnectionPool pool_;
};

absl::Status Exec(ConnectionPool::Lease& conn, const std::string& sql) {
  return conn.Exec(sql.c_str(), absl::InfiniteFuture()).status();
}

// The q-quantile of sorted samples, interpolated between the two nearest
// ranks (numpy's default): the median of an even count is the mean of the
// middle two, where index q * n would take the upper one.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double h = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(h);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

int PgStatementsPerRebuild(const Scenario& s) {
  return IsMemberPage(s) ? 2 : s.load_cost.steps;
}

absl::Status PreparePgData(const std::string& conninfo, const Scenario& s) {
  ConnectionPool pool(conninfo, 1, nullptr);
  absl::StatusOr<ConnectionPool::Lease> conn =
      pool.Acquire(absl::Now() + absl::Seconds(30));
  if (!conn.ok()) return conn.status();
  const DbData& db = s.db;
  std::vector<std::string> sql = {
      "SET client_min_messages = warning",
      "DROP SCHEMA IF EXISTS paddock_replay CASCADE",
      "CREATE SCHEMA paddock_replay"};
  std::vector<std::string> vacuum;
  if (IsMemberPage(s)) {
    sql.push_back(
        "CREATE TABLE paddock_replay.member (id bigint PRIMARY KEY, "
        "name text NOT NULL, joined_at timestamptz NOT NULL)");
    sql.push_back(absl::StrCat(
        "INSERT INTO paddock_replay.member SELECT i, 'member-' || i, "
        "timestamptz '2026-01-01' + i * interval '1 minute' "
        "FROM generate_series(1, ",
        db.members, ") i"));
    vacuum.push_back("VACUUM ANALYZE paddock_replay.member");
  } else {
    sql.push_back(
        "CREATE TABLE paddock_replay.goods (id int PRIMARY KEY, "
        "brand_id int NOT NULL, price int NOT NULL, stock int NOT NULL)");
    sql.push_back(
        "CREATE TABLE paddock_replay.group_goods (group_id int NOT NULL, "
        "position int NOT NULL, goods_id int NOT NULL REFERENCES "
        "paddock_replay.goods, PRIMARY KEY (group_id, position))");
    sql.push_back(absl::StrCat(
        "INSERT INTO paddock_replay.goods SELECT i, i % 200, "
        "1000 + (i * 7919) % 90000, (i * 31) % 500 FROM generate_series(1, ",
        db.goods, ") i"));
    // Distinct goods within a group while group_goods * 7 < goods.
    sql.push_back(
        absl::StrCat("INSERT INTO paddock_replay.group_goods SELECT g, p, "
                     "1 + ((g * 100003 + p * 7) % ",
                     db.goods, ") FROM generate_series(1, ", s.load_cost.steps,
                     ") g, generate_series(1, ", db.group_goods, ") p"));
    vacuum.push_back("VACUUM ANALYZE paddock_replay.goods");
    vacuum.push_back("VACUUM ANALYZE paddock_replay.group_goods");
  }
  // VACUUM runs outside a transaction: one statement per Exec.
  for (const std::string& statement : sql) {
    if (absl::Status st = Exec(*conn, statement); !st.ok()) return st;
  }
  for (const std::string& statement : vacuum) {
    if (absl::Status st = Exec(*conn, statement); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> NewPostgresBackend(
    const std::string& conninfo, int pool_size, const Scenario& s,
    RunMetrics* metrics) {
  auto backend =
      std::make_unique<PostgresBackend>(conninfo, pool_size, s, metrics);
  if (absl::Status st = backend->Fill(); !st.ok()) return st;
  return backend;
}

absl::StatusOr<PgCalibration> CalibratePg(const std::string& conninfo,
                                          const Scenario& s, int sequential,
                                          int clients, absl::Duration duration,
                                          int db_cpu, int db_pid) {
  PgCalibration c;
  c.statements = PgStatementsPerRebuild(s);
  const std::atomic<bool> never{false};
  {
    absl::StatusOr<std::unique_ptr<Backend>> one =
        NewPostgresBackend(conninfo, 1, s, nullptr);
    if (!one.ok()) return one.status();
    for (int i = 0; i < 10; ++i) {  // Warm the plans and the buffers.
      if (absl::Status st = (*one)->Rebuild(never); !st.ok()) return st;
    }
    std::vector<double> ms;
    for (int i = 0; i < sequential; ++i) {
      const int64_t start = MonotonicNanos();
      if (absl::Status st = (*one)->Rebuild(never); !st.ok()) return st;
      ms.push_back(static_cast<double>(MonotonicNanos() - start) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    c.sequential_rebuilds = sequential;
    for (double m : ms) c.mean_ms += m / static_cast<double>(ms.size());
    c.p50_ms = Quantile(ms, 0.5);
    c.p95_ms = Quantile(ms, 0.95);
  }
  absl::StatusOr<std::unique_ptr<Backend>> many =
      NewPostgresBackend(conninfo, clients, s, nullptr);
  if (!many.ok()) return many.status();
  std::atomic<uint64_t> rebuilds{0};
  std::atomic<bool> failed{false};
  const bool measure = db_cpu >= 0 && db_pid >= 0;
  CpuMeter meter(std::max(db_cpu, 0));
  const int64_t start = MonotonicNanos();
  meter.Start(start, measure ? ProcessTreeCpuNanos(db_pid) : 0);
  const int64_t end = start + absl::ToInt64Nanoseconds(duration);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&] {
      while (MonotonicNanos() < end && !failed.load()) {
        if ((*many)->Rebuild(never).ok()) {
          rebuilds.fetch_add(1);
        } else {
          failed.store(true);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int64_t stop = MonotonicNanos();
  const CpuMeter::Shares shares =
      meter.Lap(stop, measure ? ProcessTreeCpuNanos(db_pid) : 0);
  if (failed.load()) {
    return absl::InternalError("paddock_replay: a calibration rebuild failed");
  }
  c.clients = clients;
  c.seconds = static_cast<double>(stop - start) / 1e9;
  c.rebuilds_per_s = static_cast<double>(rebuilds.load()) / c.seconds;
  if (measure) {
    c.db_cpu_busy = shares.busy;
    c.db_cpu_used = shares.replay;
  }
  return c;
}

std::string FormatCalibration(const Scenario& s, const PgCalibration& c,
                              int db_cpu) {
  const double demand = s.rate * s.hot_share;
  std::string out = fmt::format(
      "calibration of {} on PostgreSQL ({} statement{} per rebuild{}):\n",
      s.name, c.statements, c.statements == 1 ? "" : "s",
      db_cpu >= 0 ? fmt::format(", database on CPU {}", db_cpu) : "");
  out += fmt::format(
      "  one client, idle database: {} rebuilds, mean {:.2f} ms, p50 {:.2f} "
      "ms, p95 {:.2f} ms\n",
      c.sequential_rebuilds, c.mean_ms, c.p50_ms, c.p95_ms);
  out += fmt::format(
      "  {} clients for {:.1f} s: {:.1f} rebuilds/s{}\n", c.clients, c.seconds,
      c.rebuilds_per_s,
      c.db_cpu_busy >= 0
          ? fmt::format(", the database used {:.0f}% of its CPU ({:.0f}% busy)",
                        100 * c.db_cpu_used, 100 * c.db_cpu_busy)
          : "");
  out += fmt::format(
      "  without a cache at full rate: {:g} req/s x {:g} hot = {:.1f} "
      "rebuilds/s, {:.2f} x what the database can do\n",
      s.rate, s.hot_share, demand,
      c.rebuilds_per_s > 0 ? demand / c.rebuilds_per_s : 0);
  return out;
}

}  // namespace paddock::replay
