// File: examples/postgres/pg_status.h
// -----------------------------------------------------------------------------
// What a libpq outcome means as an `absl::Status`, the loader's error type.
//
// A paddock cache treats every loader error alike: it hands it to every
// caller of that load, remembers it for `Options::error_ttl` (so a failing
// database is asked once per error_ttl, not once per request), and, while
// the policy allows stale-if-error (`SoftTtl::stale_if_error`), serves the
// value it had instead. The code says what happened to the *callers* (a
// 404, a 504, a 503) and to the connection pool (drop the connection or
// keep it). The mapping:
//
//   outcome                                      code                 pool
//   no row where the caller needs one            NotFound (the        keeps
//     (decided by the caller, not here)          caller's)
//   query_canceled 57014: statement_timeout      DeadlineExceeded     keeps
//     ran out, or pg_cancel_backend
//   no answer by the caller's own deadline to    DeadlineExceeded     drops;
//     the connect or the statement (a hung                            cancels
//     server: statement_timeout runs on the                           the
//     server and cannot end it): DeadlineStatus                       statement
//   connection lost or refused: libpq reports    Unavailable          drops;
//     CONNECTION_BAD, or SQLSTATE class 08,                           reopens
//     57P01..57P03 (admin/crash shutdown,                             on a
//     cannot connect now)                                             later use
//   serialization failure 40001, deadlock 40P01  Aborted (retry)      keeps
//   insufficient resources, class 53 (e.g.       ResourceExhausted    keeps
//     53300 too_many_connections)
//   anything else (a bug: syntax, a missing      Internal             keeps
//     table, a constraint)
//
// Every message carries the SQLSTATE and the server's primary message:
// `postgres 57014: canceling statement due to statement timeout`; the
// client's own deadline names the wait it ended instead:
// `postgres (deadline): no answer to the statement within 2s`.

#ifndef PADDOCK_EXAMPLES_POSTGRES_PG_STATUS_H_
#define PADDOCK_EXAMPLES_POSTGRES_PG_STATUS_H_

#include <libpq-fe.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace paddock::pg {

// Returns the code for SQLSTATE `sqlstate` (five characters) per the table
// above; kUnavailable for an empty one (libpq's own errors, which are about
// the connection).
absl::StatusCode CodeForSqlState(absl::string_view sqlstate);

// StatusFromResult()
//
// Returns OK if `result` reports a successful command (PGRES_COMMAND_OK,
// PGRES_TUPLES_OK), else the error mapped per the table above. `result` may
// be null, which libpq returns when it could not send the statement; `conn`
// then supplies the message. Unavailable whenever `conn` is broken, whatever
// the SQLSTATE.
absl::Status StatusFromResult(const PGconn* conn, const PGresult* result);

// StatusFromConnect()
//
// Returns OK if `conn` (from PQconnectdb, or from PQconnectStart once
// PQconnectPoll is done) is connected, else Unavailable with libpq's message:
// the server is down, starting, or refuses connections.
absl::Status StatusFromConnect(const PGconn* conn);

// DeadlineStatus()
//
// Returns DeadlineExceeded for `what` (e.g. "connect", "statement") that got
// no answer from the server by the caller's deadline, `waited` after it
// began. The server may be hung (a frozen machine, a lost network): only the
// client can end the wait, since statement_timeout runs on the server.
absl::Status DeadlineStatus(absl::string_view what, absl::Duration waited);

// Whether a connection whose statement failed can no longer be used, so a
// pool must close it rather than hand it out again.
bool ConnectionLost(const PGconn* conn);

}  // namespace paddock::pg

#endif  // PADDOCK_EXAMPLES_POSTGRES_PG_STATUS_H_
