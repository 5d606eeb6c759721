// MasterLocator: the master's address, from Redis Sentinel.

#include "redis/sentinel.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "redis/connection.h"
#include "redis/endpoint.h"

namespace paddock::internal {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
// A subscription silent this long is pinged; unanswered by the next, lost.
constexpr absl::Duration kPingEvery = absl::Seconds(2);

int PollMillis(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(
      absl::Ceil(std::min(d, absl::Seconds(10)), absl::Milliseconds(1))));
}

}  // namespace

MasterLocator::MasterLocator(std::vector<RedisAddress> sentinels,
                             std::string master_name)
    : sentinels_(std::move(sentinels)),
      master_name_(std::move(master_name)),
      description_(absl::StrCat("master \"", master_name_, "\" (Sentinel)")) {}

absl::StatusOr<RedisAddress> MasterLocator::Locate(absl::Time deadline) {
  size_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    if (master_.has_value()) return *master_;
    first = first_;
    ++asked_;
  }
  std::vector<std::string> answers;
  for (size_t i = 0; i < sentinels_.size(); ++i) {
    const size_t index = (first + i) % sentinels_.size();
    // This one's share of what is left: the rest, split evenly.
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) break;
    const absl::Time own_deadline =
        MonotonicNow() + left / static_cast<int64_t>(sentinels_.size() - i);
    absl::StatusOr<RedisAddress> master = Ask(sentinels_[index], own_deadline);
    if (master.ok()) {
      absl::MutexLock lock(&mu_);
      master_ = *master;
      first_ = index;
      return *std::move(master);
    }
    answers.emplace_back(master.status().message());
  }
  if (answers.size() < sentinels_.size()) {
    answers.emplace_back("no time left for the others");
  }
  return absl::UnavailableError(
      absl::StrCat("paddock::RedisTier: no sentinel named the address of ",
                   description_, ": ", absl::StrJoin(answers, "; ")));
}

void MasterLocator::Forget(std::string_view address_text) {
  absl::MutexLock lock(&mu_);
  if (master_.has_value() && master_->text == address_text) master_.reset();
}

void MasterLocator::Switched(RedisAddress master) {
  absl::MutexLock lock(&mu_);
  master_ = std::move(master);
}

uint64_t MasterLocator::asked() const {
  absl::MutexLock lock(&mu_);
  return asked_;
}

absl::StatusOr<RedisAddress> MasterLocator::Ask(const RedisAddress& sentinel,
                                                absl::Time deadline) const {
  const absl::Duration timeout = deadline - MonotonicNow();
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::Open(RedisEndpoint{.address = sentinel}, timeout);
  if (!connection.ok()) return connection.status();
  const std::string_view args[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                   master_name_};
  absl::StatusOr<RedisReplyPtr> reply = (*connection)->Command(args, deadline);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  const std::string prefix = absl::StrCat("sentinel ", sentinel.text, ": ");
  if (r.type == REDIS_REPLY_NIL) {
    return absl::UnavailableError(absl::StrCat(
        prefix, "monitors no master named \"", master_name_, "\""));
  }
  if (r.type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(
        absl::StrCat(prefix, absl::string_view(r.str, r.len)));
  }
  int port = 0;
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 ||
      r.element[0]->type != REDIS_REPLY_STRING ||
      r.element[1]->type != REDIS_REPLY_STRING ||
      !absl::SimpleAtoi(absl::string_view(r.element[1]->str, r.element[1]->len),
                        &port)) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "answered no address (is it a sentinel?)"));
  }
  absl::StatusOr<RedisAddress> master =
      TcpAddress(absl::string_view(r.element[0]->str, r.element[0]->len), port);
  if (!master.ok()) {
    return absl::UnavailableError(
        absl::StrCat(prefix, master.status().message()));
  }
  return master;
}

SentinelWatch::SentinelWatch(MasterLocator* locator,
                             absl::Duration connect_timeout,
                             absl::AnyInvocable<void()> on_switch)
    : locator_(locator),
      connect_timeout_(connect_timeout),
      on_switch_(std::move(on_switch)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { Run(); });
}

SentinelWatch::~SentinelWatch() {
  stopping_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  while (write(wake_fd_, &one, sizeof(one)) == -1 && errno == EINTR) {
  }
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void SentinelWatch::Run() {
  absl::Duration backoff = kFirstBackoff;
  for (size_t i = 0; !stopping(); ++i) {
    const std::vector<RedisAddress>& sentinels = locator_->sentinels();
    const RedisAddress& sentinel = sentinels[i % sentinels.size()];
    absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
        RedisConnection::Open(RedisEndpoint{.address = sentinel},
                              connect_timeout_);
    const std::string_view subscribe[] = {"SUBSCRIBE", "+switch-master"};
    if (connection.ok() &&
        (*connection)
            ->Write(subscribe, MonotonicNow() + connect_timeout_)
            .ok()) {
      const absl::Time started = MonotonicNow();
      Listen(**connection);
      // One that served a while has proved itself: no backoff.
      if (MonotonicNow() - started > kPingEvery) backoff = kFirstBackoff;
    }
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void SentinelWatch::Listen(RedisConnection& connection) {
  absl::Time ping_at = MonotonicNow() + kPingEvery;
  bool ping_unanswered = false;
  while (!stopping()) {
    for (;;) {
      absl::StatusOr<RedisReplyPtr> reply = connection.NextReply();
      if (!reply.ok()) return;
      if (*reply == nullptr) break;
      ping_unanswered = false;  // Anything read shows the link lives.
      Handle(**reply);
    }
    pollfd fds[2] = {
        {.fd = connection.fd(), .events = POLLIN, .revents = 0},
        {.fd = wake_fd_, .events = POLLIN, .revents = 0},
    };
    const int ready = poll(fds, 2, PollMillis(ping_at - MonotonicNow()));
    if (ready < 0 && errno != EINTR) return;
    if (stopping()) return;
    if (fds[0].revents != 0) {
      if (!connection.ReadAvailable().ok()) return;
      continue;
    }
    if (MonotonicNow() < ping_at) continue;
    if (ping_unanswered) return;  // Silent for two periods: lost.
    const std::string_view ping[] = {"PING"};
    if (!connection.Write(ping, MonotonicNow() + connect_timeout_).ok()) return;
    ping_unanswered = true;
    ping_at = MonotonicNow() + kPingEvery;
  }
}

void SentinelWatch::Handle(const redisReply& reply) {
  // ["message", "+switch-master", "<name> <old ip> <old port> <ip> <port>"]
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3) return;
  const redisReply* kind = reply.element[0];
  const redisReply* text = reply.element[2];
  if (kind->type != REDIS_REPLY_STRING || text->type != REDIS_REPLY_STRING ||
      absl::string_view(kind->str, kind->len) != "message") {
    return;
  }
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(text->str, text->len), ' ');
  int port = 0;
  if (parts.size() != 5 || parts[0] != locator_->master_name() ||
      !absl::SimpleAtoi(parts[4], &port)) {
    return;
  }
  absl::StatusOr<RedisAddress> master = TcpAddress(parts[3], port);
  if (!master.ok()) return;
  locator_->Switched(*std::move(master));
  switches_.fetch_add(1, std::memory_order_relaxed);
  on_switch_();
}

bool SentinelWatch::Sleep(absl::Duration d) {
  pollfd wake = {.fd = wake_fd_, .events = POLLIN, .revents = 0};
  const absl::Time until = MonotonicNow() + d;
  while (!stopping()) {
    const absl::Duration left = until - MonotonicNow();
    if (left <= absl::ZeroDuration()) return true;
    poll(&wake, 1, PollMillis(left));
  }
  return false;
}

}  // namespace paddock::internal
