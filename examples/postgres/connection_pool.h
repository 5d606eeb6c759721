// File: examples/postgres/connection_pool.h
// -----------------------------------------------------------------------------
// `ConnectionPool`: at most N libpq connections to one database, each lent to
// one thread at a time (libpq forbids two threads on one `PGconn`), with the
// statements prepared on every new connection. A connection found broken --
// by a statement, or on lending an idle one the server has closed -- is
// closed, and the next `Acquire` opens a new one: once the server is back,
// the pool has reconnected by itself.
//
//   ConnectionPool pool(conninfo, 4, [](PGconn* c) {
//     return PrepareStatement(c, "member_by_id",
//                             "SELECT name FROM member WHERE id = $1");
//   });
//   absl::StatusOr<ConnectionPool::Lease> conn = pool.Acquire(deadline);
//   absl::StatusOr<Result> rows = conn->ExecPrepared("member_by_id", {"42"});
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

// Prepares `sql` as statement `name` on `conn`; the error per pg_status.h.
absl::Status PrepareStatement(PGconn* conn, const char* name, const char* sql);

class ConnectionPool {
 public:
  // Runs on every new connection before it is lent (e.g. PrepareStatement);
  // an error closes the connection and fails that `Acquire`. The pool drops
  // the server's notices; `Setup` may install a notice processor to log them.
  using Setup = std::function<absl::Status(PGconn*)>;

  // Opens nothing yet. Throws std::invalid_argument if `size` < 1.
  ConnectionPool(std::string conninfo, int size, Setup setup);

  // Closes the connections. Every lease must have been returned.
  ~ConnectionPool();

  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // One lent connection; returns it to the pool when destroyed, or closes it
  // if it is broken or was left inside a transaction. Move-only. Use it from
  // one thread at a time.
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
    absl::StatusOr<Result> ExecPrepared(
        const char* name, std::initializer_list<const char*> params);

    // Lease::Exec()
    //
    // Runs `sql` (no parameters; several statements allowed) and returns the
    // last result, or the error mapped per pg_status.h.
    absl::StatusOr<Result> Exec(const char* sql);

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, PGconn* conn) : pool_(pool), conn_(conn) {}
    void Return();

    ConnectionPool* pool_ = nullptr;
    PGconn* conn_ = nullptr;
  };

  // ConnectionPool::Acquire()
  //
  // Lends an idle connection (closing idle ones the server has closed), else
  // opens a new one if fewer than `size` are open, else waits for one to come
  // back until `deadline` (DeadlineExceeded). Opening blocks this caller only,
  // without a lock held; a failure is Unavailable (the server is down, or
  // refuses connections) and the next call tries again. Thread-safe.
  absl::StatusOr<Lease> Acquire(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // ConnectionPool::Fill()
  //
  // Opens connections until `size` are open, as HikariCP does at start.
  // Returns the first error. Thread-safe.
  absl::Status Fill() ABSL_LOCKS_EXCLUDED(mu_);

  int size() const { return size_; }

  // The connections lent now.
  int busy() const ABSL_LOCKS_EXCLUDED(mu_);

  // The connections opened since construction, reconnections included.
  uint64_t opened() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::StatusOr<PGconn*> Open() const;
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
};

}  // namespace paddock::pg

#endif  // PADDOCK_EXAMPLES_POSTGRES_CONNECTION_POOL_H_
