// A paddock cache in front of PostgreSQL, as a service would write it: the
// loader borrows a connection from a small pool (libpq forbids two threads on
// one connection), runs one prepared statement, and returns the statement's
// errors as the codes of examples/postgres/pg_status.h. With SoftTtl's
// stale_if_error the cache keeps answering from what it has while the
// database is down, and picks fresh rows up once it is back; the pool
// reconnects by itself.
//
// Every load returns within 2 s (kLoadDeadline), whatever the database does:
// that one deadline covers waiting for a pooled connection, opening one
// (PQconnectStart/PQconnectPoll, then preparing the statement) and the
// statement (PQsendQueryPrepared, then poll() on the socket). A statement
// past it is cancelled (PQcancel, on a thread of its own: it blocks until the
// postmaster takes the request) and its connection closed. statement_timeout
// (300 ms) ends a slow statement sooner, but only a running server enforces
// it: a hung one answers nothing. So every read returns within 2 s too: the
// caller that loads waits for its load, the others for that load or less.
//
// The program starts its own throwaway PostgreSQL (initdb into a temporary
// directory, unix socket only, fsync=off), fills a table, and then:
//   1. reads members through the cache and checks every name;
//   2. asks for a member that does not exist: NotFound, remembered for
//      error_ttl, so a second caller costs no query;
//   3. holds an exclusive lock on the table from another connection: a load
//      runs into statement_timeout (SQLSTATE 57014): DeadlineExceeded;
//   4. kills the server (immediate shutdown, what a crash looks like to its
//      clients) while 4 threads keep reading: every read still gets its
//      member's name, from the stale value, while the loads fail with
//      Unavailable;
//   5. restarts the server and renames a member: the cache serves the new
//      name, through connections the pool reopened;
//   6. stops the server by its pid.
// Exits 1 if any check fails, 77 (skipped) if no PostgreSQL server is
// installed.

#include <libpq-fe.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"
#include "postgres/connection_pool.h"
#include "postgres/pg_status.h"
#include "postgres/throwaway_postgres.h"

namespace {

using paddock::pg::ConnectionPool;
using paddock::pg::Result;
using paddock::pg::ThrowawayPostgres;

constexpr int kMembers = 1000;
constexpr int kReadIds = 20;  // Members 1..20 are read by every thread.
constexpr int kPoolSize = 4;
constexpr int kReaders = 4;
constexpr int kStatementTimeoutMs = 300;
// Each load's deadline, all told: a connection, then the statement.
constexpr absl::Duration kLoadDeadline = absl::Seconds(2);
constexpr absl::Duration kOutage = absl::Milliseconds(1500);
constexpr absl::Duration kRecoveryBound = absl::Seconds(30);
constexpr char kRenamed[] = "member-1 (renamed)";

// The cache's settings: short, so that the run shows several expiries.
constexpr absl::Duration kTtl = absl::Milliseconds(100);
constexpr absl::Duration kStaleFor = absl::Milliseconds(100);
constexpr absl::Duration kStaleIfError = absl::Minutes(10);
constexpr absl::Duration kErrorTtl = absl::Seconds(1);

struct Member {
  int64_t id = 0;
  std::string name;
};

// What the loader saw, by outcome.
struct LoaderCounts {
  std::atomic<int> calls{0}, ok{0}, not_found{0}, deadline{0}, unavailable{0},
      other{0};
  void Count(const absl::Status& s) {
    calls.fetch_add(1);
    if (s.ok()) {
      ok.fetch_add(1);
    } else if (absl::IsNotFound(s)) {
      not_found.fetch_add(1);
    } else if (absl::IsDeadlineExceeded(s)) {
      deadline.fetch_add(1);
    } else if (absl::IsUnavailable(s)) {
      unavailable.fetch_add(1);
    } else {
      other.fetch_add(1);
    }
  }
};

// The loader: one prepared statement on a pooled connection, within
// kLoadDeadline. No row is the caller's NotFound; every other error comes
// mapped by pg_status.h.
absl::StatusOr<Member> LoadMember(ConnectionPool& pool, int64_t id) {
  const absl::Time deadline = absl::Now() + kLoadDeadline;
  absl::StatusOr<ConnectionPool::Lease> conn = pool.Acquire(deadline);
  if (!conn.ok()) return conn.status();
  const std::string id_text = absl::StrCat(id);
  absl::StatusOr<Result> rows =
      conn->ExecPrepared("member_by_id", {id_text.c_str()}, deadline);
  if (!rows.ok()) return rows.status();
  if (PQntuples(rows->get()) == 0) {
    return absl::NotFoundError(absl::StrCat("no member ", id));
  }
  return Member{id, PQgetvalue(rows->get(), 0, 0)};
}

// Runs `sql` on a connection of its own; the statement's status.
absl::Status Run(PGconn* conn, const char* sql) {
  const Result result(PQexec(conn, sql));
  return paddock::pg::StatusFromResult(conn, result.get());
}

// Collects failed checks.
struct Checks {
  int failed = 0;
  void Expect(bool condition, const std::string& what) {
    if (!condition) {
      fmt::print("FAIL: {}\n", what);
      ++failed;
    }
  }
};

bool IsExpectedName(const Member& m) {
  return m.name == absl::StrCat("member-", m.id) ||
         (m.id == 1 && m.name == kRenamed);
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<ThrowawayPostgres>> server =
      ThrowawayPostgres::Start();
  if (absl::IsNotFound(server.status())) {
    fmt::print("SKIP: {}\n", server.status().ToString());
    return 77;
  }
  if (!server.ok()) {
    fmt::print("FAIL: {}\n", server.status().ToString());
    return 1;
  }
  ThrowawayPostgres& pg = **server;
  fmt::print("PostgreSQL pid {}, socket in {}\n", pg.pid(), pg.dir());

  // The table, from a connection of its own.
  {
    PGconn* admin = PQconnectdb(pg.conninfo().c_str());
    absl::Status s = paddock::pg::StatusFromConnect(admin);
    if (s.ok()) {
      s = Run(admin,
              "CREATE TABLE member (id bigint PRIMARY KEY, name text NOT "
              "NULL);"
              "INSERT INTO member SELECT i, 'member-' || i FROM "
              "generate_series(1, 1000) i;");
    }
    PQfinish(admin);
    if (!s.ok()) {
      fmt::print("FAIL: creating the table: {}\n", s.ToString());
      return 1;
    }
  }

  const std::string conninfo =
      absl::StrCat(pg.conninfo(),
                   " options='-c statement_timeout=", kStatementTimeoutMs, "'");
  ConnectionPool pool(conninfo, kPoolSize, [](PGconn* c, absl::Time deadline) {
    return paddock::pg::PrepareStatement(
        c, "member_by_id", "SELECT name FROM member WHERE id = $1", deadline);
  });
  LoaderCounts loads;
  paddock::Cache<int64_t, Member, paddock::SoftTtl> cache(
      [&](const int64_t& id) {
        absl::StatusOr<Member> m = LoadMember(pool, id);
        loads.Count(m.status());
        return m;
      },
      paddock::Options{.ttl = kTtl, .error_ttl = kErrorTtl},
      paddock::SoftTtl{.stale_for = kStaleFor,
                       .stale_if_error = kStaleIfError});
  Checks checks;

  // 1. Reads.
  for (int64_t id = 1; id <= kReadIds; ++id) {
    absl::StatusOr<Member> m = cache.Get(id);
    checks.Expect(m.ok() && IsExpectedName(*m),
                  absl::StrCat("member ", id, ": ",
                               m.ok() ? m->name : m.status().ToString()));
  }
  fmt::print("1. read members 1..{}: {} loads, {} connections opened\n",
             kReadIds, loads.calls.load(), pool.opened());

  // 2. A missing row: NotFound, and a second caller costs no query.
  const int calls_before_missing = loads.calls.load();
  const absl::Status missing = cache.Get(kMembers + 1).status();
  const absl::Status missing_again = cache.Get(kMembers + 1).status();
  checks.Expect(
      absl::IsNotFound(missing) && absl::IsNotFound(missing_again),
      absl::StrCat("a missing member gives NotFound twice, got ",
                   missing.ToString(), " and ", missing_again.ToString()));
  checks.Expect(loads.calls.load() == calls_before_missing + 1,
                absl::StrCat("one query for two reads of a missing member "
                             "within error_ttl, got ",
                             loads.calls.load() - calls_before_missing));
  fmt::print("2. member {}: {} twice, one query (error_ttl {})\n", kMembers + 1,
             missing.ToString(), absl::FormatDuration(kErrorTtl));

  // 3. A lock held elsewhere: the load runs into statement_timeout.
  {
    PGconn* locker = PQconnectdb(pg.conninfo().c_str());
    absl::Status s = paddock::pg::StatusFromConnect(locker);
    if (s.ok()) {
      s = Run(locker, "BEGIN; LOCK TABLE member IN ACCESS EXCLUSIVE MODE");
    }
    checks.Expect(s.ok(), absl::StrCat("taking the lock: ", s.ToString()));
    const absl::Time start = absl::Now();
    const absl::Status blocked = cache.Get(kReadIds + 1).status();
    const absl::Duration waited = absl::Now() - start;
    if (s.ok()) s = Run(locker, "ROLLBACK");
    PQfinish(locker);
    checks.Expect(absl::IsDeadlineExceeded(blocked),
                  absl::StrCat("a load behind the lock gives "
                               "DeadlineExceeded, got ",
                               blocked.ToString()));
    fmt::print(
        "3. member {} behind an exclusive lock: {} after {}\n", kReadIds + 1,
        blocked.ToString(),
        absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(1))));
  }

  // 4. and 5. Readers run while the server is killed and restarted.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0}, wrong{0}, failed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      for (int64_t i = t; !stop.load(); ++i) {
        const int64_t id = 1 + i % kReadIds;
        absl::StatusOr<Member> m = cache.Get(id);
        reads.fetch_add(1);
        if (!m.ok()) {
          if (failed.fetch_add(1) == 0) {
            fmt::print("FAIL: a read of member {} failed: {}\n", id,
                       m.status().ToString());
          }
        } else if (!IsExpectedName(*m)) {
          wrong.fetch_add(1);
        }
        absl::SleepFor(absl::Milliseconds(1));
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(300));

  const paddock::Stats before_kill = cache.stats();
  const int unavailable_before = loads.unavailable.load();
  const uint64_t opened_before = pool.opened();
  const int64_t reads_before_kill = reads.load();
  const pid_t killed_pid = pg.pid();
  checks.Expect(pg.Kill().ok(), "killing the server");
  absl::SleepFor(kOutage);  // Every value is now past ttl + stale_for.
  const paddock::Stats during = cache.stats();
  const int unavailable = loads.unavailable.load() - unavailable_before;
  const int64_t outage_reads = reads.load() - reads_before_kill;
  checks.Expect(
      failed.load() == 0 && wrong.load() == 0,
      absl::StrCat("every read during the outage gets its member, "
                   "got ",
                   failed.load(), " failed and ", wrong.load(), " wrong"));
  checks.Expect(unavailable > 0,
                "the loads during the outage fail with Unavailable");
  checks.Expect(during.stale_fallbacks > before_kill.stale_fallbacks,
                "stale values served in place of the loads' errors");
  fmt::print(
      "4. server (pid {}) killed for {}: {} reads, all answered; {} loads "
      "failed with Unavailable, {} stale values served for them\n",
      killed_pid, absl::FormatDuration(kOutage), outage_reads, unavailable,
      during.stale_fallbacks - before_kill.stale_fallbacks);

  const absl::Status restarted = pg.Restart();
  checks.Expect(restarted.ok(),
                absl::StrCat("restarting the server: ", restarted.ToString()));
  absl::Duration recovered_after = absl::InfiniteDuration();
  if (restarted.ok()) {
    const absl::Time restart = absl::Now();
    PGconn* admin = PQconnectdb(pg.conninfo().c_str());
    absl::Status s = paddock::pg::StatusFromConnect(admin);
    if (s.ok()) {
      s = Run(admin, absl::StrCat("UPDATE member SET name = '", kRenamed,
                                  "' WHERE id = 1")
                         .c_str());
    }
    PQfinish(admin);
    checks.Expect(s.ok(), absl::StrCat("renaming member 1: ", s.ToString()));
    while (absl::Now() - restart < kRecoveryBound) {
      absl::StatusOr<Member> m = cache.Get(1);
      if (m.ok() && m->name == kRenamed) {
        recovered_after = absl::Now() - restart;
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  checks.Expect(
      recovered_after < kRecoveryBound,
      absl::StrCat("the renamed member is served within ",
                   absl::FormatDuration(kRecoveryBound), " of the restart"));
  checks.Expect(pool.opened() > opened_before,
                "the pool opened new connections after the restart");
  checks.Expect(failed.load() == 0 && wrong.load() == 0,
                absl::StrCat("every read gets its member, got ", failed.load(),
                             " failed and ", wrong.load(), " wrong"));
  fmt::print(
      "5. restarted (pid {}): the new name of member 1 served after {}; "
      "{} connections opened in all, {} reads in all\n",
      pg.pid(),
      absl::FormatDuration(absl::Trunc(recovered_after, absl::Milliseconds(1))),
      pool.opened(), reads.load());

  // 6. Stop the server by its pid.
  const pid_t pid = pg.pid();
  const absl::Status stopped = pg.Stop();
  checks.Expect(stopped.ok() && pg.pid() == -1,
                absl::StrCat("stopping the server: ", stopped.ToString()));
  fmt::print("6. server (pid {}) stopped\n", pid);
  fmt::print(
      "loader: {} calls: {} ok, {} NotFound, {} DeadlineExceeded, {} "
      "Unavailable, {} other\n",
      loads.calls.load(), loads.ok.load(), loads.not_found.load(),
      loads.deadline.load(), loads.unavailable.load(), loads.other.load());
  fmt::print("stats: {}\n", cache.stats());

  checks.Expect(loads.other.load() == 0, "no loader error but the expected");
  if (checks.failed == 0) {
    fmt::print(
        "OK: NotFound held for error_ttl, statement timeout as "
        "DeadlineExceeded, stale values through a crash, recovered after "
        "the restart\n");
  }
  return checks.failed == 0 ? 0 : 1;
}
