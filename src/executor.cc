// ThreadPool and ManualExecutor.

#include "paddock/executor.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace paddock {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) {
    throw std::invalid_argument(
        "paddock::ThreadPool: threads must be >= 1, got " +
        std::to_string(threads));
  }
  workers_.reserve(threads);
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  } catch (...) {
    // A thread that cannot start (EAGAIN) must reach the caller as
    // std::system_error; destroying the joinable threads started so far
    // would call std::terminate instead.
    StopAndJoin();
    throw;
  }
}

ThreadPool::~ThreadPool() { StopAndJoin(); }

void ThreadPool::StopAndJoin() {
  {
    internal::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Schedule(Task task) {
  {
    internal::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::Work() {
  for (;;) {
    Task task;
    {
      internal::MutexLock lock(&mu_);
      mu_.Await(cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !queue_.empty();
      });
      if (queue_.empty()) return;  // Stopping, and the queue is drained.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

void ManualExecutor::Schedule(Task task) {
  internal::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool ManualExecutor::RunOne() {
  Task task;
  {
    internal::MutexLock lock(&mu_);
    if (queue_.empty()) return false;
    task = std::move(queue_.front());
    queue_.pop_front();
  }
  std::move(task)();
  return true;
}

size_t ManualExecutor::RunAll() {
  size_t ran = 0;
  while (RunOne()) ++ran;
  return ran;
}

size_t ManualExecutor::pending() const {
  internal::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace paddock
