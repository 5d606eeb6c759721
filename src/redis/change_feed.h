// File: src/redis/change_feed.h
// -----------------------------------------------------------------------------
// `ChangeFeed`: the tier's subscription to its change channel. A thread of
// its own, on a connection of its own, reads the change messages, records
// each in the `ChangeLog` (waking `AwaitChange`) and passes puts and
// invalidations to the `SubscriberHub`. It pings Redis every health-check
// interval; a lost connection or an unanswered ping counts the subscription
// as lost: it reconnects with backoff, and once subscribed again tells every
// subscriber that it may have missed invalidations.

#ifndef PADDOCK_SRC_REDIS_CHANGE_FEED_H_
#define PADDOCK_SRC_REDIS_CHANGE_FEED_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "redis/address.h"
#include "redis/change_log.h"
#include "redis/connection.h"
#include "redis/subscriber_hub.h"

namespace paddock::internal {

struct ChangeFeedConfig {
  RedisAddress address;
  std::string channel;
  absl::Duration connect_timeout;
  absl::Duration io_timeout;
  absl::Duration health_check_interval;
  // Seeds the reconnect jitter; 0 draws one from the operating system's
  // entropy (SeedOrRandom), so that the pods of a fleet differ.
  uint64_t seed = 0;
};

// Returns how long to wait before the next reconnect: `backoff` stretched by
// a factor in [1, 1.5) taken from `bits`. Every pod of a fleet loses its
// subscription at the same instant when their Redis restarts; without the
// jitter they would all reconnect, and drop their entries, in step. Never
// shorter than `backoff`, so the backoff's bound on reconnects holds.
absl::Duration JitteredBackoff(absl::Duration backoff, uint64_t bits);

class ChangeFeed {
 public:
  // `log` (not owned) must outlive the feed.
  ChangeFeed(ChangeFeedConfig config, ChangeLog* log,
             std::shared_ptr<SubscriberHub> hub);
  // Stops the thread and closes the connection.
  ~ChangeFeed();
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // ChangeFeed::Start()
  //
  // Connects and subscribes on the calling thread, then starts the thread.
  // Returns the error of the connect or of SUBSCRIBE (and starts nothing).
  // Call once.
  absl::Status Start();

  // Times the subscription was lost; change messages received. Thread-safe.
  uint64_t losses() const { return losses_.load(std::memory_order_relaxed); }
  uint64_t messages() const {
    return messages_.load(std::memory_order_relaxed);
  }

 private:
  void Run();
  absl::StatusOr<std::unique_ptr<RedisConnection>> OpenSubscribed();
  // Handles one reply on the subscribed connection. Returns false if it
  // says the subscription is broken; sets *pong for a ping's answer.
  bool Handle(const redisReply& reply, bool* pong);
  // Whether `fd` has something to read now. Never blocks.
  static bool Readable(int fd);
  // Sleeps up to `timeout` or until Stop. Returns false when stopping.
  bool Sleep(absl::Duration timeout);
  void DrainWakeFd();

  const ChangeFeedConfig config_;
  ChangeLog* const log_;
  const std::shared_ptr<SubscriberHub> hub_;

  // An eventfd that the destructor writes to wake the thread from poll().
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> losses_{0};
  std::atomic<uint64_t> messages_{0};

  // Set by Start(), then used by the thread only.
  std::unique_ptr<RedisConnection> connection_;
  uint64_t jitter_state_ = 0;  // SplitMix64 state of the reconnect jitter.
  std::thread thread_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CHANGE_FEED_H_
