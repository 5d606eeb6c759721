// File: bench/replay/server.h
// -----------------------------------------------------------------------------
// The server under test, one per pod: a fixed pool of worker threads
// (Tomcat's model) behind an unbounded FIFO queue, all pinned to one CPU. It
// never refuses a request: a request waits in the queue however long it is,
// and one that is dequeued after its client gave up is dropped without being
// worked on.

#ifndef PADDOCK_BENCH_REPLAY_SERVER_H_
#define PADDOCK_BENCH_REPLAY_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "metrics.h"

namespace paddock::replay {

// One request, as the load generator issues it.
struct Request {
  int64_t scheduled;  // Its scheduled arrival (MonotonicNanos()).
  bool hot;           // Reads the hot key (else an uncached operation).
};

// What the server does with a request. Called concurrently from the workers.
class RequestHandler {
 public:
  enum class Result { kOk, kError, kAborted };
  virtual ~RequestHandler() = default;
  virtual Result Handle(const Request& request) = 0;
};

class Server {
 public:
  // Starts `workers` threads pinned to `cpu`, counted in `metrics` as pod
  // `pod`'s. `handler` and `metrics` must outlive the server. A request is
  // failed once `timeout_nanos` passed since its scheduled arrival.
  Server(int pod, int workers, int cpu, int64_t timeout_nanos,
         RequestHandler* handler, RunMetrics* metrics);

  // Stops (see Stop()).
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Queues `request`; once stopping, ends it as unfinished instead. Never
  // blocks beyond a short lock. Thread-safe.
  void Submit(const Request& request) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the requests still queued as unfinished, lets the running ones
  // return and joins the workers. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work(int cpu);

  const int pod_;
  const int64_t timeout_;
  RequestHandler* const handler_;
  RunMetrics* const metrics_;

  absl::Mutex mu_;
  absl::CondVar work_ready_;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_SERVER_H_
