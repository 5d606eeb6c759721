// ChangeFeed: the subscription thread.

#include "redis/change_feed.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paddock/internal/seed.h"
#include "paddock/internal/splitmix.h"
#include "redis/change_log.h"
#include "redis/connection.h"
#include "redis/protocol.h"
#include "redis/subscriber_hub.h"

namespace paddock::internal {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(20);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// The most writes that may land late remembered at once.
constexpr size_t kMaxUnsettled = 1024;
// The most recent messages passed over their origin whose keys are kept.
constexpr uint64_t kPassedOverKept = 1024;

bool IsString(const redisReply* r, std::string_view text) {
  return r != nullptr && r->type == REDIS_REPLY_STRING && r->str != nullptr &&
         std::string_view(r->str, r->len) == text;
}

int PollMillis(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, 60'000));
}

}  // namespace

absl::Duration JitteredBackoff(absl::Duration backoff, uint64_t bits) {
  // Half the backoff times bits / 2^64, in integers: a double product would
  // round up to the full half.
  const int64_t half = absl::ToInt64Nanoseconds(backoff) / 2;
  if (half <= 0) return backoff;
  const absl::uint128 extra =
      (absl::uint128(static_cast<uint64_t>(half)) * bits) >> 64;
  return backoff + absl::Nanoseconds(absl::Uint128Low64(extra));
}

// The thread's state and code. Owned jointly by the feed and the thread: a
// feed destroyed on the thread, from a subscriber's callback, cannot wait
// for the thread, which then carries on with this until it sees `stopping`.
class ChangeFeed::Loop {
 public:
  Loop(ChangeFeedConfig config, std::shared_ptr<ChangeLog> log,
       std::shared_ptr<SubscriberHub> hub)
      : config_(std::move(config)),
        log_(std::move(log)),
        hub_(std::move(hub)),
        wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~Loop() {
    if (wake_fd_ >= 0) close(wake_fd_);
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Connects and subscribes on the calling thread; readies Run().
  absl::Status Start();
  // The thread's body: returns once stopping.
  void Run();
  // Makes Run() return, and the hub deliver nothing more. Thread-safe.
  void Stop();
  // ChangeFeed::Resubscribe.
  void Resubscribe();
  // ChangeFeed::WriteMayLandLate. May throw std::bad_alloc.
  void WriteMayLandLate(std::string_view key, uint64_t since);
  uint64_t passed_over() const;

  uint64_t losses() const { return losses_.load(std::memory_order_relaxed); }
  uint64_t messages() const {
    return messages_.load(std::memory_order_relaxed);
  }

 private:
  absl::StatusOr<std::unique_ptr<RedisConnection>> OpenSubscribed();
  // Handles one reply on the subscribed connection. Returns false if it
  // says the subscription is broken; sets *pong for a ping's answer.
  bool Handle(const redisReply& reply, bool* pong);
  // Whether `fd` has something to read now. Never blocks.
  static bool Readable(int fd);
  // Sleeps up to `timeout` or until Stop, delivering what is posted
  // meanwhile. Returns false when stopping.
  bool Sleep(absl::Duration timeout);
  void DrainWakeFd();
  // Wakes the thread from poll().
  void Wake();
  // The subscription a put or invalidate message of `key` from `origin` is
  // not delivered to: `origin`, or 0 if a write of `key` may land late.
  uint64_t Skip(std::string_view key, uint64_t origin);
  // Forgets the writes remembered for longer than unsettled_for.
  void ForgetSettled(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(late_mu_);
  // Delivers the invalidations WriteMayLandLate posted.
  void DeliverPosted();
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Run()'s phases, apart so that each reads alone.
  // Waits the backoff, then opens a new subscription. Returns false when
  // stopping.
  bool Reconnect();
  // One poll of a live subscription: buffered replies, posted
  // invalidations, new replies, then the ping. Returns false when stopping.
  bool PollOnce();
  // Handles every reply hiredis holds already, until stopping (a callback
  // may have destroyed the feed); false if the connection is unusable.
  bool HandleBuffered();
  // Drops the connection; counted, and the log told so.
  void Lose();
  // Pings when due; a ping unanswered past its deadline is a loss.
  void CheckHealth();

  const ChangeFeedConfig config_;
  const std::shared_ptr<ChangeLog> log_;
  const std::shared_ptr<SubscriberHub> hub_;

  // An eventfd that Stop() writes to wake the thread from poll().
  const int wake_fd_;
  std::atomic<bool> stopping_{false};
  // Set by Resubscribe(), taken by the thread.
  std::atomic<bool> resubscribe_{false};
  std::atomic<uint64_t> losses_{0};
  std::atomic<uint64_t> messages_{0};

  mutable absl::Mutex late_mu_;
  struct Unsettled {
    size_t key_hash;
    absl::Time until;
  };
  // In the order remembered, which is that of `until`.
  std::deque<Unsettled> unsettled_ ABSL_GUARDED_BY(late_mu_);
  // Keys to invalidate everywhere, on the thread.
  std::vector<std::string> posted_ ABSL_GUARDED_BY(late_mu_);
  // Messages passed over an origin of this tier: their number, and the key
  // hash of message n at passed_over_keys_[n % kPassedOverKept].
  uint64_t passed_over_ ABSL_GUARDED_BY(late_mu_) = 0;
  std::array<size_t, kPassedOverKept> passed_over_keys_
      ABSL_GUARDED_BY(late_mu_) = {};

  // Set by Start(), then used by the thread only.
  std::unique_ptr<RedisConnection> connection_;
  uint64_t jitter_state_ = 0;  // SplitMix64 state of the reconnect jitter.

  // Used by the thread only.
  absl::Duration backoff_ = kFirstBackoff;
  absl::Time next_ping_;
  std::optional<absl::Time> pong_due_;  // Set while a ping is unanswered.
};

ChangeFeed::ChangeFeed(ChangeFeedConfig config, std::shared_ptr<ChangeLog> log,
                       std::shared_ptr<SubscriberHub> hub)
    : loop_(std::make_shared<Loop>(std::move(config), std::move(log),
                                   std::move(hub))) {}

ChangeFeed::~ChangeFeed() {
  if (!thread_.joinable()) return;
  loop_->Stop();
  if (thread_.get_id() == std::this_thread::get_id()) {
    // From a callback on the thread: join() would throw (EDEADLK) out of a
    // destructor. The thread stops after the callback returns, and keeps
    // the loop alive until then.
    thread_.detach();
  } else {
    thread_.join();
  }
}

void ChangeFeed::WriteMayLandLate(std::string_view key, uint64_t since) {
  try {
    loop_->WriteMayLandLate(key, since);
  } catch (...) {
    // Out of memory: the writer may keep its copy until it expires.
  }
}

uint64_t ChangeFeed::passed_over() const { return loop_->passed_over(); }

void ChangeFeed::Resubscribe() { loop_->Resubscribe(); }
uint64_t ChangeFeed::losses() const { return loop_->losses(); }
uint64_t ChangeFeed::messages() const { return loop_->messages(); }

absl::Status ChangeFeed::Start() {
  if (absl::Status started = loop_->Start(); !started.ok()) return started;
  // The thread holds a reference of its own, dropped on the thread as it
  // ends: after a detach it may be the last.
  thread_ = std::thread([loop = loop_]() mutable {
    loop->Run();
    loop.reset();
  });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RedisConnection>>
ChangeFeed::Loop::OpenSubscribed() {
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::Open(config_.endpoint, config_.connect_timeout);
  if (!connection.ok()) return connection.status();
  const std::string_view args[] = {"SUBSCRIBE", config_.channel};
  absl::StatusOr<RedisReplyPtr> reply =
      (*connection)->Command(args, MonotonicNow() + config_.io_timeout);
  if (!reply.ok()) {
    // A node that accepts connections but does not answer (hung): the next
    // try goes elsewhere, if the endpoint has an elsewhere.
    if (config_.endpoint.source != nullptr) {
      config_.endpoint.source->Forget((*connection)->address());
    }
    return reply.status();
  }
  const redisReply& r = **reply;
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 ||
      !IsString(r.element[0], "subscribe")) {
    // A NOPERM (the ACL forbids the channel) is PermissionDenied.
    return absl::Status(
        ErrorReplyCode(r),
        absl::StrCat("paddock::RedisTier: ", config_.endpoint.address.text,
                     ": SUBSCRIBE ", config_.channel, " was refused",
                     r.type == REDIS_REPLY_ERROR
                         ? absl::StrCat(": ", absl::string_view(r.str, r.len))
                         : std::string()));
  }
  return connection;
}

absl::Status ChangeFeed::Loop::Start() {
  if (wake_fd_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "paddock::RedisTier: cannot create an eventfd: errno ", errno));
  }
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      OpenSubscribed();
  if (!connection.ok()) return connection.status();
  connection_ = *std::move(connection);
  // Drawn here, not on the thread: std::random_device may throw, and a
  // throw there would end the process.
  jitter_state_ = SeedOrRandom(config_.seed);
  log_->SetConnected(true);
  return absl::OkStatus();
}

void ChangeFeed::Loop::Stop() {
  stopping_.store(true, std::memory_order_release);
  hub_->Close();
  Wake();
}

void ChangeFeed::Loop::Resubscribe() {
  resubscribe_.store(true, std::memory_order_release);
  Wake();
}

void ChangeFeed::Loop::Wake() {
  const uint64_t one = 1;
  // The eventfd counter cannot overflow from one write; nothing to handle.
  while (write(wake_fd_, &one, sizeof(one)) == -1 && errno == EINTR) {
  }
}

void ChangeFeed::Loop::DrainWakeFd() {
  uint64_t count = 0;
  while (read(wake_fd_, &count, sizeof(count)) == -1 && errno == EINTR) {
  }
}

bool ChangeFeed::Loop::Readable(int fd) {
  pollfd socket = {.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&socket, 1, 0) > 0 && (socket.revents & POLLIN) != 0;
}

bool ChangeFeed::Loop::Sleep(absl::Duration timeout) {
  const absl::Time until = MonotonicNow() + timeout;
  while (!stopping()) {
    const absl::Duration left = until - MonotonicNow();
    if (left <= absl::ZeroDuration()) return true;
    pollfd wake = {.fd = wake_fd_, .events = POLLIN, .revents = 0};
    if (poll(&wake, 1, PollMillis(left)) > 0) {
      DrainWakeFd();
      DeliverPosted();
    }
  }
  return false;
}

void ChangeFeed::Loop::WriteMayLandLate(std::string_view key, uint64_t since) {
  const absl::Time now = MonotonicNow();
  const size_t hash = std::hash<std::string_view>{}(key);
  {
    absl::MutexLock lock(&late_mu_);
    ForgetSettled(now);
    if (unsettled_.size() >= kMaxUnsettled) unsettled_.pop_front();
    unsettled_.push_back(
        {.key_hash = hash, .until = now + config_.unsettled_for});
    // From now on Skip() delivers the write's message to its origin; had
    // the thread handled it before, it passed it over, and said so here.
    bool passed_over = passed_over_ - since >= kPassedOverKept;
    for (uint64_t n = since + 1; n <= passed_over_ && !passed_over; ++n) {
      passed_over = passed_over_keys_[n % kPassedOverKept] == hash;
    }
    if (!passed_over) return;
    posted_.emplace_back(key);
  }
  const uint64_t one = 1;
  while (write(wake_fd_, &one, sizeof(one)) == -1 && errno == EINTR) {
  }
}

void ChangeFeed::Loop::ForgetSettled(absl::Time now) {
  while (!unsettled_.empty() && unsettled_.front().until <= now) {
    unsettled_.pop_front();
  }
}

uint64_t ChangeFeed::Loop::passed_over() const {
  absl::MutexLock lock(&late_mu_);
  return passed_over_;
}

uint64_t ChangeFeed::Loop::Skip(std::string_view key, uint64_t origin) {
  // Looked up outside late_mu_, which Has's lock never nests in.
  const bool ours = origin != 0 && hub_->Has(origin);
  const size_t hash = std::hash<std::string_view>{}(key);
  absl::MutexLock lock(&late_mu_);
  ForgetSettled(MonotonicNow());
  if (std::any_of(unsettled_.begin(), unsettled_.end(),
                  [hash](const Unsettled& u) { return u.key_hash == hash; })) {
    return 0;
  }
  if (ours) passed_over_keys_[++passed_over_ % kPassedOverKept] = hash;
  return origin;
}

void ChangeFeed::Loop::DeliverPosted() {
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&late_mu_);
    keys.swap(posted_);
  }
  for (const std::string& key : keys) {
    if (stopping()) return;
    hub_->DeliverInvalidate(key, /*origin=*/0);
  }
}

bool ChangeFeed::Loop::Handle(const redisReply& reply, bool* pong) {
  if (reply.type == REDIS_REPLY_ERROR) return false;
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 1) return true;
  redisReply* const* e = reply.element;
  if (IsString(e[0], "pong")) {
    *pong = true;
    return true;
  }
  if (!IsString(e[0], "message") || reply.elements != 3 ||
      e[2]->type != REDIS_REPLY_STRING || e[2]->str == nullptr) {
    return true;  // Subscription confirmations and the like.
  }
  messages_.fetch_add(1, std::memory_order_relaxed);
  const std::optional<ChangeMessage> message =
      ParseChangeMessage(std::string_view(e[2]->str, e[2]->len));
  if (!message.has_value()) return true;  // Not ours: ignore it.
  log_->Record(message->key);
  if (message->kind == ChangeKind::kPut ||
      message->kind == ChangeKind::kInvalidate) {
    // A write of this tier's that may have landed late is delivered to its
    // origin too: the writer's copy may not be what Redis holds last.
    hub_->DeliverInvalidate(message->key, Skip(message->key, message->origin));
  }
  // Every kind, every origin: what wakes loads parked for another
  // process's fill (a cache's own invalidation first, then the wake).
  if (!stopping()) hub_->DeliverChange(message->key);
  return true;
}

void ChangeFeed::Loop::Run() {
  next_ping_ = MonotonicNow() + config_.health_check_interval;
  while (!stopping()) {
    const bool go_on = connection_ == nullptr ? Reconnect() : PollOnce();
    if (!go_on) break;
  }
  connection_.reset();
}

void ChangeFeed::Loop::Lose() {
  // Without a fixed address the next subscription goes elsewhere: another
  // node of a cluster, or the master the sentinels name now.
  if (connection_ != nullptr && config_.endpoint.source != nullptr) {
    config_.endpoint.source->Forget(connection_->address());
  }
  connection_.reset();
  pong_due_.reset();
  losses_.fetch_add(1, std::memory_order_relaxed);
  log_->SetConnected(false);
}

bool ChangeFeed::Loop::HandleBuffered() {
  for (;;) {
    absl::StatusOr<RedisReplyPtr> reply = connection_->NextReply();
    if (!reply.ok()) return false;
    if (*reply == nullptr) return true;  // Nothing more buffered.
    bool pong = false;
    if (!Handle(**reply, &pong)) return false;
    if (stopping()) return true;
    if (pong) {
      pong_due_.reset();
      next_ping_ = MonotonicNow() + config_.health_check_interval;
      backoff_ = kFirstBackoff;  // This connection has proved itself.
    }
  }
}

bool ChangeFeed::Loop::Reconnect() {
  if (!Sleep(JitteredBackoff(backoff_, SplitMixNext(&jitter_state_)))) {
    return false;
  }
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      OpenSubscribed();
  if (!connection.ok()) {
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    return true;
  }
  connection_ = *std::move(connection);
  // Reset by the first pong, not here: a connection dropped as soon as
  // it subscribes (a proxy, a server refusing us) must not make this
  // thread reconnect, and every cache drop its entries, every 20 ms.
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  next_ping_ = MonotonicNow() + config_.health_check_interval;
  log_->SetConnected(true);
  // Whatever was published while we were away is lost.
  hub_->DeliverMissed();
  return true;
}

bool ChangeFeed::Loop::PollOnce() {
  // poll() sees only the socket: what one read took in beyond the reply
  // it was for (the SUBSCRIBE confirmation's, say) is handled first.
  if (!HandleBuffered()) {
    Lose();
    return true;
  }
  if (stopping()) return false;
  const absl::Time wake_at = pong_due_.value_or(next_ping_);
  pollfd fds[2] = {
      {.fd = connection_->fd(), .events = POLLIN, .revents = 0},
      {.fd = wake_fd_, .events = POLLIN, .revents = 0},
  };
  const int ready = poll(fds, 2, PollMillis(wake_at - MonotonicNow()));
  if (ready < 0 && errno != EINTR) {
    Lose();
    return true;
  }
  if (fds[1].revents != 0) {
    DrainWakeFd();
    DeliverPosted();
  }
  if (stopping()) return false;
  if (resubscribe_.exchange(false, std::memory_order_acq_rel)) {
    Lose();
    return true;
  }

  if (fds[0].revents != 0 &&
      (!connection_->ReadAvailable().ok() || !HandleBuffered())) {
    Lose();
    return true;
  }
  if (stopping()) return false;
  CheckHealth();
  return true;
}

void ChangeFeed::Loop::CheckHealth() {
  const absl::Time now = MonotonicNow();
  if (pong_due_.has_value() && now >= *pong_due_) {
    // Late by this thread's own doing (a slow subscriber held it) if
    // anything is waiting on the socket: the pong may be there, read it
    // first. Only a silent socket past the deadline is a loss.
    if (Readable(connection_->fd())) return;
    Lose();  // Redis stopped answering (hung, paused, or a dead link).
  } else if (!pong_due_.has_value() && now >= next_ping_) {
    const std::string_view ping[] = {"PING"};
    if (!connection_->Write(ping, now + config_.io_timeout).ok()) {
      Lose();
    } else {
      pong_due_ = now + config_.health_check_interval;
    }
  }
}

}  // namespace paddock::internal
