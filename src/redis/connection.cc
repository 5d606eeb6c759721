// RedisConnection: hiredis's blocking API with a deadline per call.

#include "redis/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "paddock/clock.h"
#include "redis/tls.h"

namespace paddock::internal {
namespace {

// hiredis writes with write(2): a peer that closed its end raises SIGPIPE,
// whose default action kills the process. Blocks it on this thread for the
// duration of a round trip and swallows one that the round trip raised, so
// the write fails with EPIPE instead; the process's signal handling is left
// alone.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec no_wait = {0, 0};
        while (sigtimedwait(&sigpipe_, nullptr, &no_wait) == -1 &&
               errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t sigpipe_;
  sigset_t old_mask_;
  bool was_pending_ = false;
};

// A timeval for SO_RCVTIMEO/SO_SNDTIMEO: at least a millisecond, since a zero
// timeval would mean "no timeout".
timeval SocketTimeout(absl::Duration d) {
  if (d < absl::Milliseconds(1)) d = absl::Milliseconds(1);
  const int64_t micros = absl::ToInt64Microseconds(d);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(micros / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(micros % 1000000);
  return tv;
}

bool IsTimeoutErrno(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT || e == EINPROGRESS;
}

std::string Prefix(std::string_view address) {
  return absl::StrCat("paddock::RedisTier: ",
                      absl::string_view(address.data(), address.size()), ": ");
}

// Connects the non-blocking socket `fd` to `addr` by `deadline`. Returns 0,
// or the errno that failed it (ETIMEDOUT when the deadline passed first).
int ConnectBy(int fd, const sockaddr* addr, socklen_t size,
              absl::Time deadline) {
  if (connect(fd, addr, size) == 0) return 0;
  // EINTR: the connection goes on in the background, as for EINPROGRESS.
  if (errno != EINPROGRESS && errno != EINTR) return errno;
  for (;;) {
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) return ETIMEDOUT;
    const int64_t millis =
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::min<int64_t>(millis, INT_MAX)));
    if (ready == -1 && errno != EINTR) return errno;
    if (ready != 1) continue;  // The loop looks at the deadline.
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == -1) {
      return errno;
    }
    return error;
  }
}

// The status of a connect that failed with `error`.
absl::Status ConnectFailure(const RedisAddress& address, absl::Duration timeout,
                            int error) {
  std::string reason = std::generic_category().message(error);
  if (error == ETIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat(Prefix(address.text), "connect timed out after ",
                     absl::FormatDuration(timeout), " (", reason, ")"));
  }
  // EAGAIN is no timeout: a unix socket whose listen queue is full refuses
  // at once (and a TCP connect finds no local port free).
  if (error == EAGAIN && address.is_unix()) {
    absl::StrAppend(&reason, " (the server's listen queue is full)");
  }
  return absl::UnavailableError(
      absl::StrCat(Prefix(address.text), "cannot connect: ", reason));
}

// Owns a file descriptor until released.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Sockets are made non-blocking, for ConnectBy's deadline, and
// close-on-exec as they are created (see ConnectSocket).
constexpr int kSocketFlags = SOCK_NONBLOCK | SOCK_CLOEXEC;

// ConnectSocket's connect to a unix socket; the socket is left non-blocking
// for ConnectSocket to change, as over TCP.
absl::StatusOr<int> ConnectUnix(const RedisAddress& address,
                                absl::Duration timeout, absl::Time deadline) {
  sockaddr_un unix_address = {};
  unix_address.sun_family = AF_UNIX;
  if (address.unix_path.size() >= sizeof(unix_address.sun_path)) {
    return absl::UnavailableError(absl::StrCat(
        Prefix(address.text), "cannot connect: the socket's path is over ",
        sizeof(unix_address.sun_path) - 1, " bytes"));
  }
  address.unix_path.copy(unix_address.sun_path,
                         sizeof(unix_address.sun_path) - 1);
  Descriptor fd(socket(AF_UNIX, SOCK_STREAM | kSocketFlags, 0));
  if (fd.get() == -1) return ConnectFailure(address, timeout, errno);
  const int error =
      ConnectBy(fd.get(), reinterpret_cast<const sockaddr*>(&unix_address),
                sizeof(unix_address), deadline);
  if (error != 0) return ConnectFailure(address, timeout, error);
  return fd.release();
}

// ConnectSocket's connect over TCP, to each resolved address in turn; the
// socket is left non-blocking for ConnectSocket to change.
absl::StatusOr<int> ConnectTcp(const RedisAddress& address,
                               absl::Duration timeout, absl::Time deadline) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc =
          getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(Prefix(address.text), "cannot connect: ",
                     rc == EAI_SYSTEM ? std::generic_category().message(errno)
                                      : std::string(gai_strerror(rc))));
  }
  // Each address in turn, as hiredis does, until one connects or the
  // time is up.
  int connected = -1;
  int error = ECONNREFUSED;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Descriptor fd(
        socket(a->ai_family, a->ai_socktype | kSocketFlags, a->ai_protocol));
    if (fd.get() == -1) {
      error = errno;
      continue;
    }
    error = ConnectBy(fd.get(), a->ai_addr, a->ai_addrlen, deadline);
    if (error == 0) {
      connected = fd.release();
      break;
    }
    if (error == ETIMEDOUT) break;
  }
  freeaddrinfo(found);
  if (connected == -1) return ConnectFailure(address, timeout, error);
  // Commands are small and answered one by one: no Nagle delay.
  const int one = 1;
  (void)setsockopt(connected, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return connected;
}

// A socket connected to `address` within `timeout`, blocking, with
// close-on-exec set as it is created. hiredis 0.14 makes its sockets
// without it; set afterwards, a fork() and exec() on another thread in
// between (posix_spawn, system()) handed the socket to the child, and Redis
// never saw the connection close (a subscriber stayed subscribed, unread).
absl::StatusOr<int> ConnectSocket(const RedisAddress& address,
                                  absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  absl::StatusOr<int> connected = address.is_unix()
                                      ? ConnectUnix(address, timeout, deadline)
                                      : ConnectTcp(address, timeout, deadline);
  if (!connected.ok()) return connected;
  // hiredis's blocking API expects a blocking socket (SO_RCVTIMEO bounds
  // each call).
  const int flags = fcntl(*connected, F_GETFL);
  if (flags == -1 || fcntl(*connected, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    const int error = errno;
    close(*connected);
    return absl::UnavailableError(
        absl::StrCat(Prefix(address.text), "cannot make its socket blocking: ",
                     std::generic_category().message(error)));
  }
  return connected;
}

struct Argv {
  explicit Argv(absl::Span<const std::string_view> args) {
    pointers.reserve(args.size());
    lengths.reserve(args.size());
    for (std::string_view arg : args) {
      pointers.push_back(arg.data());
      lengths.push_back(arg.size());
    }
  }
  int count() const { return static_cast<int>(pointers.size()); }
  absl::InlinedVector<const char*, 16> pointers;
  absl::InlinedVector<size_t, 16> lengths;
};

}  // namespace

absl::Time MonotonicNow() { return SystemClock::Get()->Now(); }

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Open(
    const RedisEndpoint& endpoint, absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  if (endpoint.source == nullptr) {
    return OpenAt(endpoint, endpoint.address, deadline);
  }
  absl::StatusOr<RedisAddress> located = endpoint.source->Locate(deadline);
  if (!located.ok()) return located.status();
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      OpenAt(endpoint, *located, deadline);
  absl::Status checked = connection.status();
  if (connection.ok() && endpoint.source->requires_master()) {
    checked = (*connection)->CheckIsMaster(deadline);
  }
  if (checked.ok()) return connection;
  // Nothing there (or no master, or no answer in time): the next open goes
  // elsewhere or asks again, which is how a failover is followed.
  endpoint.source->Forget(located->text);
  return checked;
}

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::OpenAt(
    const RedisEndpoint& endpoint, const RedisAddress& address,
    absl::Time deadline) {
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      OpenUnauthenticated(address, deadline - MonotonicNow());
  if (!connection.ok()) return connection;
  if (endpoint.tls != nullptr) {
    absl::StatusOr<std::unique_ptr<TlsSession>> tls =
        TlsSession::Handshake(*endpoint.tls, (*connection)->fd(), address.host,
                              address.text, deadline);
    if (!tls.ok()) return tls.status();
    (*connection)->tls_ = *std::move(tls);
  }
  if (!endpoint.authenticates()) return connection;
  if (absl::Status s = (*connection)->Authenticate(endpoint, deadline);
      !s.ok()) {
    return s;
  }
  return connection;
}

absl::Status RedisConnection::CheckIsMaster(absl::Time deadline) {
  const std::string_view args[] = {"ROLE"};
  absl::StatusOr<RedisReplyPtr> reply = Command(args, deadline);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_ERROR) {
    broken_ = true;
    return absl::Status(ErrorReplyCode(r),
                        absl::StrCat(Prefix(address_), "ROLE was refused: ",
                                     absl::string_view(r.str, r.len)));
  }
  const redisReply* role =
      r.type == REDIS_REPLY_ARRAY && r.elements > 0 ? r.element[0] : nullptr;
  const absl::string_view name =
      role != nullptr && role->type == REDIS_REPLY_STRING
          ? absl::string_view(role->str, role->len)
          : "";
  if (name == "master") return absl::OkStatus();
  broken_ = true;
  return absl::UnavailableError(absl::StrCat(
      Prefix(address_), "the sentinels named it master, but its ROLE is \"",
      name, "\" (a failover in progress?)"));
}

absl::Status RedisConnection::Authenticate(const RedisEndpoint& endpoint,
                                           absl::Time deadline) {
  absl::InlinedVector<std::string_view, 3> args = {"AUTH"};
  if (!endpoint.username.empty()) args.push_back(endpoint.username);
  args.push_back(endpoint.password);
  absl::StatusOr<RedisReplyPtr> reply = Command(args, deadline);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type != REDIS_REPLY_ERROR) return absl::OkStatus();
  broken_ = true;  // Unauthenticated: of no use to anyone.
  // Redis's message names neither the password nor anything derived from
  // it ("WRONGPASS invalid username-password pair or user is disabled.").
  const absl::string_view message =
      r.str != nullptr ? absl::string_view(r.str, r.len) : "";
  return absl::Status(
      IsServerUnhealthyReply(r) ? absl::StatusCode::kUnavailable
                                : absl::StatusCode::kUnauthenticated,
      absl::StrCat(Prefix(endpoint.address.text), "AUTH as ",
                   endpoint.user_for_messages(), " was refused: ", message));
}

absl::StatusOr<std::unique_ptr<RedisConnection>>
RedisConnection::OpenUnauthenticated(const RedisAddress& address,
                                     absl::Duration timeout) {
  absl::StatusOr<int> fd = ConnectSocket(address, timeout);
  if (!fd.ok()) return fd.status();
  // hiredis takes the socket over, and closes it in redisFree.
  redisContext* context = redisConnectFd(*fd);
  if (context == nullptr) {
    close(*fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(Prefix(address.text), "cannot allocate a connection"));
  }
  // Over TCP, a link that dies silently (a NAT or a firewall forgets it)
  // is found by keepalive probes while the connection sits idle in the
  // pool, instead of by the next call's timeout.
  if (!address.is_unix() && redisEnableKeepAlive(context) != REDIS_OK) {
    std::string reason = context->errstr;
    redisFree(context);
    return absl::UnavailableError(absl::StrCat(
        Prefix(address.text), "cannot enable TCP keepalive: ", reason));
  }
  // Out of memory here, the context is still ours to free.
  try {
    return std::unique_ptr<RedisConnection>(
        new RedisConnection(address, context));
  } catch (...) {
    redisFree(context);
    throw;
  }
}

RedisConnection::RedisConnection(const RedisAddress& address,
                                 redisContext* context)
    : address_(address.text), context_(context) {}

// The TLS session goes first: it uses the socket, which redisFree closes.
RedisConnection::~RedisConnection() {
  tls_.reset();
  redisFree(context_);
}

int RedisConnection::BufferRead() {
  return tls_ != nullptr ? tls_->Read(context_) : redisBufferRead(context_);
}

int RedisConnection::BufferWrite(int* done) {
  return tls_ != nullptr ? tls_->Write(context_, done)
                         : redisBufferWrite(context_, done);
}

bool RedisConnection::LostWhileIdle() {
  if (broken_) return true;
  pollfd p{.fd = context_->fd, .events = POLLIN, .revents = 0};
  int ready;
  do {
    ready = poll(&p, 1, 0);
  } while (ready == -1 && errno == EINTR);
  if (ready == 0) return false;  // Nothing to read: open as far as we know.
  if (ready == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0) {
    // Readable: the peer's end of file (it closed the connection, as
    // Redis's `timeout` or a restart does) or bytes nobody asked for.
    // Either way no next reply can be trusted.
    if (tls_ != nullptr) {
      // Readable may mean only a TLS message that carries no data.
      if (!tls_->ReadableWhileIdleMeansLost()) return false;
      broken_ = true;
      return true;
    }
    char byte;
    const ssize_t n = recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  }
  broken_ = true;
  return true;
}

absl::Status RedisConnection::SetTimeout(absl::Time deadline) {
  const absl::Time now = MonotonicNow();
  const absl::Duration remaining = deadline - now;
  if (remaining <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(
        absl::StrCat(Prefix(address_), "I/O timeout before the call"));
  }
  if (redisSetTimeout(context_, SocketTimeout(remaining)) != REDIS_OK) {
    return Fail(errno, "setting the socket timeout");
  }
  armed_at_ = now;
  return absl::OkStatus();
}

absl::Status RedisConnection::Fail(int saved_errno, std::string_view during) {
  broken_ = true;
  const std::string what = absl::StrCat(
      Prefix(address_), absl::string_view(during.data(), during.size()));
  switch (context_->err) {
    case REDIS_ERR_IO:
      if (IsTimeoutErrno(saved_errno)) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": no reply within the I/O timeout"));
      }
      return absl::UnavailableError(absl::StrCat(what, ": ", context_->errstr));
    case REDIS_ERR_PROTOCOL:
      return absl::DataLossError(
          absl::StrCat(what, ": protocol error: ", context_->errstr));
    case REDIS_ERR_EOF:
      return absl::UnavailableError(
          absl::StrCat(what, ": the server closed the connection"));
    default:
      return absl::UnavailableError(absl::StrCat(what, ": ", context_->errstr));
  }
}

absl::StatusOr<RedisReplyPtr> RedisConnection::Command(
    absl::Span<const std::string_view> args, absl::Time deadline) {
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat(Prefix(address_), "connection is broken"));
  }
  if (absl::Status s = SetTimeout(deadline); !s.ok()) return s;
  Argv argv(args);
  if (redisAppendCommandArgv(context_, argv.count(), argv.pointers.data(),
                             argv.lengths.data()) != REDIS_OK) {
    return Fail(errno, "formatting a command");
  }
  ScopedSigpipeBlock no_sigpipe;
  if (absl::Status s = Flush(deadline); !s.ok()) return s;
  // What redisGetReply does, with the timeout re-armed between reads.
  for (;;) {
    void* reply = nullptr;
    if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
      return Fail(errno, "bad reply");
    }
    if (reply != nullptr) {
      return RedisReplyPtr(static_cast<redisReply*>(reply));
    }
    if (absl::Status s = Rearm(deadline); !s.ok()) return s;
    if (BufferRead() != REDIS_OK) {
      return Fail(errno, "command failed");
    }
  }
}

absl::Status RedisConnection::Write(absl::Span<const std::string_view> args,
                                    absl::Time deadline) {
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat(Prefix(address_), "connection is broken"));
  }
  if (absl::Status s = SetTimeout(deadline); !s.ok()) return s;
  Argv argv(args);
  if (redisAppendCommandArgv(context_, argv.count(), argv.pointers.data(),
                             argv.lengths.data()) != REDIS_OK) {
    return Fail(errno, "formatting a command");
  }
  ScopedSigpipeBlock no_sigpipe;
  return Flush(deadline);
}

absl::Status RedisConnection::Flush(absl::Time deadline) {
  for (;;) {
    int done = 0;
    if (BufferWrite(&done) != REDIS_OK) {
      return Fail(errno, "write failed");
    }
    if (done != 0) return absl::OkStatus();
    // A partial write (the socket's buffer filled), or EINTR.
    if (absl::Status s = Rearm(deadline); !s.ok()) return s;
  }
}

absl::Status RedisConnection::Rearm(absl::Time deadline) {
  const absl::Time now = MonotonicNow();
  if (now >= deadline) {
    broken_ = true;  // A command is half sent, or its reply half read.
    return absl::DeadlineExceededError(
        absl::StrCat(Prefix(address_), "no reply within the I/O timeout"));
  }
  if (now - armed_at_ < kRearmAfter) return absl::OkStatus();
  absl::Status s = SetTimeout(deadline);
  if (!s.ok()) broken_ = true;
  return s;
}

absl::Status RedisConnection::ReadAvailable() {
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat(Prefix(address_), "connection is broken"));
  }
  if (BufferRead() != REDIS_OK) return Fail(errno, "read failed");
  return absl::OkStatus();
}

absl::StatusOr<RedisReplyPtr> RedisConnection::NextReply() {
  void* reply = nullptr;
  if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
    return Fail(errno, "bad reply");
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

absl::StatusCode ErrorReplyCode(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR || reply.str == nullptr) {
    return absl::StatusCode::kUnavailable;
  }
  const absl::string_view message(reply.str, reply.len);
  if (absl::StartsWith(message, "NOAUTH") ||
      absl::StartsWith(message, "WRONGPASS")) {
    return absl::StatusCode::kUnauthenticated;
  }
  // A command a script runs is refused with an ERR of its own ("The user
  // executing the script can't run this command or subcommand", "... can't
  // access at least one of the keys ...", "... can't publish to the
  // channel ...").
  if (absl::StartsWith(message, "NOPERM") ||
      absl::StrContains(message, "The user executing the script can't")) {
    return absl::StatusCode::kPermissionDenied;
  }
  return absl::StatusCode::kUnavailable;
}

absl::Status RedisErrorReply(const RedisAddress& address,
                             const redisReply& reply) {
  return absl::Status(ErrorReplyCode(reply),
                      absl::StrCat(Prefix(address.text), "Redis replied: ",
                                   absl::string_view(reply.str, reply.len)));
}

bool IsServerUnhealthyReply(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR || reply.str == nullptr) return false;
  const absl::string_view message(reply.str, reply.len);
  for (absl::string_view prefix :
       {"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN"}) {
    if (absl::StartsWith(message, prefix)) return true;
  }
  return IsWrongServerReply(reply);
}

bool IsWrongServerReply(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ERROR && reply.str != nullptr &&
         absl::StartsWith(absl::string_view(reply.str, reply.len), "READONLY");
}

}  // namespace paddock::internal
