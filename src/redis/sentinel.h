// File: src/redis/sentinel.h
// -----------------------------------------------------------------------------
// `MasterLocator`: where the master that Redis Sentinel monitors under a name
// is now. Every new connection of a tier in Sentinel mode asks it for the
// master's address; it answers from what it found last, or asks the
// sentinels (SENTINEL GET-MASTER-ADDR-BY-NAME) when it has nothing. A
// connection that finds no master there (refused, timed out, a replica by
// ROLE, a READONLY reply) makes it forget that address, so that the next
// connection asks the sentinels again and follows a failover.
//
// `SentinelWatch` hears of a failover as soon as the sentinels announce it
// (`+switch-master`), rather than at the next failed call: the old master
// may stay up, and take writes, for seconds after its replica was promoted.
//
// Sentinels are asked over plain TCP without AUTH: the tier's password and
// TLS options are the master's.

#ifndef PADDOCK_SRC_REDIS_SENTINEL_H_
#define PADDOCK_SRC_REDIS_SENTINEL_H_

#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "redis/address.h"
#include "redis/endpoint.h"

namespace paddock::internal {

class RedisConnection;  // redis/connection.h

class MasterLocator final : public AddressSource {
 public:
  // `sentinels`: where to ask, in the order given; `master_name`: the name
  // they monitor the master under (`sentinel monitor <name> ...`).
  MasterLocator(std::vector<RedisAddress> sentinels, std::string master_name);
  MasterLocator(const MasterLocator&) = delete;
  MasterLocator& operator=(const MasterLocator&) = delete;

  // MasterLocator::Locate()
  //
  // The master's address: the one found last, or else the first answer of
  // the sentinels, asked in turn (the one that answered last first), each
  // within its share of what is left before `deadline` (`MonotonicNow()`),
  // so that one hung sentinel does not use up the time of the others.
  // Blocks for the questions. Returns `absl::UnavailableError` naming the
  // master and the sentinels' answers when none names a master (down,
  // unknown name, no answer in time). Thread-safe; concurrent callers may
  // each ask.
  absl::StatusOr<RedisAddress> Locate(absl::Time deadline) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // MasterLocator::Forget()
  //
  // Forgets the master found last if its address is `address_text`: a
  // connection found no master there. Thread-safe; never blocks on I/O.
  void Forget(std::string_view address_text) override ABSL_LOCKS_EXCLUDED(mu_);

  // A master it is: the connection checks ROLE.
  bool requires_master() const override { return true; }

  // MasterLocator::Switched()
  //
  // The sentinels announced `master` as the new master: the next
  // connections go there. Thread-safe; never blocks on I/O.
  void Switched(RedisAddress master) ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<RedisAddress>& sentinels() const { return sentinels_; }
  const std::string& master_name() const { return master_name_; }
  // "master "<name>" (Sentinel)", for messages about no address in
  // particular.
  const std::string& description() const { return description_; }
  // How many times the sentinels were asked, answered or not.
  uint64_t asked() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One sentinel's answer, before `deadline`.
  absl::StatusOr<RedisAddress> Ask(const RedisAddress& sentinel,
                                   absl::Time deadline) const;

  const std::vector<RedisAddress> sentinels_;
  const std::string master_name_;
  const std::string description_;

  mutable absl::Mutex mu_;
  std::optional<RedisAddress> master_ ABSL_GUARDED_BY(mu_);
  // The index in sentinels_ of the one that answered last.
  size_t first_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t asked_ ABSL_GUARDED_BY(mu_) = 0;
};

// Subscribed to `+switch-master` on one sentinel at a time (the next when it
// is lost), on a thread of its own: for an announcement of the locator's
// master name, it tells the locator and calls `on_switch` on that thread.
class SentinelWatch {
 public:
  // Starts the thread. `locator` must outlive the watch. Throws
  // std::system_error if no thread can be started.
  SentinelWatch(MasterLocator* locator, absl::Duration connect_timeout,
                absl::AnyInvocable<void()> on_switch);
  // Stops the thread and waits for it (an `on_switch` in progress included).
  ~SentinelWatch();
  SentinelWatch(const SentinelWatch&) = delete;
  SentinelWatch& operator=(const SentinelWatch&) = delete;

  // How many switches of the master were announced so far. Thread-safe.
  uint64_t switches() const {
    return switches_.load(std::memory_order_relaxed);
  }

 private:
  void Run();
  // Listens on one subscribed connection until it is lost or stopping.
  void Listen(RedisConnection& connection);
  // Handles one reply: a switch of our master is passed on.
  void Handle(const redisReply& reply);
  // Sleeps `d` or until stopping; false when stopping.
  bool Sleep(absl::Duration d);
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  MasterLocator* const locator_;
  const absl::Duration connect_timeout_;
  absl::AnyInvocable<void()> on_switch_;
  // Written by the destructor to wake the thread from poll().
  const int wake_fd_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> switches_{0};
  std::thread thread_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_SENTINEL_H_
