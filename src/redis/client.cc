// RedisClient.

#include "redis/client.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "paddock/clock.h"

namespace paddock::internal {

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(
    RedisClientConfig config) {
  std::unique_ptr<RedisClient> client(new RedisClient(std::move(config)));
  const RedisClientConfig& c = client->config_;
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::Open(c.endpoint, c.connect_timeout);
  if (!connection.ok()) return connection.status();
  for (int i = 0; i < kScriptCount; ++i) {
    absl::Status loaded = client->LoadScript(
        **connection, static_cast<Script>(i), MonotonicNow() + c.io_timeout);
    if (!loaded.ok()) return loaded;
  }
  // The first connection becomes the pool's first idle one.
  client->pool_.Adopt(*std::move(connection));
  return client;
}

std::unique_ptr<RedisClient> RedisClient::Unconnected(RedisClientConfig config,
                                                      const RedisClient& like) {
  std::unique_ptr<RedisClient> client(new RedisClient(std::move(config)));
  client->shas_ = like.shas_;
  return client;
}

RedisClient::RedisClient(RedisClientConfig config)
    : config_(std::move(config)),
      pool_(config_.endpoint, config_.pool_size, config_.connect_timeout),
      breaker_(config_.breaker_failures, config_.breaker_cooldown,
               SystemClock::Get()) {}

absl::Status RedisClient::LoadScript(RedisConnection& connection, Script script,
                                     absl::Time deadline) {
  const std::string& source = ScriptSource(script);
  const std::string_view args[] = {"SCRIPT", "LOAD", source};
  absl::StatusOr<RedisReplyPtr> reply = connection.Command(args, deadline);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_ERROR) {
    // NOAUTH (a password is needed) and NOPERM (the ACL forbids SCRIPT
    // LOAD) keep their codes: Connect's caller is to fix its options.
    return absl::Status(
        ErrorReplyCode(r),
        absl::StrCat("paddock::RedisTier: ", config_.endpoint.address.text,
                     ": SCRIPT LOAD of the ", ScriptName(script),
                     " script failed: ", absl::string_view(r.str, r.len)));
  }
  if (r.type != REDIS_REPLY_STRING || r.len != 40) {
    CountBadReply();
    return absl::DataLossError(
        absl::StrCat("paddock::RedisTier: ", config_.endpoint.address.text,
                     ": SCRIPT LOAD did not return a SHA1 for the ",
                     ScriptName(script), " script"));
  }
  std::string sha(r.str, r.len);
  std::string& known = shas_[static_cast<int>(script)];
  if (known.empty()) {
    known = std::move(sha);  // Only during Connect, before sharing.
  } else if (known != sha) {
    CountBadReply();
    return absl::DataLossError(absl::StrCat(
        "paddock::RedisTier: ", config_.endpoint.address.text, ": the ",
        ScriptName(script), " script loaded under another SHA1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisReplyPtr> RedisClient::EvalOn(
    RedisConnection& connection, Script script,
    absl::Span<const std::string_view> keys,
    absl::Span<const std::string_view> args, bool asking, absl::Time deadline) {
  const std::string numkeys = absl::StrCat(keys.size());
  absl::InlinedVector<std::string_view, 20> argv;
  argv.push_back("EVALSHA");
  argv.push_back(shas_[static_cast<int>(script)]);
  argv.push_back(numkeys);
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());

  absl::StatusOr<RedisReplyPtr> reply =
      CommandOn(connection, argv, asking, deadline);
  if (!reply.ok()) return reply;
  const redisReply& r = **reply;
  if (r.type != REDIS_REPLY_ERROR ||
      !absl::StartsWith(absl::string_view(r.str, r.len), "NOSCRIPT")) {
    return reply;
  }
  // The server lost its script cache (a restart, SCRIPT FLUSH, a failover
  // to a replica that never saw the script): load it and retry once.
  counters_.script_loads.fetch_add(1, std::memory_order_relaxed);
  if (absl::Status loaded = LoadScript(connection, script, deadline);
      !loaded.ok()) {
    return loaded;
  }
  return CommandOn(connection, argv, asking, deadline);
}

absl::StatusOr<RedisReplyPtr> RedisClient::CommandOn(
    RedisConnection& connection, absl::Span<const std::string_view> args,
    bool asking, absl::Time deadline) {
  if (asking) {
    // Lets the next command (one) run on a slot that is being imported.
    const std::string_view asking_args[] = {"ASKING"};
    absl::StatusOr<RedisReplyPtr> ok =
        connection.Command(asking_args, deadline);
    if (!ok.ok() || (*ok)->type == REDIS_REPLY_ERROR) return ok;
  }
  return connection.Command(args, deadline);
}

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisClient::AcquireFor(
    CircuitBreaker::Ticket ticket, absl::Time deadline, CallReport& report) {
  bool connect_failed = false;
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      pool_.Acquire(deadline, &connect_failed);
  if (!connection.ok()) {
    if (connect_failed) {
      counters_.failures.fetch_add(1, std::memory_order_relaxed);
      if (absl::IsDeadlineExceeded(connection.status())) {
        counters_.timeouts.fetch_add(1, std::memory_order_relaxed);
      }
    }
    breaker_.Report(ticket, connect_failed ? CircuitBreaker::Outcome::kFailure
                                           : CircuitBreaker::Outcome::kNeutral);
    report.server_failed = connect_failed;
  }
  return connection;
}

absl::StatusOr<RedisReplyPtr> RedisClient::Settle(
    CircuitBreaker::Ticket ticket, std::unique_ptr<RedisConnection> connection,
    absl::StatusOr<RedisReplyPtr> reply, CallReport& report) {
  CircuitBreaker::Outcome outcome = CircuitBreaker::Outcome::kSuccess;
  // Set for a reply from a demoted primary: every pooled connection
  // reaches it, so all are closed and the next calls connect anew.
  bool wrong_server = false;
  if (connection->broken()) {
    outcome = CircuitBreaker::Outcome::kFailure;
  } else if (!reply.ok()) {
    // Ended before a round trip (the deadline passed in the pool) or on a
    // reply it could not use: the server is not to blame.
    outcome = CircuitBreaker::Outcome::kNeutral;
  } else if ((*reply)->type == REDIS_REPLY_ERROR) {
    if (IsServerUnhealthyReply(**reply)) {
      outcome = CircuitBreaker::Outcome::kFailure;
    }
    wrong_server = IsWrongServerReply(**reply);
    if (std::optional<Redirect> redirect =
            ParseRedirect(**reply, config_.endpoint.address.host);
        redirect.has_value()) {
      report.redirect = *std::move(redirect);
    }
    report.try_again = absl::StartsWith(
        absl::string_view((*reply)->str, (*reply)->len), "TRYAGAIN");
    reply = RedisErrorReply(config_.endpoint.address, **reply);
  }
  const bool transport_failed = connection->broken();
  report.maybe_ran = transport_failed && !reply.ok();
  report.server_failed = outcome == CircuitBreaker::Outcome::kFailure;
  // A server that lost the connection (a restart) lost the others too; one
  // that answered too slowly did not: its other connections stay pooled.
  const bool lost_server =
      transport_failed && !absl::IsDeadlineExceeded(reply.status());
  // In Sentinel mode, the next connection asks where the master is now.
  if (wrong_server && config_.endpoint.source != nullptr) {
    config_.endpoint.source->Forget(connection->address());
  }
  pool_.Return(std::move(connection));
  if (outcome == CircuitBreaker::Outcome::kFailure) {
    counters_.failures.fetch_add(1, std::memory_order_relaxed);
    if (!reply.ok() && absl::IsDeadlineExceeded(reply.status())) {
      counters_.timeouts.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (lost_server || wrong_server) pool_.Flush();
  breaker_.Report(ticket, outcome);
  return reply;
}

template <typename Run>
absl::StatusOr<RedisReplyPtr> RedisClient::Call(const Run& run,
                                                absl::Time deadline,
                                                CallReport& report) {
  report = CallReport();
  const CircuitBreaker::Ticket ticket = breaker_.Admit();
  if (!ticket.admitted) {
    report.server_failed = true;
    return absl::UnavailableError(absl::StrCat(
        "paddock::RedisTier: ", config_.endpoint.address.text,
        ": circuit breaker open after ", config_.breaker_failures,
        " consecutive failures; calls resume once a probe succeeds (every ",
        absl::FormatDuration(config_.breaker_cooldown), ")"));
  }
  deadline = std::min(deadline, MonotonicNow() + config_.io_timeout);
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      AcquireFor(ticket, deadline, report);
  if (!connection.ok()) return connection.status();
  counters_.calls.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<RedisReplyPtr> reply = absl::UnknownError("not run");
  try {
    reply = run(**connection, deadline);
  } catch (...) {
    // Out of memory building the command: the connection's state is
    // unknown; close it, but give its place in the pool back.
    (*connection)->Discard();
    pool_.Return(*std::move(connection));
    breaker_.Report(ticket, CircuitBreaker::Outcome::kNeutral);
    throw;
  }
  return Settle(ticket, *std::move(connection), std::move(reply), report);
}

absl::StatusOr<RedisReplyPtr> RedisClient::Eval(
    Script script, absl::Span<const std::string_view> keys,
    absl::Span<const std::string_view> args, const CallSpec& spec,
    CallReport* report) {
  CallReport ignored;
  return Call(
      [&](RedisConnection& connection, absl::Time deadline) {
        return EvalOn(connection, script, keys, args, spec.asking, deadline);
      },
      spec.deadline, report != nullptr ? *report : ignored);
}

absl::StatusOr<RedisReplyPtr> RedisClient::Command(
    absl::Span<const std::string_view> args, const CallSpec& spec,
    CallReport* report) {
  CallReport ignored;
  return Call(
      [&](RedisConnection& connection, absl::Time deadline) {
        return CommandOn(connection, args, spec.asking, deadline);
      },
      spec.deadline, report != nullptr ? *report : ignored);
}

}  // namespace paddock::internal
