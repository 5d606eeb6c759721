// RedisConnection: hiredis's blocking API with a deadline per call.

#include "redis/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "paddock/clock.h"

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
    const RedisAddress& address, absl::Duration timeout) {
  const timeval tv = SocketTimeout(timeout);
  redisContext* context =
      address.is_unix()
          ? redisConnectUnixWithTimeout(address.unix_path.c_str(), tv)
          : redisConnectWithTimeout(address.host.c_str(), address.port, tv);
  const int saved_errno = errno;
  if (context == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(Prefix(address.text), "cannot allocate a connection"));
  }
  if (context->err != 0) {
    std::string reason = context->errstr;
    // hiredis reports a connect that ran out of time as ETIMEDOUT. EAGAIN
    // is no timeout: a unix socket whose listen queue is full refuses at
    // once (and a TCP connect finds no local port free).
    const bool timed_out =
        context->err == REDIS_ERR_IO &&
        (saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS);
    if (context->err == REDIS_ERR_IO && saved_errno == EAGAIN &&
        address.is_unix()) {
      absl::StrAppend(&reason, " (the server's listen queue is full)");
    }
    redisFree(context);
    if (timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat(Prefix(address.text), "connect timed out after ",
                       absl::FormatDuration(timeout), " (", reason, ")"));
    }
    return absl::UnavailableError(
        absl::StrCat(Prefix(address.text), "cannot connect: ", reason));
  }
  // hiredis 0.14 opens its sockets without close-on-exec: a child the
  // service spawns would hold them open, and Redis would not see a closed
  // connection (a subscriber would stay subscribed, unread).
  if (const int flags = fcntl(context->fd, F_GETFD);
      flags == -1 || fcntl(context->fd, F_SETFD, flags | FD_CLOEXEC) == -1) {
    const int fcntl_errno = errno;
    redisFree(context);
    return absl::UnavailableError(absl::StrCat(
        Prefix(address.text), "cannot set close-on-exec on its socket: ",
        std::generic_category().message(fcntl_errno)));
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
  return std::unique_ptr<RedisConnection>(
      new RedisConnection(address, context));
}

RedisConnection::RedisConnection(const RedisAddress& address,
                                 redisContext* context)
    : address_(address.text), context_(context) {}

RedisConnection::~RedisConnection() { redisFree(context_); }

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
    if (redisBufferRead(context_) != REDIS_OK) {
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
    if (redisBufferWrite(context_, &done) != REDIS_OK) {
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
  if (redisBufferRead(context_) != REDIS_OK) return Fail(errno, "read failed");
  return absl::OkStatus();
}

absl::StatusOr<RedisReplyPtr> RedisConnection::NextReply() {
  void* reply = nullptr;
  if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
    return Fail(errno, "bad reply");
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

absl::Status RedisErrorReply(const RedisAddress& address,
                             const redisReply& reply) {
  return absl::UnavailableError(
      absl::StrCat(Prefix(address.text),
                   "Redis replied: ", absl::string_view(reply.str, reply.len)));
}

bool IsServerUnhealthyReply(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR || reply.str == nullptr) return false;
  const absl::string_view message(reply.str, reply.len);
  for (absl::string_view prefix :
       {"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"}) {
    if (absl::StartsWith(message, prefix)) return true;
  }
  return IsWrongServerReply(reply);
}

bool IsWrongServerReply(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ERROR && reply.str != nullptr &&
         absl::StartsWith(absl::string_view(reply.str, reply.len), "READONLY");
}

}  // namespace paddock::internal
