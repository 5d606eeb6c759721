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

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "redis/change_log.h"
#include "redis/endpoint.h"
#include "redis/subscriber_hub.h"

namespace paddock::internal {

struct ChangeFeedConfig {
  RedisEndpoint endpoint;
  std::string channel;
  absl::Duration connect_timeout;
  absl::Duration io_timeout;
  absl::Duration health_check_interval;
  // Seeds the reconnect jitter; 0 draws one from the operating system's
  // entropy (SeedOrRandom), so that the pods of a fleet differ.
  uint64_t seed = 0;
  // How long a write that may land late (`ChangeFeed::WriteMayLandLate`) is
  // remembered: longer than Linux retransmits the data of a closed TCP
  // connection (about 100 s with tcp_orphan_retries at its default, on a LAN),
  // the longest a sent command may plausibly wait to reach Redis; a server that
  // hangs longer costs the subscription, whose return drops every copy
  // after such writes landed.
  absl::Duration unsettled_for = absl::Minutes(5);
};

// Returns how long to wait before the next reconnect: `backoff` stretched by
// a factor in [1, 1.5) taken from `bits`. Every pod of a fleet loses its
// subscription at the same instant when their Redis restarts; without the
// jitter they would all reconnect, and drop their entries, in step. Never
// shorter than `backoff`, so the backoff's bound on reconnects holds.
absl::Duration JitteredBackoff(absl::Duration backoff, uint64_t bits);

class ChangeFeed {
 public:
  // The thread shares `log` and `hub`: it may outlive the feed (see the
  // destructor).
  ChangeFeed(ChangeFeedConfig config, std::shared_ptr<ChangeLog> log,
             std::shared_ptr<SubscriberHub> hub);
  // Stops the thread and closes the connection; `hub` delivers nothing
  // more. Called from another thread, returns once the thread has ended.
  // Called on the thread itself (a subscriber's callback dropped the last
  // reference to the tier), cannot wait for it: the thread ends once that
  // callback returns, delivers nothing more, and only then releases the
  // connection, `log` and `hub`, which it co-owns for that reason.
  ~ChangeFeed();
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // ChangeFeed::Start()
  //
  // Connects and subscribes on the calling thread, then starts the thread.
  // Returns the error of the connect or of SUBSCRIBE (and starts nothing).
  // Call once.
  absl::Status Start();

  // ChangeFeed::WriteMayLandLate()
  //
  // A put or invalidation of `key` by this tier failed after its command
  // may have reached Redis (a timeout, a connection lost after sending):
  // Redis may still run it, and later than writes sent after it. For
  // `unsettled_for`, a put or invalidate message of `key` is therefore
  // delivered to every subscription, its origin's included: the writer drops
  // its own copy as every other process does, and the next read takes what
  // Redis holds last. The 1024 latest are remembered. `since` is
  // `passed_over()` from before the write was sent: if a message of `key`
  // was passed over its origin, a subscription of this tier, after it
  // (perhaps that very write's, handled before this call), the thread also
  // delivers an invalidation of `key` to every subscription now.
  // Thread-safe; never throws (out of memory, it remembers nothing).
  void WriteMayLandLate(std::string_view key, uint64_t since);

  // The number of put and invalidate messages so far that were passed over
  // their origin, a subscription of this tier. Thread-safe.
  uint64_t passed_over() const;

  // ChangeFeed::Resubscribe()
  //
  // Makes the thread drop its subscription and subscribe anew, as after a
  // loss (counted, and OnMissedInvalidations delivered): the master moved
  // (a Sentinel failover), and messages published on the new one may not
  // reach the old. Thread-safe; never blocks.
  void Resubscribe();

  // Times the subscription was lost; change messages received. Thread-safe.
  uint64_t losses() const;
  uint64_t messages() const;

 private:
  // Everything the thread uses, shared with it (ChangeFeed::Loop in
  // change_feed.cc).
  class Loop;

  const std::shared_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CHANGE_FEED_H_
