// File: examples/postgres/connection_pool.h
// -----------------------------------------------------------------------------
// `ConnectionPool`: at most N libpq connections to one database, each lent to
// one thread at a time (libpq forbids two threads on one `PGconn`), with the
// statements prepared on every new connection. A connection found broken --
// by a statement, or on lending an idle one the server has closed -- is
// closed, and the next `Acquire` opens a new one: once the server is back,
// the pool has reconnected by itself.
//
// Every wait on the server has the caller's deadline: connecting (driven by
// PQconnectPoll, which ignores the conninfo's connect_timeout), preparing,
// and each statement (sent with PQsend*, its result awaited with poll() on
// PQsocket). A hung server -- one that accepts connections and bytes but
// never answers, as a frozen machine does, and that never enforces its own
// statement_timeout -- then costs a caller its deadline, not forever. A
// statement given up at its deadline is cancelled and its connection closed
// (see `CancelsInFlight`). Not bounded: resolving a host name (libpq does it
// inside PQconnectStart; give `hostaddr` to avoid it).
//
//   ConnectionPool pool(conninfo, 4, [](PGconn* c, absl::Time deadline) {
//     return PrepareStatement(c, "member_by_id",
//                             "SELECT name FROM member WHERE id = $1",
//                             deadline);
//   });
//   const absl::Time deadline = absl::Now() + absl::Seconds(2);
//   absl::StatusOr<ConnectionPool::Lease> conn = pool.Acquire(deadline);
//   absl::StatusOr<Result> rows =
//       conn->ExecPrepared("member_by_id", {"42"}, deadline);
//
// A small pool of the kind a service writes for itself; not part of paddock.

#ifndef PADDOCK_EXAMPLES_POSTGRES_CONNECTION_POOL_H_
#define PADDOCK_EXAMPLES_POSTGRES_CONNECTION_POOL_H_

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace paddock::pg {

// A statement's result, cleared when dropped.
struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// PrepareStatement()
//
// Prepares `sql` as statement `name` on `conn`; the error per pg_status.h.
// Blocks until the server answers or `deadline` passes (then
// DeadlineExceeded, the cancel requested, and `conn` left mid-statement:
// PQtransactionStatus says PQTRANS_ACTIVE and it must be closed).
absl::Status PrepareStatement(PGconn* conn, const char* name, const char* sql,
                              absl::Time deadline);

// CancelsInFlight()
//
// Returns how many cancel requests, for statements given up at their
// deadline, are still waiting for their server's postmaster to take them,
// process-wide. PQcancel blocks until it does, which a hung server never
// does, so each runs on a thread of its own and the caller does not wait for
// it; once `kMaxCancelsInFlight` wait, further cancels are skipped (the
// connection is closed all the same, and the server's statement_timeout ends
// the statement once it runs again). Thread-safe.
inline constexpr int kMaxCancelsInFlight = 16;
int CancelsInFlight();

class ConnectionPool {
 public:
  // Runs on every new connection before it is lent (e.g. PrepareStatement),
  // with the deadline of the `Acquire` that opened it (InfiniteFuture from
  // `Fill`); an error closes the connection and fails that `Acquire`. The
  // connection is in libpq's non-blocking mode (PQsetnonblocking), which
  // PQexec and PQprepare ignore. The pool drops the server's notices; `Setup`
  // may install a notice processor to log them.
  using Setup = std::function<absl::Status(PGconn*, absl::Time deadline)>;

  // Opens nothing yet. Throws std::invalid_argument if `size` < 1.
  ConnectionPool(std::string conninfo, int size, Setup setup);

  // Closes the connections. Every lease must have been returned.
  ~ConnectionPool();

  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // One lent connection; returns it to the pool when destroyed, or closes it
  // if it is broken, was left inside a transaction, or is still running a
  // statement given up at its deadline. Move-only. Use it from one thread at
  // a time.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();

    PGconn* get() const { return conn_; }

    // Lease::ExecPrepared()
    //
    // Runs the prepared statement `name` with text parameters (nullptr is SQL
    // NULL) and returns its result, or the error mapped per pg_status.h.
    // Blocks until the server has answered or `deadline` has passed; then
    // DeadlineExceeded (pg_status.h's DeadlineStatus), the statement's cancel
    // requested without waiting for it, and the connection closed when the
    // lease goes back.
    absl::StatusOr<Result> ExecPrepared(
        const char* name, std::initializer_list<const char*> params,
        absl::Time deadline);

    // Lease::Exec()
    //
    // Runs `sql` (no parameters; several statements allowed) and returns the
    // last result, or the error mapped per pg_status.h. Blocks until
    // `deadline`, as ExecPrepared does.
    absl::StatusOr<Result> Exec(const char* sql, absl::Time deadline);

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, PGconn* conn) : pool_(pool), conn_(conn) {}
    absl::StatusOr<Result> Await(absl::Time start, absl::Time deadline);
    void Return();

    ConnectionPool* pool_ = nullptr;
    PGconn* conn_ = nullptr;
  };

  // ConnectionPool::Acquire()
  //
  // Lends an idle connection (closing idle ones the server has closed), else
  // opens a new one if fewer than `size` are open, else waits for one to come
  // back until `deadline` (DeadlineExceeded). Opening (connecting, then
  // `Setup`) blocks this caller only, without a lock held, and until
  // `deadline` at most (DeadlineExceeded: the server did not answer); a
  // failure is Unavailable (the server is down, or refuses connections) and
  // the next call tries again. Thread-safe.
  absl::StatusOr<Lease> Acquire(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // ConnectionPool::Fill()
  //
  // Opens connections until `size` are open, as HikariCP does at start.
  // Returns the first error. Blocks until each is open or refused, without
  // a deadline. Thread-safe.
  absl::Status Fill() ABSL_LOCKS_EXCLUDED(mu_);

  int size() const { return size_; }

  // The connections lent now.
  int busy() const ABSL_LOCKS_EXCLUDED(mu_);

  // The connections opened since construction, reconnections included.
  uint64_t opened() const ABSL_LOCKS_EXCLUDED(mu_);

  // The statements given up at their deadline since construction, each one's
  // cancel requested and its connection closed.
  uint64_t abandoned() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::StatusOr<PGconn*> Open(absl::Time deadline) const;
  void Return(PGconn* conn) ABSL_LOCKS_EXCLUDED(mu_);
  bool CanLend() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < size_;
  }

  const std::string conninfo_;
  const int size_;
  const Setup setup_;

  mutable absl::Mutex mu_;
  std::vector<PGconn*> idle_ ABSL_GUARDED_BY(mu_);
  // Idle, lent, and being opened.
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  int lent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t abandoned_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::pg

#endif  // PADDOCK_EXAMPLES_POSTGRES_CONNECTION_POOL_H_
