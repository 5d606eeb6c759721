// File: examples/postgres/throwaway_postgres.h
// -----------------------------------------------------------------------------
// `ThrowawayPostgres`: a private PostgreSQL server for a test or a benchmark.
// Its cluster lives in a new temporary directory, it listens only on a unix
// socket in that directory (no TCP port), and it is stopped by its pid and
// deleted with the object. Never a system service.
//
// The example's ctest (postgres_loader.cpp) and the replay's
// `--backend=postgres` both start their server with it. Nothing here is needed
// to put a paddock cache in front of a real database.
//
//   absl::StatusOr<std::unique_ptr<ThrowawayPostgres>> pg =
//       ThrowawayPostgres::Start();
//   PGconn* conn = PQconnectdb((*pg)->conninfo().c_str());

#ifndef PADDOCK_EXAMPLES_POSTGRES_THROWAWAY_POSTGRES_H_
#define PADDOCK_EXAMPLES_POSTGRES_THROWAWAY_POSTGRES_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paddock::pg {

struct ThrowawayPostgresOptions {
  // Pins the server's processes to this CPU; -1 leaves them unpinned.
  int cpu = -1;
  // Runs them this much nicer than the caller (lower priority), so that a
  // busy server does not starve what shares its CPU; 0 leaves it.
  int nice = 0;
  // The server's `max_connections`.
  int max_connections = 100;
  // More server settings, each "name=value" (passed as `-c name=value`).
  std::vector<std::string> settings;
};

// ThrowawayPostgres
//
// Not thread-safe: one thread starts, kills, pauses, restarts and stops the
// server (connections to it may be used from any thread). The server is a child
// of the process and is told to quit if the thread that started it exits
// (PR_SET_PDEATHSIG), so a crashed test leaves no server behind -- unless
// it crashed while the server was paused (`Pause()`).
class ThrowawayPostgres {
 public:
  // ThrowawayPostgres::FindBinDir()
  //
  // Returns the directory of the server's programs (`initdb`, `postgres`):
  // `$PADDOCK_PG_BINDIR` if set, else the newest `/usr/lib/postgresql/*/bin`
  // (Debian's layout), else the `PATH` entry holding `initdb`.
  // `absl::NotFoundError` if there is none (the server is not installed).
  static absl::StatusOr<std::string> FindBinDir();

  // ThrowawayPostgres::Start()
  //
  // Creates a cluster with `initdb` in a new directory under `$TMPDIR` (or
  // /tmp) and starts it with `fsync=off`, `listen_addresses=''` and the
  // socket in that directory; returns once it accepts connections (at most
  // 60 s). `initdb` refuses to run as root, so a root process runs both
  // programs as the `postgres` user and gives it the directory. Errors:
  // NotFound (no server programs, or root without a `postgres` user),
  // Internal with the tail of the server's log if it does not come up.
  static absl::StatusOr<std::unique_ptr<ThrowawayPostgres>> Start(
      ThrowawayPostgresOptions options = {});

  // Stops the server if it runs, then deletes the directory.
  ~ThrowawayPostgres();

  ThrowawayPostgres(const ThrowawayPostgres&) = delete;
  ThrowawayPostgres& operator=(const ThrowawayPostgres&) = delete;

  // The libpq connection string: `host=DIR dbname=postgres user=postgres`.
  const std::string& conninfo() const { return conninfo_; }

  // The postmaster's pid while the server runs, else -1.
  pid_t pid() const { return pid_; }

  // The directory holding the cluster (`data/`), the socket and the log.
  const std::string& dir() const { return dir_; }

  // ThrowawayPostgres::Stop()
  //
  // Fast shutdown: SIGINT to the postmaster's pid, then waits for it to exit
  // (SIGKILL after 60 s). Open connections are closed. OK if not running.
  // Resumes a paused server first.
  absl::Status Stop();

  // ThrowawayPostgres::Kill()
  //
  // Immediate shutdown, what a crash looks like to clients: SIGQUIT to the
  // postmaster, whose processes then exit at once without a checkpoint;
  // waits for it to exit. The next `Restart()` runs crash recovery. Resumes
  // a paused server first.
  absl::Status Kill();

  // ThrowawayPostgres::Pause()
  //
  // A hung server, what a frozen machine looks like to clients: SIGSTOP to
  // the postmaster, then to each of its child processes (every backend, the
  // checkpointer, ...; found in /proc); returns once all are stopped, with
  // how many there are, postmaster included. Connections stay open, and the
  // kernel still takes new connections and the bytes sent, but nothing
  // answers -- not a statement, not a connect, not a cancel request -- and
  // statement_timeout does not fire, until `Resume()`. FailedPrecondition if
  // the server is not running or already paused; Internal if a process does
  // not stop within 5 s. If this process dies while the server is paused,
  // the server stays stopped (the signal it is then sent waits behind
  // SIGSTOP): `kill -CONT` its processes.
  absl::StatusOr<int> Pause();

  // ThrowawayPostgres::Resume()
  //
  // SIGCONT to the processes `Pause()` stopped, the postmaster last; what
  // they were sent meanwhile then happens. OK if not paused.
  absl::Status Resume();

  bool paused() const { return !paused_.empty(); }

  // ThrowawayPostgres::Restart()
  //
  // Starts the server again on the same cluster and socket; returns once it
  // accepts connections. FailedPrecondition if it is running.
  absl::Status Restart();

 private:
  ThrowawayPostgres(std::string bin_dir, std::string dir,
                    ThrowawayPostgresOptions options);

  absl::Status InitDb();
  absl::Status Launch();
  absl::Status WaitForExit(int signal);
  std::string LogTail() const;

  const std::string bin_dir_;
  const std::string dir_;
  const ThrowawayPostgresOptions options_;
  const std::string conninfo_;
  // The user the server runs as when this process is root; -1 otherwise.
  uid_t run_uid_ = static_cast<uid_t>(-1);
  gid_t run_gid_ = static_cast<gid_t>(-1);
  pid_t pid_ = -1;
  // What Pause() stopped, the postmaster first; empty unless paused.
  std::vector<pid_t> paused_;
};

}  // namespace paddock::pg

#endif  // PADDOCK_EXAMPLES_POSTGRES_THROWAWAY_POSTGRES_H_
