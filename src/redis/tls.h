// File: src/redis/tls.h
// -----------------------------------------------------------------------------
// TLS for the tier's connections, on OpenSSL. Debian's hiredis 0.14 has no
// TLS, so hiredis keeps formatting commands and parsing replies while
// `TlsSession` moves the bytes: its Read and Write stand in for hiredis's
// redisBufferRead and redisBufferWrite, with the same results and errors,
// so that `RedisConnection`'s deadlines and error mapping hold unchanged.
//
// `TlsContext` holds what `RedisTlsOptions` names (the CA, the client
// certificate), loaded once by Connect and shared by every connection of a
// tier. Certificate verification is always on: the server's chain must lead
// to the CA and the certificate must name the server.

#ifndef PADDOCK_SRC_REDIS_TLS_H_
#define PADDOCK_SRC_REDIS_TLS_H_

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/redis.h"

// OpenSSL's types, declared so that this header does not pull in OpenSSL.
struct ssl_ctx_st;
struct ssl_st;

namespace paddock::internal {

class TlsContext {
 public:
  // TlsContext::Create()
  //
  // Loads `options`' CA (or the system's trust store when `ca_file` is
  // empty) and client certificate. Returns `absl::InvalidArgumentError`
  // naming the field and file that cannot be loaded (never a key's
  // contents). Thread-safe: the result is immutable and shared.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> Create(
      const RedisTlsOptions& options);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // `RedisTlsOptions::server_name`: the name the certificate must carry,
  // or empty for the address's host.
  const std::string& server_name() const { return server_name_; }

 private:
  friend class TlsSession;
  TlsContext(ssl_ctx_st* ctx, std::string server_name)
      : ctx_(ctx), server_name_(std::move(server_name)) {}

  ssl_ctx_st* const ctx_;
  const std::string server_name_;
};

// One connection's TLS. Not thread-safe: it belongs to one RedisConnection.
class TlsSession {
 public:
  // TlsSession::Handshake()
  //
  // Runs the TLS handshake on the connected, blocking socket `fd` before
  // `deadline`, verifying that the certificate names `host` (or the
  // context's server name). Leaves `fd` blocking and open (its owner closes
  // it). Returns `absl::UnavailableError` naming the verification failure
  // or the TLS error, or `absl::DeadlineExceededError`; `address` starts
  // each message.
  static absl::StatusOr<std::unique_ptr<TlsSession>> Handshake(
      const TlsContext& context, int fd, std::string_view host,
      std::string_view address, absl::Time deadline);

  // Frees the session without a close_notify: writing one could block on a
  // hung server, and Redis needs none to close its end.
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // redisBufferRead over TLS: reads what the socket holds (blocking, bounded
  // by its SO_RCVTIMEO) into `c`'s reader, every decrypted byte of it, so
  // that poll(2) on the socket tells whether more is coming. REDIS_OK (also
  // when only a TLS message that carries no data came, or on EINTR), or
  // REDIS_ERR with `c->err`, `c->errstr` and errno as hiredis sets them.
  int Read(redisContext* c);
  // redisBufferWrite over TLS: writes what `c`'s output buffer holds, or
  // part of it; `*done` says whether all of it went.
  int Write(redisContext* c, int* done);

  // For a connection idle between calls whose socket is readable: whether
  // data came that nobody asked for, or the peer closed, rather than a TLS
  // message that carries none (TLS 1.3 session tickets). Never blocks.
  bool ReadableWhileIdleMeansLost();

 private:
  explicit TlsSession(ssl_st* ssl) : ssl_(ssl) {}
  // The REDIS_ERR (or REDIS_OK for a retry) of an SSL_read or SSL_write that
  // returned `result`.
  int Failed(redisContext* c, int result, int saved_errno);

  ssl_st* const ssl_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_TLS_H_
