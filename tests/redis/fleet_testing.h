// File: tests/redis/fleet_testing.h
// -----------------------------------------------------------------------------
// What the cache-level fleet tests share: `CountingBackend`, the one backend
// behind every cache of a test's fleet (so that its call count is the
// fleet's load count), and `RedisFleetTest`, a fixture with a real
// redis-server (redis_server.h) and caches that each get a `RedisTier` of
// their own, as separate processes would.

#ifndef PADDOCK_TESTS_REDIS_FLEET_TESTING_H_
#define PADDOCK_TESTS_REDIS_FLEET_TESTING_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/redis.h"
#include "redis_fixture.h"
#include "redis_server.h"

namespace paddock::testing {

// CountingBackend
//
// A loader's backend: returns "<key>#<n>" for its n-th call (from 1), after
// `delay`, while the gate is open; or a given error, or a given value.
// Records when each call ran. Thread-safe.
class CountingBackend {
 public:
  struct Call {
    absl::Time start;
    absl::Time end;
  };

  absl::StatusOr<std::string> Load(const std::string& key) {
    std::unique_lock<std::mutex> lock(mu_);
    const int n = static_cast<int>(calls_.size()) + 1;
    calls_.push_back({absl::Now(), absl::InfinitePast()});
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    const absl::Duration delay = delay_;
    lock.unlock();
    absl::SleepFor(delay);
    lock.lock();
    calls_[n - 1].end = absl::Now();
    if (!error_.ok()) return error_;
    if (value_.has_value()) return *value_;
    return absl::StrCat(key, "#", n);
  }

  // A loader of `Cache<std::string, std::string>` calling this backend.
  auto Loader() {
    return [this](const std::string& key) { return Load(key); };
  }

  int calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(calls_.size());
  }
  std::vector<Call> call_times() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Waits until at least `n` calls have started; returns whether they did.
  bool WaitForCalls(int n, absl::Duration timeout = absl::Seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return static_cast<int>(calls_.size()) >= n; });
  }

  void set_delay(absl::Duration delay) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ = delay;
  }
  // Every call returns `error` (OK: values again).
  void set_error(absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
  }
  // Every call returns `value` instead of "<key>#<n>".
  void set_value(std::string value) {
    std::lock_guard<std::mutex> lock(mu_);
    value_ = std::move(value);
  }
  // Calls block until Open().
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;
  absl::Duration delay_ = absl::ZeroDuration();
  absl::Status error_;
  std::optional<std::string> value_;
  bool open_ = true;
};

template <typename P = SingleFlight>
using StringCache = Cache<std::string, std::string, P>;

// RedisFleetTest
//
// RedisTest for caches in front of the tier: a cache's options, a cache over
// a CountingBackend, and the Redis keys of a cache key.
class RedisFleetTest : public RedisTest {
 protected:
  static constexpr char kPrefix[] = "fleet:v1:";

  RedisFleetTest() : RedisTest(kPrefix) {}

  // Options for a cache in front of `tier` (nullptr: none).
  static Options CacheOptions(std::shared_ptr<SharedTier> tier) {
    Options options;
    options.ttl = absl::Seconds(10);
    options.wait_timeout = absl::Seconds(10);
    options.shared = std::move(tier);
    return options;
  }

  template <typename P = SingleFlight>
  static std::unique_ptr<StringCache<P>> NewCache(CountingBackend& backend,
                                                  const Options& options,
                                                  P policy = {}) {
    return std::make_unique<StringCache<P>>(backend.Loader(), options,
                                            std::move(policy));
  }

  // The Redis keys of `key`'s record and lease.
  static std::string RecordKey(const std::string& key) {
    return absl::StrCat(kPrefix, "{", key, "}:v");
  }
  static std::string LeaseKey(const std::string& key) {
    return absl::StrCat(kPrefix, "{", key, "}:l");
  }

  // Runs a command on the test's own connection; an error as its text.
  std::string Redis(const std::vector<std::string>& args) {
    absl::StatusOr<std::string> reply = server_->Command(args);
    return reply.ok() ? *reply : reply.status().ToString();
  }
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_FLEET_TESTING_H_
