// TlsContext and TlsSession: the tier's TLS on OpenSSL, under hiredis.

#include "redis/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "redis/connection.h"

namespace paddock::internal {
namespace {

// OpenSSL's oldest error on this thread's queue, as text, and the queue
// cleared; `fallback` when it is empty.
std::string TakeSslError(std::string_view fallback) {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int)
  ERR_clear_error();
  if (code == 0) return std::string(fallback);
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Status CannotLoad(const char* field, const std::string& file) {
  return absl::InvalidArgumentError(
      absl::StrCat("paddock::RedisOptions: tls.", field, " \"", file,
                   "\" cannot be loaded: ", TakeSslError("unknown error")));
}

bool IsIpLiteral(const std::string& name) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// Sets `fd`'s O_NONBLOCK to `on`; false if fcntl fails.
bool SetNonBlocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags == -1) return false;
  return fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) !=
         -1;
}

// Waits for `events` on `fd` until `deadline`: whether they came.
bool WaitFor(int fd, short events, absl::Time deadline) {  // NOLINT
  for (;;) {
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) return false;
    const int64_t millis =
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::min<int64_t>(millis, INT_MAX)));
    if (ready == 1) return true;  // Or an error, which SSL_connect reports.
    if (ready == -1 && errno != EINTR) return false;
  }
}

// Records a hiredis-style error on `c`, as hiredis's own I/O would.
void SetError(redisContext* c, int type, std::string_view text) {
  c->err = type;
  const size_t n = std::min(text.size(), sizeof(c->errstr) - 1);
  std::memcpy(c->errstr, text.data(), n);
  c->errstr[n] = '\0';
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::Create(
    const RedisTlsOptions& options) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("paddock::RedisTier: cannot make a TLS context: ",
                     TakeSslError("out of memory")));
  }
  // Owned from here on, whatever fails below.
  std::shared_ptr<const TlsContext> context(
      new TlsContext(ctx, options.server_name));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (options.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return CannotLoad("ca_file", "(the system's trust store)");
    }
  } else if (SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(),
                                           nullptr) != 1) {
    return CannotLoad("ca_file", options.ca_file);
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) !=
        1) {
      return CannotLoad("cert_file", options.cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(),
                                    SSL_FILETYPE_PEM) != 1) {
      return CannotLoad("key_file", options.key_file);
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return CannotLoad("key_file", options.key_file);
    }
  }
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

namespace {

// Sets `ssl` up for `fd` and for a server certificate that names `name`:
// whether OpenSSL took it all.
bool Configure(SSL* ssl, const std::string& name, int fd) {
  // Partial writes, as write(2) makes them, so that Write can keep hiredis's
  // buffer in step; and no automatic retry, so that a TLS message without
  // data returns from Read instead of blocking for data that is not coming.
  SSL_set_mode(
      ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
  // An IP address is checked against the certificate's IP entries and is
  // never sent as SNI (RFC 6066 allows only host names there).
  const bool named = IsIpLiteral(name)
                         ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl),
                                                         name.c_str()) == 1
                         : SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 &&
                               SSL_set1_host(ssl, name.c_str()) == 1;
  return named && SSL_set_fd(ssl, fd) == 1;
}

// The status of a handshake with `name` that SSL_connect ended with
// SSL_get_error `error` (errno `saved_errno`): the verification failure if
// there was one, else the TLS or socket error.
absl::Status HandshakeFailed(SSL* ssl, int error, int saved_errno,
                             const std::string& prefix,
                             const std::string& name) {
  const long verified = SSL_get_verify_result(ssl);  // NOLINT(runtime/int)
  if (verified != X509_V_OK) {
    ERR_clear_error();
    return absl::UnavailableError(absl::StrCat(
        prefix, "TLS: the server's certificate failed verification for \"",
        name, "\": ", X509_verify_cert_error_string(verified)));
  }
  std::string reason = error == SSL_ERROR_SYSCALL && saved_errno != 0
                           ? std::generic_category().message(saved_errno)
                           : TakeSslError("the server closed the connection");
  return absl::UnavailableError(
      absl::StrCat(prefix, "the TLS handshake failed: ", reason));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Handshake(
    const TlsContext& context, int fd, std::string_view host,
    std::string_view address, absl::Time deadline) {
  const std::string prefix =
      absl::StrCat("paddock::RedisTier: ", std::string(address), ": ");
  ERR_clear_error();
  SSL* ssl = SSL_new(context.ctx_);
  if (ssl == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        prefix, "cannot make a TLS session: ", TakeSslError("out of memory")));
  }
  std::unique_ptr<TlsSession> session(new TlsSession(ssl));
  const std::string name =
      context.server_name().empty() ? std::string(host) : context.server_name();
  if (!Configure(ssl, name, fd)) {
    return absl::InternalError(
        absl::StrCat(prefix, "cannot set up TLS for \"", name,
                     "\": ", TakeSslError("unknown error")));
  }
  // Non-blocking during the handshake, so that `deadline` bounds all of its
  // round trips together.
  if (!SetNonBlocking(fd, true)) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "cannot make its socket non-blocking: ",
                     std::generic_category().message(errno)));
  }
  for (;;) {
    const int result = SSL_connect(ssl);
    if (result == 1) break;
    const int error = SSL_get_error(ssl, result);
    const int saved_errno = errno;
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (WaitFor(fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                  deadline)) {
        continue;
      }
      return absl::DeadlineExceededError(absl::StrCat(
          prefix,
          "the TLS handshake did not finish within the timeout (a server "
          "that speaks no TLS on this port does not answer it)"));
    }
    return HandshakeFailed(ssl, error, saved_errno, prefix, name);
  }
  if (!SetNonBlocking(fd, false)) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "cannot make its socket blocking: ",
                     std::generic_category().message(errno)));
  }
  return session;
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

int TlsSession::Failed(redisContext* c, int result, int saved_errno) {
  const int error = SSL_get_error(ssl_, result);
  switch (error) {
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      SetError(c, REDIS_ERR_EOF, "Server closed the connection");
      return REDIS_ERR;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      ERR_clear_error();
      // Interrupted, or a TLS message without data: nothing read, as
      // hiredis returns for EINTR; the caller reads again.
      if (saved_errno == EINTR || saved_errno == 0) return REDIS_OK;
      // The socket's timeout (EAGAIN), which RedisConnection maps to
      // DeadlineExceeded by errno.
      errno = saved_errno;
      SetError(c, REDIS_ERR_IO,
               std::error_code(saved_errno, std::generic_category()).message());
      return REDIS_ERR;
    case SSL_ERROR_SYSCALL:
      if (saved_errno == 0) {  // An end of file without close_notify.
        ERR_clear_error();
        SetError(c, REDIS_ERR_EOF, "Server closed the connection");
        return REDIS_ERR;
      }
      ERR_clear_error();
      errno = saved_errno;
      SetError(c, REDIS_ERR_IO,
               std::error_code(saved_errno, std::generic_category()).message());
      return REDIS_ERR;
    default:
      errno = EPROTO;
      SetError(c, REDIS_ERR_IO,
               absl::StrCat("TLS: ", TakeSslError("protocol error")));
      return REDIS_ERR;
  }
}

int TlsSession::Read(redisContext* c) {
  char buffer[16 * 1024];
  ERR_clear_error();
  errno = 0;
  int n = SSL_read(ssl_, buffer, sizeof(buffer));
  if (n <= 0) return Failed(c, n, errno);
  for (;;) {
    if (redisReaderFeed(c->reader, buffer, static_cast<size_t>(n)) !=
        REDIS_OK) {
      SetError(c, c->reader->err, c->reader->errstr);
      return REDIS_ERR;
    }
    // What OpenSSL decrypted already is invisible to poll(2): take it now.
    if (SSL_pending(ssl_) <= 0) return REDIS_OK;
    errno = 0;
    n = SSL_read(ssl_, buffer, sizeof(buffer));
    if (n <= 0) return Failed(c, n, errno);
  }
}

int TlsSession::Write(redisContext* c, int* done) {
  const size_t length = sdslen(c->obuf);
  if (length > 0) {
    ERR_clear_error();
    errno = 0;
    const int n = SSL_write(
        ssl_, c->obuf, static_cast<int>(std::min<size_t>(length, INT_MAX)));
    if (n <= 0) {
      const int result = Failed(c, n, errno);
      if (result != REDIS_OK) return result;
    } else {
      // What sdsrange(obuf, n, -1) does, with sds.h's inline functions:
      // hiredis 0.14's sds.h declares no C linkage, so its out-of-line
      // functions cannot be linked from C++.
      const size_t rest = length - static_cast<size_t>(n);
      std::memmove(c->obuf, c->obuf + n, rest);
      sdssetlen(c->obuf, rest);
      c->obuf[rest] = '\0';
    }
  }
  *done = sdslen(c->obuf) == 0 ? 1 : 0;
  return REDIS_OK;
}

bool TlsSession::ReadableWhileIdleMeansLost() {
  const int fd = SSL_get_fd(ssl_);
  if (!SetNonBlocking(fd, true)) return true;
  ERR_clear_error();
  char byte;
  const int n = SSL_peek(ssl_, &byte, 1);
  const int error = n > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_, n);
  ERR_clear_error();
  if (!SetNonBlocking(fd, false)) return true;
  return error != SSL_ERROR_WANT_READ;
}

}  // namespace paddock::internal
