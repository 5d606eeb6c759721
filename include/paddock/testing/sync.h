// File: paddock/testing/sync.h
// -----------------------------------------------------------------------------
// Small synchronisation helpers for tests with real threads: a gate loaders
// block on until the test opens it, and a counter tests can wait on. Waits are
// bounded so a broken test fails instead of hanging. Used by paddock's tests
// and by the policy contract (paddock/testing/policy_contract.h).

#ifndef PADDOCK_TESTING_SYNC_H_
#define PADDOCK_TESTING_SYNC_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace paddock::testing {

// Gate
//
// Threads calling `Wait()` block until `Open()` is called. Thread-safe.
class Gate {
 public:
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Returns false if the gate stayed closed for a minute.
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::minutes(1), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Counter
//
// A counter whose value can be awaited. Thread-safe.
class Counter {
 public:
  int Increment() {
    int now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      now = ++value_;
    }
    cv_.notify_all();
    return now;
  }
  int value() {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }
  // Returns false if the value stayed below `n` for a minute.
  bool WaitFor(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::minutes(1),
                        [&] { return value_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int value_ = 0;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_SYNC_H_
