// ConnectionPool.

#include "connection_pool.h"

#include <libpq-fe.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pg_status.h"

namespace paddock::pg {
namespace {

// Reads what the server sent an idle connection without blocking (libpq's
// sockets are non-blocking): a server that shut down has sent a FATAL and
// closed it, which leaves the connection CONNECTION_BAD.
bool StillConnected(PGconn* conn) {
  return PQconsumeInput(conn) == 1 && PQstatus(conn) == CONNECTION_OK;
}

void IgnoreNotice(void*, const char*) {}

}  // namespace

absl::Status PrepareStatement(PGconn* conn, const char* name, const char* sql) {
  const Result result(PQprepare(conn, name, sql, 0, nullptr));
  return StatusFromResult(conn, result.get());
}

ConnectionPool::ConnectionPool(std::string conninfo, int size, Setup setup)
    : conninfo_(std::move(conninfo)), size_(size), setup_(std::move(setup)) {
  if (size < 1) {
    throw std::invalid_argument(absl::StrCat(
        "paddock::pg::ConnectionPool: size must be >= 1, got ", size));
  }
}

ConnectionPool::~ConnectionPool() {
  absl::MutexLock lock(&mu_);
  for (PGconn* conn : idle_) PQfinish(conn);
  idle_.clear();
}

absl::StatusOr<PGconn*> ConnectionPool::Open() const {
  PGconn* conn = PQconnectdb(conninfo_.c_str());
  absl::Status status = StatusFromConnect(conn);
  // libpq prints the server's notices (e.g. "terminating connection due to
  // immediate shutdown command") on stderr; the statuses carry what matters.
  if (status.ok()) PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  if (status.ok() && setup_) status = setup_(conn);
  if (!status.ok()) {
    PQfinish(conn);
    return status;
  }
  return conn;
}

absl::StatusOr<ConnectionPool::Lease> ConnectionPool::Acquire(
    absl::Time deadline) {
  for (;;) {
    PGconn* idle = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithDeadline(
              absl::Condition(this, &ConnectionPool::CanLend), deadline)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "paddock::pg::ConnectionPool: all ", size_, " connections busy"));
      }
      ++lent_;
      if (!idle_.empty()) {
        idle = idle_.back();
        idle_.pop_back();
      } else {
        ++open_;  // Reserved: opened below, without the lock.
      }
    }
    if (idle != nullptr) {
      if (StillConnected(idle)) return Lease(this, idle);
      // The server closed it while it sat idle (a restart): drop it.
      PQfinish(idle);
      absl::MutexLock lock(&mu_);
      --lent_;
      --open_;
      continue;
    }
    absl::StatusOr<PGconn*> conn = Open();
    absl::MutexLock lock(&mu_);
    if (!conn.ok()) {
      --open_;
      --lent_;
      return conn.status();
    }
    ++opened_;
    return Lease(this, *conn);
  }
}

absl::Status ConnectionPool::Fill() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (open_ >= size_) return absl::OkStatus();
      ++open_;
    }
    absl::StatusOr<PGconn*> conn = Open();
    absl::MutexLock lock(&mu_);
    if (!conn.ok()) {
      --open_;
      return conn.status();
    }
    ++opened_;
    idle_.push_back(*conn);
  }
}

void ConnectionPool::Return(PGconn* conn) {
  // A broken connection, or one left inside a transaction, is of no use to
  // the next borrower.
  const bool keep = PQstatus(conn) == CONNECTION_OK &&
                    PQtransactionStatus(conn) == PQTRANS_IDLE;
  if (!keep) PQfinish(conn);
  absl::MutexLock lock(&mu_);
  --lent_;
  if (keep) {
    idle_.push_back(conn);
  } else {
    --open_;
  }
}

int ConnectionPool::busy() const {
  absl::MutexLock lock(&mu_);
  return lent_;
}

uint64_t ConnectionPool::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      conn_(std::exchange(other.conn_, nullptr)) {}

ConnectionPool::Lease& ConnectionPool::Lease::operator=(
    Lease&& other) noexcept {
  if (this != &other) {
    Return();
    pool_ = std::exchange(other.pool_, nullptr);
    conn_ = std::exchange(other.conn_, nullptr);
  }
  return *this;
}

ConnectionPool::Lease::~Lease() { Return(); }

void ConnectionPool::Lease::Return() {
  if (pool_ != nullptr && conn_ != nullptr) pool_->Return(conn_);
  pool_ = nullptr;
  conn_ = nullptr;
}

absl::StatusOr<Result> ConnectionPool::Lease::ExecPrepared(
    const char* name, std::initializer_list<const char*> params) {
  const std::vector<const char*> values(params);
  Result result(PQexecPrepared(conn_, name, static_cast<int>(values.size()),
                               values.data(), nullptr, nullptr, 0));
  if (absl::Status s = StatusFromResult(conn_, result.get()); !s.ok()) {
    return s;
  }
  return result;
}

absl::StatusOr<Result> ConnectionPool::Lease::Exec(const char* sql) {
  Result result(PQexec(conn_, sql));
  if (absl::Status s = StatusFromResult(conn_, result.get()); !s.ok()) {
    return s;
  }
  return result;
}

}  // namespace paddock::pg
