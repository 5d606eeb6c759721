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
//   6. hangs the server for 6 s -- SIGSTOP to the postmaster and to every
//      process of it, what a frozen machine looks like: connections stay
//      open and the kernel still takes connects and bytes, but nothing
//      answers -- while the 4 threads keep reading: every read gets its
//      member's name within the 2 s bound (the check allows 2 s more for a
//      busy machine), from the stale value, while the loads fail with
//      DeadlineExceeded: statements given up and cancelled, connects with no
//      answer;
//   7. resumes it (SIGCONT) and renames another member: the cache serves the
//      new name, and the cancel requests that waited are taken;
//   8. stops the server by its pid.
// Exits 1 if any check fails, 77 (skipped) if no PostgreSQL server is
// installed.

#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
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
// What the checks allow a read beyond kLoadDeadline, for a busy machine.
constexpr absl::Duration kReadSlack = absl::Seconds(2);
constexpr absl::Duration kOutage = absl::Milliseconds(1500);
// Longer than kLoadDeadline + kReadSlack: a read that waited through the
// hang fails the check.
constexpr absl::Duration kHang = absl::Seconds(6);
constexpr absl::Duration kRecoveryBound = absl::Seconds(30);
constexpr char kRenamed[] = "member-1 (renamed)";
constexpr char kRenamedInHang[] = "member-2 (renamed)";

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

// Runs `sql` on a new connection, closed after.
absl::Status RunOnce(const std::string& conninfo, const std::string& sql) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  absl::Status s = paddock::pg::StatusFromConnect(conn);
  if (s.ok()) s = Run(conn, sql.c_str());
  PQfinish(conn);
  return s;
}

// A monotonic clock for timing reads, in nanoseconds.
int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Duration Millis(absl::Duration d) {
  return absl::Trunc(d, absl::Milliseconds(1));
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
         (m.id == 1 && m.name == kRenamed) ||
         (m.id == 2 && m.name == kRenamedInHang);
}

// Serves reads, and how long they take, on kReaders threads until stopped.
class Readers {
 public:
  // Coprime to kReadIds: every thread reads every member.
  static constexpr int64_t kStrides[kReaders] = {1, 3, 7, 9};

  template <typename Read>
  explicit Readers(Read read) : slots_(kReaders) {
    for (int t = 0; t < kReaders; ++t) {
      threads_.emplace_back([this, read, t] {
        for (int64_t i = 0; !stop_.load(); ++i) {
          // Each thread in an order of its own, so that they do not fall
          // into step behind one load and load one key at a time.
          const int64_t id = 1 + (5 * t + kStrides[t] * i) % kReadIds;
          const int64_t start = MonotonicNanos();
          slots_[t].started.store(start);
          absl::StatusOr<Member> m = read(id);
          slots_[t].started.store(0);
          const int64_t took = MonotonicNanos() - start;
          int64_t longest = longest_.load();
          while (took > longest &&
                 !longest_.compare_exchange_weak(longest, took)) {
          }
          reads_.fetch_add(1);
          if (!m.ok()) {
            if (failed_.fetch_add(1) == 0) {
              fmt::print("FAIL: a read of member {} failed: {}\n", id,
                         m.status().ToString());
            }
          } else if (!IsExpectedName(*m)) {
            wrong_.fetch_add(1);
          }
          absl::SleepFor(absl::Milliseconds(1));
        }
      });
    }
  }

  ~Readers() { Join(); }

  void Join() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  int64_t reads() const { return reads_.load(); }
  int64_t failed() const { return failed_.load(); }
  int64_t wrong() const { return wrong_.load(); }
  // The longest read that has returned.
  absl::Duration longest() const { return absl::Nanoseconds(longest_.load()); }
  // The longest read still waiting.
  absl::Duration longest_waiting() const {
    const int64_t now = MonotonicNanos();
    int64_t longest = 0;
    for (const Slot& s : slots_) {
      const int64_t started = s.started.load();
      if (started != 0) longest = std::max(longest, now - started);
    }
    return absl::Nanoseconds(longest);
  }

 private:
  struct Slot {
    std::atomic<int64_t> started{0};  // 0 between reads.
  };
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> reads_{0}, failed_{0}, wrong_{0}, longest_{0};
};

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
        "3. member {} behind an exclusive lock: {} after {}; statements given "
        "up by the client so far: {}\n",
        kReadIds + 1, blocked.ToString(), absl::FormatDuration(Millis(waited)),
        pool.abandoned());
  }

  // 4. to 7. Readers run while the server is killed, restarted, hung and
  // resumed.
  Readers readers([&](int64_t id) { return cache.Get(id); });
  absl::SleepFor(absl::Milliseconds(300));

  const paddock::Stats before_kill = cache.stats();
  const int unavailable_before = loads.unavailable.load();
  const uint64_t opened_before = pool.opened();
  const int64_t reads_before_kill = readers.reads();
  const pid_t killed_pid = pg.pid();
  checks.Expect(pg.Kill().ok(), "killing the server");
  absl::SleepFor(kOutage);  // Every value is now past ttl + stale_for.
  const paddock::Stats during = cache.stats();
  const int unavailable = loads.unavailable.load() - unavailable_before;
  const int64_t outage_reads = readers.reads() - reads_before_kill;
  checks.Expect(
      readers.failed() == 0 && readers.wrong() == 0,
      absl::StrCat("every read during the outage gets its member, got ",
                   readers.failed(), " failed and ", readers.wrong(),
                   " wrong"));
  checks.Expect(unavailable > 0,
                "the loads during the outage fail with Unavailable");
  checks.Expect(during.stale_fallbacks > before_kill.stale_fallbacks,
                "stale values served in place of the loads' errors");
  fmt::print(
      "4. server (pid {}) killed for {}: {} reads, all answered; {} loads "
      "failed with Unavailable, {} stale values served for them\n",
      killed_pid, absl::FormatDuration(kOutage), outage_reads, unavailable,
      during.stale_fallbacks - before_kill.stale_fallbacks);

  // Waits up to kRecoveryBound for the cache to serve `name` for member `id`
  // after an UPDATE; how long it took, or InfiniteDuration.
  auto rename_and_wait = [&](int64_t id, const char* name) {
    const absl::Time start = absl::Now();
    const absl::Status s = RunOnce(
        pg.conninfo(),
        absl::StrCat("UPDATE member SET name = '", name, "' WHERE id = ", id));
    checks.Expect(s.ok(),
                  absl::StrCat("renaming member ", id, ": ", s.ToString()));
    while (s.ok() && absl::Now() - start < kRecoveryBound) {
      absl::StatusOr<Member> m = cache.Get(id);
      if (m.ok() && m->name == name) return absl::Now() - start;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::InfiniteDuration();
  };

  const absl::Status restarted = pg.Restart();
  checks.Expect(restarted.ok(),
                absl::StrCat("restarting the server: ", restarted.ToString()));
  absl::Duration recovered_after = absl::InfiniteDuration();
  if (restarted.ok()) recovered_after = rename_and_wait(1, kRenamed);
  checks.Expect(
      recovered_after < kRecoveryBound,
      absl::StrCat("the renamed member is served within ",
                   absl::FormatDuration(kRecoveryBound), " of the restart"));
  checks.Expect(pool.opened() > opened_before,
                "the pool opened new connections after the restart");
  fmt::print(
      "5. restarted (pid {}): the new name of member 1 served after {}; "
      "{} connections opened in all\n",
      pg.pid(), absl::FormatDuration(Millis(recovered_after)), pool.opened());

  // 6. The server hangs: every read within kLoadDeadline (+ kReadSlack).
  const int deadline_before = loads.deadline.load();
  const uint64_t abandoned_before = pool.abandoned();
  const int64_t reads_before_hang = readers.reads();
  const absl::StatusOr<int> paused = pg.Pause();
  checks.Expect(paused.ok(), absl::StrCat("pausing the server: ",
                                          paused.status().ToString()));
  absl::SleepFor(kHang);
  // Before the server resumes, which would end a wait that ignores the
  // deadline.
  const absl::Duration waiting = readers.longest_waiting();
  const absl::Duration longest_in_hang = readers.longest();
  const int cancels_waiting = paddock::pg::CancelsInFlight();
  const int deadlines = loads.deadline.load() - deadline_before;
  const uint64_t abandoned = pool.abandoned() - abandoned_before;
  const int64_t hang_reads = readers.reads() - reads_before_hang;
  const absl::Status resumed = pg.Resume();
  checks.Expect(resumed.ok(),
                absl::StrCat("resuming the server: ", resumed.ToString()));
  const absl::Duration read_bound = kLoadDeadline + kReadSlack;
  checks.Expect(waiting <= read_bound && longest_in_hang <= read_bound,
                absl::StrCat("every read returns within ",
                             absl::FormatDuration(read_bound),
                             " while the server hangs, got one of ",
                             absl::FormatDuration(Millis(longest_in_hang)),
                             " and one still waiting after ",
                             absl::FormatDuration(Millis(waiting))));
  checks.Expect(
      readers.failed() == 0 && readers.wrong() == 0,
      absl::StrCat("every read while the server hangs gets its member, got ",
                   readers.failed(), " failed and ", readers.wrong(),
                   " wrong"));
  checks.Expect(deadlines > 0,
                "the loads while the server hangs fail with DeadlineExceeded");
  checks.Expect(abandoned > 0,
                "statements sent to the hung server are given up");
  fmt::print(
      "6. server hung ({} processes stopped) for {}: {} reads, all answered, "
      "the longest in {}; {} loads failed with DeadlineExceeded, {} "
      "statements given up, {} cancel requests waiting for the postmaster\n",
      paused.ok() ? *paused : 0, absl::FormatDuration(kHang), hang_reads,
      absl::FormatDuration(Millis(longest_in_hang)), deadlines, abandoned,
      cancels_waiting);

  // 7. Resumed: fresh values again, and the waiting cancels are taken.
  const absl::Duration resumed_after = resumed.ok()
                                           ? rename_and_wait(2, kRenamedInHang)
                                           : absl::InfiniteDuration();
  const absl::Time resume_checked = absl::Now();
  while (paddock::pg::CancelsInFlight() > 0 &&
         absl::Now() - resume_checked < kRecoveryBound) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  readers.Join();
  checks.Expect(
      resumed_after < kRecoveryBound,
      absl::StrCat("the member renamed after the hang is served within ",
                   absl::FormatDuration(kRecoveryBound), " once resumed"));
  checks.Expect(paddock::pg::CancelsInFlight() == 0,
                "the cancel requests are taken once the server runs");
  checks.Expect(readers.longest() <= read_bound,
                absl::StrCat("every read returns within ",
                             absl::FormatDuration(read_bound), ", got ",
                             absl::FormatDuration(Millis(readers.longest()))));
  checks.Expect(
      readers.failed() == 0 && readers.wrong() == 0,
      absl::StrCat("every read gets its member, got ", readers.failed(),
                   " failed and ", readers.wrong(), " wrong"));
  fmt::print(
      "7. resumed: the new name of member 2 served after {}; {} cancel "
      "requests waiting; {} reads in all, the longest in {}\n",
      absl::FormatDuration(Millis(resumed_after)),
      paddock::pg::CancelsInFlight(), readers.reads(),
      absl::FormatDuration(Millis(readers.longest())));

  // 8. Stop the server by its pid.
  const pid_t pid = pg.pid();
  const absl::Status stopped = pg.Stop();
  checks.Expect(stopped.ok() && pg.pid() == -1,
                absl::StrCat("stopping the server: ", stopped.ToString()));
  fmt::print("8. server (pid {}) stopped\n", pid);
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
        "DeadlineExceeded, stale values through a crash and a hang, every "
        "read within {} while it hung, recovered after both\n",
        absl::FormatDuration(kLoadDeadline));
  }
  return checks.failed == 0 ? 0 : 1;
}
