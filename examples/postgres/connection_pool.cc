// ConnectionPool.

#include "connection_pool.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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

// Cancel requests sent and not yet taken by their postmaster (CancelsInFlight).
std::atomic<int> cancels_in_flight{0};

// Requests the cancel of the statement `conn` runs, on a thread of its own:
// PQcancel opens a connection to the postmaster and blocks until the
// postmaster has read the request and closed it, which a hung one never
// does. The request needs nothing of `conn` once PQgetCancel has copied its
// address and key, so `conn` may be closed at once. Skipped beyond
// kMaxCancelsInFlight.
void RequestCancel(PGconn* conn) {
  if (cancels_in_flight.fetch_add(1) >= kMaxCancelsInFlight) {
    cancels_in_flight.fetch_sub(1);
    return;
  }
  PGcancel* cancel = PQgetCancel(conn);
  if (cancel == nullptr) {
    cancels_in_flight.fetch_sub(1);
    return;
  }
  try {
    std::thread([cancel] {
      char error[256];
      // Best effort: the server's statement_timeout is the backstop.
      PQcancel(cancel, error, sizeof(error));
      PQfreeCancel(cancel);
      cancels_in_flight.fetch_sub(1);
    }).detach();
  } catch (const std::system_error&) {
    PQfreeCancel(cancel);
    cancels_in_flight.fetch_sub(1);
  }
}

enum class Wait { kReady, kTimedOut, kFailed };

// Waits until `conn`'s socket is ready for `events` (an error or a hang-up
// counts: libpq's next call reports it) or `deadline` has passed; kFailed
// with errno set if poll() fails.
Wait WaitForSocket(const PGconn* conn, short events, absl::Time deadline) {
  pollfd fd = {PQsocket(conn), events, 0};
  if (fd.fd < 0) return Wait::kReady;  // No socket: libpq's next call fails.
  for (;;) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      timeout_ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
          INT_MAX));
    }
    const int ready = ::poll(&fd, 1, timeout_ms);
    if (ready > 0) return Wait::kReady;
    if (ready == 0) {
      if (absl::Now() >= deadline) return Wait::kTimedOut;
    } else if (errno != EINTR) {
      return Wait::kFailed;
    }
  }
}

// Drives PQconnectPoll on `conn`, from PQconnectStart at `start`, until it is
// connected, has failed (Unavailable), or `deadline` has passed
// (DeadlineExceeded).
absl::Status Connect(PGconn* conn, absl::Time start, absl::Time deadline) {
  if (conn == nullptr || PQstatus(conn) == CONNECTION_BAD) {
    return StatusFromConnect(conn);
  }
  // Right after PQconnectStart, as if PQconnectPoll had said WRITING.
  PostgresPollingStatusType polled = PGRES_POLLING_WRITING;
  for (;;) {
    switch (polled) {
      case PGRES_POLLING_OK:
        return absl::OkStatus();
      case PGRES_POLLING_FAILED:
        return StatusFromConnect(conn);
      case PGRES_POLLING_READING:
      case PGRES_POLLING_WRITING:
        switch (WaitForSocket(
            conn, polled == PGRES_POLLING_READING ? POLLIN : POLLOUT,
            deadline)) {
          case Wait::kReady:
            break;
          case Wait::kTimedOut:
            return DeadlineStatus("connect", absl::Now() - start);
          case Wait::kFailed:
            return absl::ErrnoToStatus(errno, "postgres connect: poll");
        }
        break;
      default:  // PGRES_POLLING_ACTIVE, unused since PostgreSQL 7.
        break;
    }
    polled = PQconnectPoll(conn);
  }
}

// Sends what PQsend* queued on `conn` at `start` and collects its results as
// PQexec does, without waiting past `deadline`. Returns the last result, or
// the error per pg_status.h. Past the deadline: DeadlineExceeded, the
// statement's cancel requested, `*abandoned` set, and `conn` left
// mid-statement.
absl::StatusOr<Result> AwaitResult(PGconn* conn, absl::Time start,
                                   absl::Time deadline, bool* abandoned) {
  auto wait = [&](short events) -> absl::Status {
    switch (WaitForSocket(conn, events, deadline)) {
      case Wait::kReady:
        return absl::OkStatus();
      case Wait::kTimedOut:
        *abandoned = true;
        RequestCancel(conn);
        return DeadlineStatus("statement", absl::Now() - start);
      case Wait::kFailed:
        break;
    }
    return absl::ErrnoToStatus(errno, "postgres: poll");
  };
  // In non-blocking mode the request may not all have gone out yet.
  for (;;) {
    const int flushed = PQflush(conn);
    if (flushed == 0) break;
    if (flushed < 0) return StatusFromResult(conn, nullptr);
    if (absl::Status s = wait(POLLIN | POLLOUT); !s.ok()) return s;
    if (PQconsumeInput(conn) == 0) return StatusFromResult(conn, nullptr);
  }
  Result last;
  for (;;) {
    while (PQisBusy(conn)) {
      if (absl::Status s = wait(POLLIN); !s.ok()) return s;
      if (PQconsumeInput(conn) == 0) return StatusFromResult(conn, nullptr);
    }
    PGresult* result = PQgetResult(conn);
    if (result == nullptr) break;
    last.reset(result);
    // As PQexec: a COPY, or a lost connection, ends the collection.
    const ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_COPY_IN || status == PGRES_COPY_OUT ||
        status == PGRES_COPY_BOTH || PQstatus(conn) == CONNECTION_BAD) {
      break;
    }
  }
  if (absl::Status s = StatusFromResult(conn, last.get()); !s.ok()) return s;
  return last;
}

}  // namespace

absl::Status PrepareStatement(PGconn* conn, const char* name, const char* sql,
                              absl::Time deadline) {
  const absl::Time start = absl::Now();
  if (PQsendPrepare(conn, name, sql, 0, nullptr) != 1) {
    return StatusFromResult(conn, nullptr);
  }
  bool abandoned = false;
  return AwaitResult(conn, start, deadline, &abandoned).status();
}

int CancelsInFlight() { return cancels_in_flight.load(); }

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

absl::StatusOr<PGconn*> ConnectionPool::Open(absl::Time deadline) const {
  const absl::Time start = absl::Now();
  PGconn* conn = PQconnectStart(conninfo_.c_str());
  absl::Status status = Connect(conn, start, deadline);
  // Non-blocking, so that neither sending a statement nor PQfinish's goodbye
  // can block on a server that stopped reading.
  if (status.ok() && PQsetnonblocking(conn, 1) != 0) {
    status = StatusFromResult(conn, nullptr);
  }
  // libpq prints the server's notices (e.g. "terminating connection due to
  // immediate shutdown command") on stderr; the statuses carry what matters.
  if (status.ok()) PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  if (status.ok() && setup_) status = setup_(conn, deadline);
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
    absl::StatusOr<PGconn*> conn = Open(deadline);
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
    absl::StatusOr<PGconn*> conn = Open(absl::InfiniteFuture());
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
  // A broken connection, one left inside a transaction, or one still running
  // a statement given up at its deadline (PQTRANS_ACTIVE) is of no use to the
  // next borrower.
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

uint64_t ConnectionPool::abandoned() const {
  absl::MutexLock lock(&mu_);
  return abandoned_;
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
    const char* name, std::initializer_list<const char*> params,
    absl::Time deadline) {
  const absl::Time start = absl::Now();
  const std::vector<const char*> values(params);
  if (PQsendQueryPrepared(conn_, name, static_cast<int>(values.size()),
                          values.data(), nullptr, nullptr, 0) != 1) {
    return StatusFromResult(conn_, nullptr);
  }
  return Await(start, deadline);
}

absl::StatusOr<Result> ConnectionPool::Lease::Exec(const char* sql,
                                                   absl::Time deadline) {
  const absl::Time start = absl::Now();
  if (PQsendQuery(conn_, sql) != 1) return StatusFromResult(conn_, nullptr);
  return Await(start, deadline);
}

absl::StatusOr<Result> ConnectionPool::Lease::Await(absl::Time start,
                                                    absl::Time deadline) {
  bool abandoned = false;
  absl::StatusOr<Result> result =
      AwaitResult(conn_, start, deadline, &abandoned);
  if (abandoned) {
    // Return() closes the connection: it is still running the statement.
    absl::MutexLock lock(&pool_->mu_);
    ++pool_->abandoned_;
  }
  return result;
}

}  // namespace paddock::pg
