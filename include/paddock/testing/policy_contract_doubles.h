// File: paddock/testing/policy_contract_doubles.h
// -----------------------------------------------------------------------------
// Test doubles the suites share: a manual executor that can be swapped, a
// backend that counts and scripts loads, gates and latches, and the writes the
// stress and race tests apply.
//
// Part of the policy contract; include "paddock/testing/policy_contract.h",
// which registers the suites, rather than this file.

#ifndef PADDOCK_TESTING_POLICY_CONTRACT_DOUBLES_H_
#define PADDOCK_TESTING_POLICY_CONTRACT_DOUBLES_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/stats.h"
#include "paddock/testing/sync.h"

namespace paddock::testing {

// Test doubles the suites share. Usable in your own tests; not a stable API.

// How long a call may take beyond what it is allowed to wait, on a loaded
// 2-core machine under a sanitizer. Generous: the suites prove that nobody
// waits for a hung load, not how fast an answer comes.
inline constexpr absl::Duration kMargin = absl::Seconds(5);

// How long a test waits for something that should happen at once before it
// fails instead of hanging.
inline constexpr std::chrono::seconds kNoHang{30};

// What a `Backend` does on its next calls.
enum class Fault {
  kNone,        // Returns "<key>#<call>".
  kError,       // Returns UnavailableError("backend down: <key>").
  kThrowStd,    // Throws std::runtime_error("disk on fire: <key>").
  kThrowOther,  // Throws an int.
  kHang,        // Blocks until Release(), then acts as the resume fault.
  kFlap,        // Odd calls fail as kError, even calls succeed.
};

// Backend
//
// A loader the tests break on purpose. Values name the key and the call
// ("k#3"), so a test can tell which load produced what a caller got. Each
// call takes `load_time` on the test's ManualClock. Thread-safe.
class Backend {
 public:
  explicit Backend(ManualClock* clock) : clock_(clock) {}
  // Lets a hung call return, so a failing test ends instead of hanging.
  ~Backend() { release_.Open(); }

  absl::StatusOr<std::string> Load(const std::string& key) {
    const int call = calls_.fetch_add(1) + 1;
    const int64_t load_nanos = load_nanos_.load();
    if (load_nanos > 0) clock_->Advance(absl::Nanoseconds(load_nanos));
    Fault fault = fault_.load();
    if (fault == Fault::kHang) {
      hung_.Increment();
      release_.Wait();
      fault = resume_fault_.load();
    }
    switch (fault) {
      case Fault::kNone:
      case Fault::kHang:
        break;
      case Fault::kError:
        return absl::UnavailableError(absl::StrCat("backend down: ", key));
      case Fault::kThrowStd:
        throw std::runtime_error(absl::StrCat("disk on fire: ", key));
      case Fault::kThrowOther:
        throw 42;
      case Fault::kFlap:
        if (call % 2 == 1) {
          return absl::UnavailableError(absl::StrCat("backend down: ", key));
        }
        break;
    }
    return absl::StrCat(key, "#", call);
  }

  // `Load` as the loader of a `CacheType`.
  template <typename CacheType>
  typename CacheType::Loader Loader() {
    return [this](const std::string& key) { return Load(key); };
  }

  void set_fault(Fault fault) { fault_ = fault; }
  // What a hung call does once released.
  void set_resume_fault(Fault fault) { resume_fault_ = fault; }
  void set_load_time(absl::Duration d) {
    load_nanos_ = absl::ToInt64Nanoseconds(d);
  }
  // Returns once `n` calls in all have hung.
  bool WaitUntilHung(int n) { return hung_.WaitFor(n); }
  // Lets every hung call, and every later kHang call, return.
  void Release() { release_.Open(); }
  int calls() const { return calls_.load(); }

 private:
  ManualClock* const clock_;
  std::atomic<Fault> fault_{Fault::kNone};
  std::atomic<Fault> resume_fault_{Fault::kNone};
  std::atomic<int64_t> load_nanos_{0};
  std::atomic<int> calls_{0};
  Counter hung_;
  Gate release_;
};

// ReplaceableExecutor
//
// A ManualExecutor the test can throw away with its queued tasks, as an
// executor that shuts down does. Thread-safe.
class ReplaceableExecutor final : public Executor {
 public:
  void Schedule(Task task) override { Current()->Schedule(std::move(task)); }
  bool RunOne() { return Current()->RunOne(); }
  size_t RunAll() { return Current()->RunAll(); }
  size_t pending() { return Current()->pending(); }

  // Destroys the current ManualExecutor, and with it every task queued on
  // it, and starts a new one. Returns how many tasks were dropped.
  size_t DropAll() {
    std::shared_ptr<ManualExecutor> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::exchange(current_, std::make_shared<ManualExecutor>());
    }
    const size_t dropped = old->pending();
    old.reset();
    return dropped;
  }

 private:
  std::shared_ptr<ManualExecutor> Current() {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

  std::mutex mu_;
  std::shared_ptr<ManualExecutor> current_ = std::make_shared<ManualExecutor>();
};

// A lookup's result and how long it took on the real clock.
struct TimedResult {
  absl::StatusOr<std::string> value;
  absl::Duration took;
};

// A key whose hash is expensive and counted in `slow_hashes`.
struct SlowKey {
  std::string name;
  friend bool operator==(const SlowKey&, const SlowKey&) = default;
};

inline std::atomic<int> slow_hashes{0};

struct SlowKeyHash {
  size_t operator()(const SlowKey& key) const {
    ++slow_hashes;
    size_t h = absl::Hash<std::string>()(key.name);
    for (int i = 0; i < 20000; ++i) h = h * 0x9e3779b97f4a7c15ULL + i;
    return h;
  }
};

// A hash under which every key collides.
struct ConstantHash {
  size_t operator()(const std::string&) const { return 12345; }
};

// A write that races with a load or a refresh.
enum class Write { kInvalidate, kPut, kInvalidateAll };

inline constexpr Write kWrites[] = {Write::kInvalidate, Write::kPut,
                                    Write::kInvalidateAll};

inline std::string WriteName(Write write) {
  switch (write) {
    case Write::kInvalidate:
      return "Invalidate";
    case Write::kPut:
      return "Put";
    case Write::kInvalidateAll:
      return "InvalidateAll";
  }
  return "?";
}

// Applies `write` to `key` (a Put stores "put").
template <typename CacheType>
void Apply(Write write, CacheType& cache, const std::string& key) {
  switch (write) {
    case Write::kInvalidate:
      cache.Invalidate(key);
      break;
    case Write::kPut:
      cache.Put(key, "put");
      break;
    case Write::kInvalidateAll:
      cache.InvalidateAll();
      break;
  }
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTING_POLICY_CONTRACT_DOUBLES_H_
