// File: src/redis/connection.h
// -----------------------------------------------------------------------------
// `RedisConnection`: one hiredis context with every round trip bounded by a
// deadline, SIGPIPE kept away from the process, and hiredis's errors mapped
// to absl statuses. Not thread-safe: one user at a time (the pool hands it
// out).

#ifndef PADDOCK_SRC_REDIS_CONNECTION_H_
#define PADDOCK_SRC_REDIS_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "redis/address.h"
#include "redis/endpoint.h"
#include "redis/tls.h"

namespace paddock::internal {

// The monotonic clock every deadline of the tier is measured on.
absl::Time MonotonicNow();

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

class RedisConnection {
 public:
  // RedisConnection::Open()
  //
  // Connects, runs the TLS handshake when the endpoint has TLS and, when it
  // carries a password, authenticates (AUTH), all within `timeout`. In
  // Sentinel mode it connects to the master the sentinels name and checks
  // with ROLE that it is one; when it is not, or cannot be reached, the
  // locator forgets it. Returns `absl::UnavailableError` naming the address
  // and the reason (refused, no such socket, unknown host, a certificate
  // that fails verification, not a master, no sentinel answered),
  // `absl::DeadlineExceededError`, or `absl::UnauthenticatedError` when
  // Redis refuses the user or password (never naming the password).
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(
      const RedisEndpoint& endpoint, absl::Duration timeout);

  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // RedisConnection::Command()
  //
  // Sends one command and reads its reply, both before `deadline`
  // (`MonotonicNow()`'s clock). A Redis error reply is a reply, not an error
  // status. Returns `absl::DeadlineExceededError` when the deadline passes,
  // `absl::UnavailableError` when the connection is lost, and
  // `absl::DataLossError` for a protocol error; after any of them the
  // connection is broken.
  absl::StatusOr<RedisReplyPtr> Command(absl::Span<const std::string_view> args,
                                        absl::Time deadline);

  // For a subscribed connection, which is read only when poll() says so:
  // Write() sends a command without reading its reply; ReadAvailable() reads
  // what the socket holds (once; it blocks if nothing is there); NextReply()
  // returns the next complete reply already read, or null.
  absl::Status Write(absl::Span<const std::string_view> args,
                     absl::Time deadline);
  absl::Status ReadAvailable();
  absl::StatusOr<RedisReplyPtr> NextReply();

  // The socket, for poll().
  int fd() const { return context_->fd; }
  // "<host>:<port>" or "unix:<path>": where it is connected.
  const std::string& address() const { return address_; }
  // Whether an error left the connection unusable.
  bool broken() const { return broken_; }
  // Marks the connection unusable (closed when given back), for a reply that
  // says it reaches the wrong server.
  void Discard() { broken_ = true; }
  // For a connection idle between calls: whether it is broken or the peer
  // closed it (or sent what nobody asked for) meanwhile; marks it broken
  // then. One poll(2), never blocks.
  bool LostWhileIdle();

  // The pool's mark: which flush generation the connection belongs to.
  uint64_t generation() const { return generation_; }
  void set_generation(uint64_t generation) { generation_ = generation; }

 private:
  RedisConnection(const RedisAddress& address, redisContext* context);

  // Open's steps: to `address`, the socket and its hiredis context, TLS,
  // then AUTH; in Sentinel mode, then ROLE.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> OpenAt(
      const RedisEndpoint& endpoint, const RedisAddress& address,
      absl::Time deadline);
  static absl::StatusOr<std::unique_ptr<RedisConnection>> OpenUnauthenticated(
      const RedisAddress& address, absl::Duration timeout);
  absl::Status Authenticate(const RedisEndpoint& endpoint, absl::Time deadline);
  // OK if ROLE says "master"; Unavailable if another role, or the error.
  absl::Status CheckIsMaster(absl::Time deadline);

  // Arms the socket timeouts (SO_RCVTIMEO, SO_SNDTIMEO) to what is left
  // before `deadline`; DeadlineExceeded if nothing is.
  absl::Status SetTimeout(absl::Time deadline);
  // Between two reads or writes of one call: DeadlineExceeded (and broken)
  // once `deadline` passed, else re-arms the timeouts if kRearmAfter passed
  // since they were armed. A socket timeout bounds one read(2) or write(2),
  // and hiredis retries after a partial write or EINTR with the whole
  // timeout again, so without this a call could take twice its deadline or
  // more; with it, a call ends at most kRearmAfter past its deadline.
  absl::Status Rearm(absl::Time deadline);
  // One read into the reader, one write from the output buffer: hiredis's
  // own over a plain socket, `tls_`'s over TLS; results as hiredis's.
  int BufferRead();
  int BufferWrite(int* done);
  // Writes the output buffer, within `deadline`.
  absl::Status Flush(absl::Time deadline);
  // Marks the connection broken and returns the status for its error.
  absl::Status Fail(int saved_errno, std::string_view during);

  const std::string address_;  // As written, for error messages.
  redisContext* const context_;
  // Set for a TLS connection; it moves the bytes of `context_`, which still
  // formats the commands and parses the replies.
  std::unique_ptr<TlsSession> tls_;
  bool broken_ = false;
  uint64_t generation_ = 0;
  // When SetTimeout last armed the socket timeouts.
  absl::Time armed_at_ = absl::InfinitePast();
  static constexpr absl::Duration kRearmAfter = absl::Milliseconds(1);
};

// The status code for a Redis error reply (type REDIS_REPLY_ERROR):
// `kUnauthenticated` for NOAUTH and WRONGPASS (no password, or a wrong one),
// `kPermissionDenied` for NOPERM and its counterpart inside a script (the
// user's ACL forbids the command, a key or a channel), else `kUnavailable`.
absl::StatusCode ErrorReplyCode(const redisReply& reply);

// The status for a Redis error reply: `ErrorReplyCode`'s, with Redis's
// message.
absl::Status RedisErrorReply(const RedisAddress& address,
                             const redisReply& reply);

// Whether an error reply says the server cannot serve now (busy running a
// script, loading, no master...), which counts as a failure of the server.
// Not TRYAGAIN: a cluster node's answer while the keys of a call's slot are
// being migrated, which the router retries (router.h).
bool IsServerUnhealthyReply(const redisReply& reply);

// Whether an error reply says the connection reaches a server that can no
// longer take our writes (a primary demoted to replica, behind an address
// that now names the new primary): a new connection may reach the right
// one.
bool IsWrongServerReply(const redisReply& reply);

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CONNECTION_H_
