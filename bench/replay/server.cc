// Server: the worker pool and its unbounded queue.

#include "server.h"

#include <cstdint>
#include <cstdio>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cost_model.h"
#include "cpu_affinity.h"
#include "metrics.h"

namespace paddock::replay {

Server::Server(int pod, int workers, int cpu, int64_t timeout_nanos,
               RequestHandler* handler, RunMetrics* metrics)
    : pod_(pod), timeout_(timeout_nanos), handler_(handler), metrics_(metrics) {
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, cpu] { Work(cpu); });
  }
}

Server::~Server() { Stop(); }

void Server::Submit(const Request& request) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(request);
      work_ready_.Signal();
      return;
    }
  }
  metrics_->OnEnd(request.hot, request.scheduled, MonotonicNanos(),
                  Outcome::kUnfinished);
}

void Server::Stop() {
  std::deque<Request> left;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    left.swap(queue_);
    work_ready_.SignalAll();
  }
  const int64_t now = MonotonicNanos();
  for (const Request& r : left) {
    metrics_->OnEnd(r.hot, r.scheduled, now, Outcome::kUnfinished);
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void Server::Work(int cpu) {
  if (absl::Status s = PinCurrentThread(cpu); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
  }
  for (;;) {
    Request request;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_ready_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping.
      request = queue_.front();
      queue_.pop_front();
    }
    const int64_t start = MonotonicNanos();
    if (start - request.scheduled > timeout_) {
      metrics_->OnEnd(request.hot, request.scheduled, start, Outcome::kDropped);
    } else {
      metrics_->OnWorkerBusy(pod_, start);
      const RequestHandler::Result result = handler_->Handle(request);
      const int64_t end = MonotonicNanos();
      metrics_->OnWorkerIdle(pod_);
      Outcome outcome;
      if (result == RequestHandler::Result::kAborted) {
        outcome = Outcome::kUnfinished;
      } else if (end - request.scheduled > timeout_) {
        outcome = Outcome::kLate;
      } else {
        outcome = result == RequestHandler::Result::kOk ? Outcome::kOk
                                                        : Outcome::kError;
      }
      metrics_->OnEnd(request.hot, request.scheduled, end, outcome);
    }
  }
}

}  // namespace paddock::replay
