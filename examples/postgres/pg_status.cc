// libpq outcomes as absl::Status.

#include "pg_status.h"

#include <libpq-fe.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace paddock::pg {

absl::StatusCode CodeForSqlState(absl::string_view sqlstate) {
  if (sqlstate.empty()) return absl::StatusCode::kUnavailable;
  if (sqlstate == "57014") return absl::StatusCode::kDeadlineExceeded;
  if (absl::StartsWith(sqlstate, "08") || sqlstate == "57P01" ||
      sqlstate == "57P02" || sqlstate == "57P03") {
    return absl::StatusCode::kUnavailable;
  }
  if (sqlstate == "40001" || sqlstate == "40P01") {
    return absl::StatusCode::kAborted;
  }
  if (absl::StartsWith(sqlstate, "53")) {
    return absl::StatusCode::kResourceExhausted;
  }
  return absl::StatusCode::kInternal;
}

bool ConnectionLost(const PGconn* conn) {
  return conn == nullptr || PQstatus(conn) == CONNECTION_BAD;
}

absl::Status StatusFromResult(const PGconn* conn, const PGresult* result) {
  const ExecStatusType status =
      result == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(result);
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
    return absl::OkStatus();
  }
  // PQresultErrorField is null for a null result and for libpq's own errors;
  // then the connection's message says what went wrong.
  const char* sqlstate = result == nullptr
                             ? nullptr
                             : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary =
      result == nullptr ? nullptr
                        : PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const absl::string_view state = sqlstate != nullptr ? sqlstate : "";
  std::string message = primary != nullptr ? std::string(primary)
                        : conn != nullptr  ? std::string(PQerrorMessage(conn))
                                           : std::string("no connection");
  absl::StripTrailingAsciiWhitespace(&message);
  const absl::StatusCode code = ConnectionLost(conn)
                                    ? absl::StatusCode::kUnavailable
                                    : CodeForSqlState(state);
  return absl::Status(
      code, absl::StrCat("postgres ", state.empty() ? "(libpq)" : state, ": ",
                         message));
}

absl::Status StatusFromConnect(const PGconn* conn) {
  if (conn != nullptr && PQstatus(conn) == CONNECTION_OK) {
    return absl::OkStatus();
  }
  std::string message =
      conn != nullptr ? PQerrorMessage(conn) : "out of memory";
  absl::StripTrailingAsciiWhitespace(&message);
  return absl::UnavailableError(absl::StrCat("postgres connect: ", message));
}

absl::Status DeadlineStatus(absl::string_view what, absl::Duration waited) {
  return absl::DeadlineExceededError(absl::StrCat(
      "postgres (deadline): no answer to the ", what, " within ",
      absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(1)))));
}

}  // namespace paddock::pg
