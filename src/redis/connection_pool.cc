// ConnectionPool.

#include "redis/connection_pool.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paddock::internal {

ConnectionPool::ConnectionPool(RedisEndpoint endpoint, int size,
                               absl::Duration connect_timeout)
    : endpoint_(std::move(endpoint)),
      size_(size),
      connect_timeout_(connect_timeout) {}

ConnectionPool::~ConnectionPool() = default;

absl::StatusOr<std::unique_ptr<RedisConnection>> ConnectionPool::Acquire(
    absl::Time deadline, bool* connect_failed) {
  *connect_failed = false;
  uint64_t generation = 0;
  std::vector<std::unique_ptr<RedisConnection>> lost;  // Closed unlocked.
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (!idle_.empty()) {
        std::unique_ptr<RedisConnection> connection = std::move(idle_.back());
        idle_.pop_back();
        // One the server closed while it sat here (its `timeout`, a
        // restart) would fail the caller's call: open another instead.
        if (!connection->LostWhileIdle()) return connection;
        --open_;
        lost.push_back(std::move(connection));
        continue;
      }
      if (open_ < size_) break;
      const absl::Duration remaining = deadline - MonotonicNow();
      if (remaining <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "paddock::RedisTier: ", endpoint_.address.text, ": all ", size_,
            " connections stayed busy for the I/O timeout"));
      }
      returned_.WaitWithTimeout(&mu_, remaining);
    }
    ++open_;
    generation = generation_;
  }
  // Connect without the lock: other callers may use idle connections
  // meanwhile.
  const absl::Duration timeout =
      std::min(connect_timeout_, deadline - MonotonicNow());
  // Woken for a free place with no time left: the call ran out of time
  // waiting here, which says nothing of the server.
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      timeout > absl::ZeroDuration()
          ? RedisConnection::Open(endpoint_, timeout)
          : absl::DeadlineExceededError(
                absl::StrCat("paddock::RedisTier: ", endpoint_.address.text,
                             ": I/O timeout before connecting"));
  if (!connection.ok()) {
    *connect_failed = timeout > absl::ZeroDuration();
    absl::MutexLock lock(&mu_);
    --open_;
    returned_.Signal();
    return connection.status();
  }
  (*connection)->set_generation(generation);
  return connection;
}

void ConnectionPool::Return(std::unique_ptr<RedisConnection> connection) {
  {
    absl::MutexLock lock(&mu_);
    if (!connection->broken() && connection->generation() == generation_) {
      idle_.push_back(std::move(connection));
    } else {
      --open_;
    }
    returned_.Signal();
  }
  // A connection not kept is closed here, outside the lock.
}

void ConnectionPool::Adopt(std::unique_ptr<RedisConnection> connection) {
  absl::MutexLock lock(&mu_);
  if (open_ >= size_) return;
  ++open_;
  connection->set_generation(generation_);
  idle_.push_back(std::move(connection));
  returned_.Signal();
}

void ConnectionPool::Flush() {
  std::vector<std::unique_ptr<RedisConnection>> closing;
  {
    absl::MutexLock lock(&mu_);
    ++generation_;
    closing.swap(idle_);
    open_ -= static_cast<int>(closing.size());
    returned_.SignalAll();
  }
}

}  // namespace paddock::internal
