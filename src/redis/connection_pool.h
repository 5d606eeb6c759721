// File: src/redis/connection_pool.h
// -----------------------------------------------------------------------------
// `ConnectionPool`: at most `size` connections to one Redis, handed to one
// caller at a time (hiredis contexts are not thread-safe). A broken
// connection is closed on return, an idle one the server closed meanwhile
// when it would be handed out, and a new one made when needed.

#ifndef PADDOCK_SRC_REDIS_CONNECTION_POOL_H_
#define PADDOCK_SRC_REDIS_CONNECTION_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "redis/connection.h"
#include "redis/endpoint.h"

namespace paddock::internal {

class ConnectionPool {
 public:
  ConnectionPool(RedisEndpoint endpoint, int size,
                 absl::Duration connect_timeout);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // ConnectionPool::Acquire()
  //
  // Returns an idle connection the server has not closed, or opens one if
  // fewer than `size` are open, or waits for one to be returned; all before
  // `deadline` (`MonotonicNow()`). Opening waits for at most
  // `connect_timeout`. Returns `absl::DeadlineExceededError` if none came
  // free in time, or the error of the connect; `*connect_failed` says
  // which. Thread-safe.
  absl::StatusOr<std::unique_ptr<RedisConnection>> Acquire(absl::Time deadline,
                                                           bool* connect_failed)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ConnectionPool::Return()
  //
  // Gives back a connection from Acquire(): kept for the next caller if it
  // is healthy and was opened after the last Flush(), closed otherwise.
  // Thread-safe.
  void Return(std::unique_ptr<RedisConnection> connection)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ConnectionPool::Adopt()
  //
  // Adds a connection opened elsewhere (by Connect, to check the address),
  // unless `size` are open already. Thread-safe.
  void Adopt(std::unique_ptr<RedisConnection> connection)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ConnectionPool::Flush()
  //
  // Closes the idle connections and marks those in use to be closed when
  // returned: after one connection failed, the others have probably lost the
  // server too (a restart), and a new connection costs one round trip.
  // Thread-safe.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const RedisEndpoint endpoint_;
  const int size_;
  const absl::Duration connect_timeout_;

  absl::Mutex mu_;
  absl::CondVar returned_;
  std::vector<std::unique_ptr<RedisConnection>> idle_ ABSL_GUARDED_BY(mu_);
  // Idle, in use, or being opened.
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CONNECTION_POOL_H_
