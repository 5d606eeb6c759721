// File: src/redis/client.h
// -----------------------------------------------------------------------------
// `RedisClient`: runs the tier's scripts on Redis. Each call takes a pooled
// connection, passes the circuit breaker, sends EVALSHA (reloading the
// script and retrying once after NOSCRIPT) and returns the reply, all within
// the I/O timeout; a transport failure flushes the pool and counts against
// the breaker.

#ifndef PADDOCK_SRC_REDIS_CLIENT_H_
#define PADDOCK_SRC_REDIS_CLIENT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "redis/address.h"
#include "redis/circuit_breaker.h"
#include "redis/cluster_map.h"
#include "redis/connection.h"
#include "redis/connection_pool.h"
#include "redis/endpoint.h"
#include "redis/scripts.h"

namespace paddock::internal {

struct RedisClientConfig {
  RedisEndpoint endpoint;
  absl::Duration io_timeout;
  absl::Duration connect_timeout;
  int pool_size = 1;
  int breaker_failures = 1;
  absl::Duration breaker_cooldown;
};

// Counters shared with the tier's stats. Relaxed atomics.
struct RedisClientCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> script_loads{0};
  std::atomic<uint64_t> bad_replies{0};
};

// How one call is to run.
struct CallSpec {
  // Give up then, if it comes before the I/O timeout.
  absl::Time deadline = absl::InfiniteFuture();
  // Send ASKING first (Redis Cluster, after an ASK redirect).
  bool asking = false;
};

// How one call went, for the router that chooses the node (router.h).
struct CallReport {
  // The call failed after its command may have been on its way (a timeout,
  // a lost connection): it may have run all the same.
  bool maybe_ran = false;
  // The server failed (unreachable, lost, timed out, busy) or the breaker
  // refused the call: in a cluster, the slot may be served elsewhere now.
  bool server_failed = false;
  // A cluster node's MOVED or ASK reply (the call did not run).
  Redirect redirect;
  // A cluster node's TRYAGAIN: the call's keys are half migrated (it did
  // not run).
  bool try_again = false;
};

class RedisClient {
 public:
  // RedisClient::Connect()
  //
  // Opens a first connection (within `connect_timeout`) and loads every
  // script (SCRIPT LOAD). Returns the connect's error, or the first
  // script's.
  static absl::StatusOr<std::unique_ptr<RedisClient>> Connect(
      RedisClientConfig config);

  // RedisClient::Unconnected()
  //
  // A client of another node of the cluster whose first node `like`
  // connected: it knows the scripts' SHA1s (a node without them answers
  // NOSCRIPT and gets them then) and connects at its first call.
  static std::unique_ptr<RedisClient> Unconnected(RedisClientConfig config,
                                                  const RedisClient& like);

  // RedisClient::Eval()
  //
  // Runs `script` with `keys` and `args` as `spec` says and returns its
  // reply; a Redis error reply becomes a status (`ErrorReplyCode`), a MOVED
  // or ASK reply `absl::UnavailableError` described in `report->redirect`.
  // Blocks for at most the I/O timeout. Fills `report` (see CallReport).
  // Thread-safe.
  absl::StatusOr<RedisReplyPtr> Eval(Script script,
                                     absl::Span<const std::string_view> keys,
                                     absl::Span<const std::string_view> args,
                                     const CallSpec& spec, CallReport* report);

  // RedisClient::Command()
  //
  // Runs one plain command, like Eval.
  absl::StatusOr<RedisReplyPtr> Command(absl::Span<const std::string_view> args,
                                        const CallSpec& spec,
                                        CallReport* report);

  // RedisClient::Reconnect()
  //
  // Closes the pooled connections (those in use when returned): the next
  // calls connect anew, to where the endpoint names now (a Sentinel
  // failover). Thread-safe; never blocks on I/O.
  void Reconnect() { pool_.Flush(); }

  // Counts a reply that the caller could not parse.
  void CountBadReply() {
    counters_.bad_replies.fetch_add(1, std::memory_order_relaxed);
  }

  const RedisClientCounters& counters() const { return counters_; }
  const CircuitBreaker& breaker() const { return breaker_; }
  const RedisAddress& address() const { return config_.endpoint.address; }

 private:
  explicit RedisClient(RedisClientConfig config);

  // One call: breaker, connection, `run` on it, and the bookkeeping; done
  // by the I/O timeout or `deadline`, whichever comes first.
  template <typename Run>
  absl::StatusOr<RedisReplyPtr> Call(const Run& run, absl::Time deadline,
                                     CallReport& report);
  // Call()'s first step: a pooled connection by `deadline`. A failure is
  // reported on `ticket` here: a failed connect is the server's fault, a
  // pool that stayed busy is not.
  absl::StatusOr<std::unique_ptr<RedisConnection>> AcquireFor(
      CircuitBreaker::Ticket ticket, absl::Time deadline, CallReport& report);
  // Call()'s last step: judges `reply` for the breaker and the counters,
  // gives `connection` back (flushing the pool if the server was lost or is
  // the wrong one), reports `ticket`, and returns the reply with a Redis
  // error made a status.
  absl::StatusOr<RedisReplyPtr> Settle(
      CircuitBreaker::Ticket ticket,
      std::unique_ptr<RedisConnection> connection,
      absl::StatusOr<RedisReplyPtr> reply, CallReport& report);

  // EVALSHA on `connection` (after ASKING with `asking`), with SCRIPT LOAD
  // and one retry after NOSCRIPT.
  absl::StatusOr<RedisReplyPtr> EvalOn(RedisConnection& connection,
                                       Script script,
                                       absl::Span<const std::string_view> keys,
                                       absl::Span<const std::string_view> args,
                                       bool asking, absl::Time deadline);
  // `args` on `connection`, after ASKING with `asking`.
  static absl::StatusOr<RedisReplyPtr> CommandOn(
      RedisConnection& connection, absl::Span<const std::string_view> args,
      bool asking, absl::Time deadline);
  // SCRIPT LOAD on `connection`; checks the returned SHA1.
  absl::Status LoadScript(RedisConnection& connection, Script script,
                          absl::Time deadline);

  const RedisClientConfig config_;
  ConnectionPool pool_;
  CircuitBreaker breaker_;
  RedisClientCounters counters_;
  // The scripts' SHA1s, as SCRIPT LOAD returned them at Connect. Written
  // before the client is shared, read-only afterwards.
  std::array<std::string, kScriptCount> shas_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CLIENT_H_
