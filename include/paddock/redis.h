// File: paddock/redis.h
// -----------------------------------------------------------------------------
// `paddock::RedisTier`: the `paddock::SharedTier` of a fleet, on one Redis
// server (5.0 or later; 7 tested), the master Redis Sentinel names, or a
// Redis Cluster. Target `paddock::redis`, which links
// hiredis; the core target `paddock::paddock` does not.
//
//   paddock::RedisOptions ro;
//   ro.address = "unix:/run/redis/redis.sock";  // or "127.0.0.1:6379"
//   ro.key_prefix = "svc:v1:";  // version it with your value encoding
//   absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
//       paddock::RedisTier::Connect(ro);
//   // then Options::shared = *tier
//
// Every operation is one round trip running a Lua script (EVALSHA) that
// judges freshness on Redis's own clock. A key's record and lease live under
// `<prefix>{<key>}:v` and `<prefix>{<key>}:l`, in one Redis Cluster slot;
// writes are announced on the channel `<prefix>changes`. docs/fleet.md
// describes the protocol command by command and what each failure costs.
//
// The tier is an efficiency lock, never a correctness lock: a call that times
// out may still take effect on the server, and a lease can be lost.

#ifndef PADDOCK_REDIS_H_
#define PADDOCK_REDIS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/shared_tier.h"

namespace paddock {

namespace internal {
class RedisTierState;
}  // namespace internal

// RedisTlsOptions
//
// TLS for every connection of the tier (Redis 6 or later, `tls-port`). The
// server's certificate is always verified: its chain must lead to `ca_file`
// and it must name `server_name`; there is no way to skip either.
struct RedisTlsOptions {
  // Off: plain TCP (or a unix socket), and the other fields must be empty.
  bool enabled = false;
  // PEM file of the CA certificates to trust; empty trusts the system's
  // store (/etc/ssl/certs).
  std::string ca_file;
  // Mutual TLS (`tls-auth-clients yes`): the client certificate chain, PEM;
  // set with `key_file` or neither.
  std::string cert_file;
  // The private key of `cert_file`, PEM (never logged).
  std::string key_file;
  // The name the server's certificate must carry (DNS name or IP address)
  // and, for a DNS name, the SNI sent; empty means the host of `address`.
  std::string server_name;
};

// RedisOptions
//
// How to reach Redis and how long to wait for it. Checked by
// `RedisTier::Connect` (`Validate`).
struct RedisOptions {
  // "unix:<path>" for a unix socket, "<host>:<port>" or "[<ipv6>]:<port>"
  // for TCP. Not used (nor checked) in Sentinel or Cluster mode.
  std::string address = "127.0.0.1:6379";

  // Sentinel mode: set both, and the tier finds the master that these Redis
  // Sentinels ("<host>:<port>" each, asked in turn) monitor as
  // `master_name`, and finds it again after a failover. Every new
  // connection (pooled, the change subscription's, reconnects) goes to the
  // master the sentinels name and checks with ROLE that it is the master; a
  // connection refused or timed out there, a ROLE that is not "master" or a
  // READONLY reply makes the next connection ask the sentinels again.
  // Sentinels are asked over plain TCP without AUTH; `password`, `username`
  // and `tls` apply to the master. docs/fleet.md ("Deploying: Sentinel")
  // says what a failover costs.
  std::vector<std::string> sentinels;
  std::string master_name;

  // Cluster mode: set, and the tier works with the Redis Cluster these
  // nodes ("<host>:<port>" each, any of its nodes; asked in turn) belong
  // to. It reads the slot map (CLUSTER SLOTS) at Connect and sends each
  // call to the master of its key's slot, over a pool of its own per node
  // (`pool_size` each) behind a circuit breaker of its own per node: a
  // failing node costs its own slots only. A MOVED reply updates the map
  // and the call is sent again where it names, an ASK reply (a slot being
  // migrated) once with ASKING, both within `io_timeout`; a MOVED reply or
  // a failing node also has the whole map read again in the background, at
  // most every 100 ms, which is how a failover is followed. The change
  // subscription is on one node, any: PUBLISH reaches every node of a
  // cluster. `password`, `username` and `tls` apply to every node.
  // docs/fleet.md ("Deploying: Redis Cluster") says what a failover and a
  // migration cost. Not with `sentinels`; `address` is not used.
  std::vector<std::string> cluster_nodes;

  // Who the tier is to Redis. With a `password`, every connection the tier
  // opens (the pool's, the change subscription's, reconnects) sends
  // `AUTH <username> <password>` (an ACL user, Redis 6 or later), or
  // `AUTH <password>` when `username` is empty (the default user, as with
  // `requirepass`), before any other command. An empty `password` sends no
  // AUTH; a `username` needs a password (a `nopass` user takes any). The
  // password never appears in a status, a log line, stats or metrics.
  // docs/fleet.md ("Deploying") lists the smallest ACL the tier works with.
  std::string username;
  std::string password;

  // TLS (see RedisTlsOptions); needs a TCP `address`.
  RedisTlsOptions tls;

  // Starts every key and the change channel: the namespace of one kind of
  // value. Put the version of your value encoding in it ("svc:v1:") so that
  // processes running different encodings never read each other's values.
  // Must not contain '{' or '}' (keys use hash tags).
  std::string key_prefix = "paddock:v1:";

  // The longest a call waits for Redis, all its round trips together,
  // including a wait for a free pooled connection. Past it the call returns
  // `absl::DeadlineExceededError`; the command may still run on the server.
  absl::Duration io_timeout = absl::Milliseconds(100);

  // The longest a new connection may take to open. A call that needs one
  // waits for at most the smaller of this and what is left of `io_timeout`.
  // Resolving a host name is not bounded by it (hiredis resolves with a
  // blocking getaddrinfo): prefer an IP address or a unix socket.
  absl::Duration connect_timeout = absl::Milliseconds(250);

  // The lease period: how long another asker waits for a holder that died
  // before it may load itself. A living holder's lease is extended every
  // half period, up to the `hold_for` it asked for. At most 24 hours.
  absl::Duration lease_for = absl::Seconds(10);

  // The largest value (or remembered error message) the tier stores. Fill
  // and Put refuse larger ones with `absl::InvalidArgumentError`. Lookup
  // never transfers a larger one that a process with a larger limit wrote
  // (see `RedisTier::Lookup`).
  size_t max_value_bytes = size_t{1} << 20;

  // The most connections the tier opens for calls (the change subscription
  // has one more of its own). A call that finds none free waits for one,
  // within `io_timeout`.
  int pool_size = 8;

  // The circuit breaker: after `breaker_failures` consecutive failed calls
  // (unreachable, timed out, server busy or loading) calls fail at once with
  // `absl::UnavailableError` for `breaker_cooldown`; then one call probes
  // Redis, and its success closes the breaker again.
  int breaker_failures = 5;
  absl::Duration breaker_cooldown = absl::Seconds(1);

  // While the change subscription is down, `AwaitChange` checks the key's
  // lease this often instead of waiting for a message.
  absl::Duration poll_interval = absl::Milliseconds(100);

  // How often the change subscription pings Redis; one ping unanswered for
  // this long counts the subscription as lost (reconnect, then
  // `OnMissedInvalidations`).
  absl::Duration health_check_interval = absl::Seconds(1);

  // RedisOptions::Validate()
  //
  // Returns `absl::InvalidArgumentError` naming the first bad field (an
  // address that does not parse, outside Sentinel and Cluster mode; a
  // prefix with a brace, a username without a password, TLS on a unix
  // socket or with half a client certificate, TLS files named while TLS is
  // off, sentinels without a master name or the other way round, a sentinel
  // or cluster node that is not "<host>:<port>", cluster nodes with
  // sentinels, a duration <= 0, a size < 1), else OK.
  absl::Status Validate() const;
};

// RedisTierStats
//
// Counters since `Connect`, for tests and dashboards. Read with
// `RedisTier::stats()`.
struct RedisTierStats {
  // Calls that reached Redis (one per operation, whatever its round trips).
  uint64_t calls = 0;
  // Calls that failed on the way: timeouts, lost connections, busy servers.
  uint64_t failures = 0;
  // The part of `failures` that timed out.
  uint64_t timeouts = 0;
  // Calls refused by the open circuit breaker.
  uint64_t breaker_rejections = 0;
  // Times the breaker opened (a failed probe opens it again).
  uint64_t breaker_opens = 0;
  // SCRIPT LOADs after NOSCRIPT (a restarted or flushed server).
  uint64_t script_loads = 0;
  // Lookups that found an unreadable record (treated as none).
  uint64_t bad_records = 0;
  // Lookups that found a value over `max_value_bytes` (left unread; returned
  // as DataLoss). Not counted in `bad_replies`.
  uint64_t oversized_records = 0;
  // Replies the tier could not parse (returned as DataLoss).
  uint64_t bad_replies = 0;
  // Successful extensions of held leases.
  uint64_t leases_extended = 0;
  // Leases given back in the background after a call that may have left
  // one held failed: a Lookup whose reply was lost after Redis granted it
  // (a timeout, a lost connection), a Fill or Release that failed.
  uint64_t leases_given_back = 0;
  // Times the change subscription was lost.
  uint64_t subscription_losses = 0;
  // Change messages received (fills, puts, invalidations, releases).
  uint64_t notifications = 0;
  // Cluster mode: MOVED and ASK replies followed, and the slot map's reads
  // (CLUSTER SLOTS, the one at Connect included).
  uint64_t redirects = 0;
  uint64_t slot_map_refreshes = 0;
};

// RedisTier
//
// Thread-safe; every method is bounded by `RedisOptions::io_timeout` unless
// it says otherwise, never throws (but Subscribe, see `SharedTier`), and
// maps failures as `SharedTier` says: `absl::UnavailableError`
// (unreachable, connection lost, server busy, breaker open),
// `absl::UnauthenticatedError` / `absl::PermissionDeniedError` (a password
// or an ACL changed on the server since Connect),
// `absl::DeadlineExceededError` (no reply within `io_timeout`),
// `absl::DataLossError` (a reply it cannot parse),
// `absl::ResourceExhaustedError` (out of memory; a lease it may have been
// granted is given back, or lapses). An
// unreadable record in Redis (wrong type, missing or non-numeric fields) is
// treated as no record, and the next fill replaces it.
//
// Owns two background threads: one extends granted leases, one receives
// change messages on a connection of its own and runs subscribers'
// callbacks. Both stop when the tier is destroyed. Create tiers after any
// `fork()`, not before: a child does not inherit the threads.
class RedisTier final : public SharedTier {
 public:
  // RedisTier::Connect()
  //
  // Validates `options`, connects to Redis (over TLS when `options.tls` is
  // enabled, authenticating when `options.password` is set), loads the
  // scripts, checks that the user's ACL allows every command, key and
  // channel the tier uses, and subscribes to the change channel. Returns:
  // - `absl::InvalidArgumentError` for bad options (a malformed address, a
  //   TLS file that cannot be loaded);
  // - `absl::UnauthenticatedError` when Redis refuses the user or password,
  //   or wants a password and none is set;
  // - `absl::PermissionDeniedError` naming what the ACL forbids (a command,
  //   or a command on the tier's keys or channel);
  // - `absl::UnavailableError` naming the address and the reason when Redis
  //   cannot be reached or its certificate fails verification (the reason
  //   OpenSSL gives, e.g. "self-signed certificate in certificate chain" or
  //   "unable to get local issuer certificate" for a wrong CA, "hostname
  //   mismatch" or "IP address mismatch" for a wrong name), or
  //   `absl::DeadlineExceededError` when it does not answer in time (also a
  //   TLS handshake with a port that speaks plain RESP, which waits for a
  //   line that never comes).
  // Blocks for about `connect_timeout` plus a few `io_timeout`s at most.
  static absl::StatusOr<std::shared_ptr<RedisTier>> Connect(
      const RedisOptions& options);

  // Stops the background threads and closes every connection. A lease still
  // held is left to lapse after at most `lease_for`. Subscriptions may
  // outlive the tier; they receive nothing more. Waits for a callback in
  // progress to return, unless run by one (see `Subscribe`): the
  // subscription thread then ends once that callback returns.
  ~RedisTier() override;

  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  // RedisTier::Lookup()
  //
  // `SharedTier::Lookup`: one EVALSHA. A granted lease is extended from a
  // background thread every `lease_for / 2` until Fill or Release, while
  // less than `hold_for` has passed since the grant (so it lasts the longer
  // of `lease_for` and `hold_for`).
  //
  // A live record whose value is larger than `max_value_bytes` (written by a
  // process with a larger limit) is measured on the server (HSTRLEN) and
  // never transferred: the call returns `absl::DataLossError` naming its
  // size, takes no lease (this process could not fill over it) and counts
  // `stats().oversized_records`; a cache takes that as a miss and loads on
  // its own, as it does for a value it cannot decode. A remembered error
  // whose message is over the limit is returned with its code and a short
  // message in place of its own.
  absl::StatusOr<SharedLookup> Lookup(std::string_view key,
                                      std::string_view have_version,
                                      absl::Duration hold_for) override;

  // RedisTier::Fill()
  //
  // `SharedTier::Fill`: one EVALSHA; publishes a fill message. A value (or
  // error message) larger than `max_value_bytes` stores nothing, gives the
  // lease up and returns `absl::InvalidArgumentError`. A record whose
  // `keep_for` is <= 0 is accepted and not stored.
  absl::StatusOr<bool> Fill(std::string_view key, std::string_view lease_token,
                            const SharedFill& fill) override;

  // RedisTier::Release()
  //
  // `SharedTier::Release`: one EVALSHA; publishes a release message so that
  // waiting askers ask again at once.
  absl::Status Release(std::string_view key,
                       std::string_view lease_token) override;

  // RedisTier::Put()
  //
  // `SharedTier::Put`: one EVALSHA. Returns `absl::InvalidArgumentError` for
  // a value larger than `max_value_bytes`, storing nothing. A Put that
  // fails after its command may have reached Redis (a timeout, a connection
  // lost after sending) is not retried, and Redis may still run it, even
  // after writes sent later: for 5 minutes, a put or invalidate message of
  // `key` then reaches `origin` too, so that the writer drops its copy as
  // every other subscriber does (docs/fleet.md, "Change messages").
  absl::Status Put(std::string_view key, const SharedFill& fill,
                   uint64_t origin) override;

  // RedisTier::Invalidate()
  //
  // `SharedTier::Invalidate`: one EVALSHA. One that fails after its command
  // may have reached Redis is treated as a failed Put is.
  absl::Status Invalidate(std::string_view key, uint64_t origin) override;

  // RedisTier::AwaitChange()
  //
  // `SharedTier::AwaitChange`. Wakes on a fill, put, invalidate or release
  // message for `key`, including one that arrived after this thread's last
  // `Lookup` of `key` began, and when the change subscription reconnects
  // (messages may have been lost). While the subscription is down, checks
  // the key's lease every `poll_interval` instead. Never blocks past
  // `timeout`.
  bool AwaitChange(std::string_view key, absl::Duration timeout) override;

  // RedisTier::Subscribe()
  //
  // `SharedTier::Subscribe`. The id mixes random bits with the process id,
  // so ids differ across processes. Callbacks run on the tier's subscription
  // thread. A subscription may be destroyed from its own callback; it then
  // does not wait for that callback to return. A callback may also drop the
  // last reference to the tier (to reconnect, say), destroying it.
  std::unique_ptr<Subscription> Subscribe(Subscriber* subscriber) override;

  // RedisTier::max_value_bytes()
  //
  // `RedisOptions::max_value_bytes`. Never blocks.
  size_t max_value_bytes() const override;

  // RedisTier::subscribed()
  //
  // Whether the change subscription is up now. Never blocks.
  bool subscribed() const;

  // RedisTier::stats()
  //
  // A snapshot of the counters. Never blocks.
  RedisTierStats stats() const;

  // RedisTier::options()
  //
  // The options the tier was connected with, the password included: print
  // them with care.
  const RedisOptions& options() const;

 private:
  explicit RedisTier(std::unique_ptr<internal::RedisTierState> state);
  static absl::StatusOr<std::shared_ptr<RedisTier>> ConnectOrThrow(
      const RedisOptions& options);
  // AwaitChange's body; AwaitChange turns an exception into `false`.
  bool AwaitChangeOrThrow(std::string_view key, absl::Duration timeout);

  std::unique_ptr<internal::RedisTierState> state_;
};

}  // namespace paddock

#endif  // PADDOCK_REDIS_H_
