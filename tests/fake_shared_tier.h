// File: tests/fake_shared_tier.h
// -----------------------------------------------------------------------------
// `FakeSharedTier`: an in-memory `paddock::SharedTier` on a clock of its own,
// with the protocol's rules (get-or-lease, token-checked fill, write-through
// that tells other subscribers), so that the cache's side of the fleet can be
// tested deterministically: no server, no real time. Change notices
// (OnInvalidate to the others, OnChange to all) are delivered synchronously,
// on the writer's thread. A test can make every
// call fail, and can run code when a cache waits for another's fill.

#ifndef PADDOCK_TESTS_FAKE_SHARED_TIER_H_
#define PADDOCK_TESTS_FAKE_SHARED_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/clock.h"
#include "paddock/shared_tier.h"

namespace paddock::testing {

class FakeSharedTier final : public SharedTier {
 public:
  // `clock` is the tier's own clock (Redis's, in production).
  explicit FakeSharedTier(const Clock* clock,
                          absl::Duration lease_for = absl::Seconds(10))
      : clock_(clock), lease_for_(lease_for) {}

  absl::StatusOr<SharedLookup> Lookup(std::string_view key,
                                      std::string_view have_version,
                                      absl::Duration hold_for) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++lookups_;
    if (throws_) throw std::bad_alloc();
    if (!failure_.ok()) return failure_;
    const absl::Time now = clock_->Now();
    SharedLookup answer;
    bool serve = false;
    if (auto it = records_.find(std::string(key)); it != records_.end()) {
      const Stored& stored = it->second;
      const absl::Duration age = now - stored.stored_at;
      if (age < stored.fill.keep_for) {
        answer.record = SharedRecord{stored.fill.value,
                                     stored.version,
                                     age,
                                     stored.fill.fresh_for,
                                     stored.fill.keep_for,
                                     stored.fill.serve_on_error_for,
                                     stored.fill.load_duration};
        serve = !stored.fill.value.ok() ||
                (age < stored.fill.fresh_for && stored.version != have_version);
      }
    }
    if (serve) return answer;
    auto lease = leases_.find(std::string(key));
    if (lease != leases_.end() && lease->second.until > now) {
      answer.lease = SharedLookup::Lease::kHeldElsewhere;
      answer.lease_remaining = lease->second.until - now;
      return answer;
    }
    const std::string token = absl::StrCat("token-", ++tokens_);
    leases_[std::string(key)] =
        Lease{token, now + std::max(lease_for_, hold_for)};
    answer.lease = SharedLookup::Lease::kGranted;
    answer.lease_token = token;
    return answer;
  }

  absl::StatusOr<bool> Fill(std::string_view key, std::string_view lease_token,
                            const SharedFill& fill) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++fills_;
      if (throws_) throw std::bad_alloc();
      if (!failure_.ok()) return failure_;
      auto lease = leases_.find(std::string(key));
      if (lease == leases_.end() || lease->second.token != lease_token ||
          lease->second.until <= clock_->Now()) {
        return false;
      }
      leases_.erase(lease);
      if (Size(fill) > max_value_bytes_) {
        return absl::InvalidArgumentError("over max_value_bytes");
      }
      Store(key, fill);
    }
    AnnounceChange(key);
    return true;
  }

  absl::Status Release(std::string_view key,
                       std::string_view lease_token) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++releases_;
    if (!failure_.ok()) return failure_;
    auto lease = leases_.find(std::string(key));
    if (lease == leases_.end() || lease->second.token != lease_token) {
      return absl::OkStatus();
    }
    leases_.erase(lease);
    lock.unlock();
    AnnounceChange(key);
    return absl::OkStatus();
  }

  absl::Status Put(std::string_view key, const SharedFill& fill,
                   uint64_t origin) override {
    RunBeforeWrite();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) return failure_;
      leases_.erase(std::string(key));
      Store(key, fill);
    }
    Notify(key, origin);
    AnnounceChange(key);
    return absl::OkStatus();
  }

  absl::Status Invalidate(std::string_view key, uint64_t origin) override {
    RunBeforeWrite();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) return failure_;
      leases_.erase(std::string(key));
      records_.erase(std::string(key));
    }
    Notify(key, origin);
    AnnounceChange(key);
    return absl::OkStatus();
  }

  bool AwaitChange(std::string_view, absl::Duration) override {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++awaits_;
      if (await_throws_) throw std::bad_alloc();
      hook = on_await_;
    }
    if (hook) hook();
    return static_cast<bool>(hook);
  }

  std::unique_ptr<Subscription> Subscribe(Subscriber* subscriber) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = ++next_subscription_;
    subscribers_[id] = subscriber;
    return std::make_unique<FakeSubscription>(this, id);
  }

  size_t max_value_bytes() const override { return max_value_bytes_; }

  // -- For tests.

  // Every call fails with `status` from now on; OkStatus() heals the tier.
  void set_failure(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::move(status);
  }
  // Lookup and Fill (or AwaitChange) throw std::bad_alloc from now on,
  // against SharedTier's contract (a tier's own allocation failing): a cache
  // must take that as a tier error.
  void set_throws(bool throws) {
    std::lock_guard<std::mutex> lock(mu_);
    throws_ = throws;
  }
  void set_await_throws(bool throws) {
    std::lock_guard<std::mutex> lock(mu_);
    await_throws_ = throws;
  }
  void set_max_value_bytes(size_t n) { max_value_bytes_ = n; }
  // Whether fills, puts, invalidations and releases reach every subscriber's
  // OnChange (as they do from Redis's change feed); on by default. Off, a
  // cache's parked loads learn of changes only by asking again.
  void set_announces_changes(bool announces) {
    std::lock_guard<std::mutex> lock(mu_);
    announces_changes_ = announces;
  }
  // Runs `hook` whenever a cache waits for another's fill.
  void set_on_await(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    on_await_ = std::move(hook);
  }
  // Runs `hook` at the start of every Put and Invalidate, before the tier
  // changes anything: what a cache does while its write is on the way.
  void set_before_write(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    before_write_ = std::move(hook);
  }
  // Writes a record as another process would (or garbage, as anyone could).
  void StoreRaw(std::string_view key, const SharedFill& fill) {
    std::lock_guard<std::mutex> lock(mu_);
    Store(key, fill);
  }
  // Takes a key's lease as another process would; returns its token.
  std::string TakeLease(std::string_view key) {
    absl::StatusOr<SharedLookup> got = Lookup(key, "", absl::ZeroDuration());
    return got.ok() ? got->lease_token : std::string();
  }
  std::optional<SharedFill> record(std::string_view key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(std::string(key));
    if (it == records_.end()) return std::nullopt;
    return it->second.fill;
  }
  int lookups() {
    std::lock_guard<std::mutex> lock(mu_);
    return lookups_;
  }
  int fills() {
    std::lock_guard<std::mutex> lock(mu_);
    return fills_;
  }
  int releases() {
    std::lock_guard<std::mutex> lock(mu_);
    return releases_;
  }
  int awaits() {
    std::lock_guard<std::mutex> lock(mu_);
    return awaits_;
  }

 private:
  struct Stored {
    SharedFill fill;
    std::string version;
    absl::Time stored_at;
  };
  struct Lease {
    std::string token;
    absl::Time until;
  };
  class FakeSubscription final : public Subscription {
   public:
    FakeSubscription(FakeSharedTier* tier, uint64_t id)
        : tier_(tier), id_(id) {}
    ~FakeSubscription() override {
      std::lock_guard<std::mutex> lock(tier_->mu_);
      tier_->subscribers_.erase(id_);
    }
    uint64_t id() const override { return id_; }

   private:
    FakeSharedTier* const tier_;
    const uint64_t id_;
  };

  static size_t Size(const SharedFill& fill) {
    return fill.value.ok() ? fill.value->size()
                           : fill.value.status().message().size();
  }
  void Store(std::string_view key, const SharedFill& fill) {
    records_[std::string(key)] = Stored{
        fill,
        fill.version.empty() ? absl::StrCat("v", ++versions_) : fill.version,
        clock_->Now()};
  }
  void RunBeforeWrite() {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = before_write_;
    }
    if (hook) hook();  // Outside the lock: it may call the tier.
  }

  void Notify(std::string_view key, uint64_t origin) {
    std::vector<Subscriber*> others;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, subscriber] : subscribers_) {
        if (id != origin) others.push_back(subscriber);
      }
    }
    for (Subscriber* s : others) s->OnInvalidate(key);
  }

  // Synchronously, on the writer's thread, as Notify.
  void AnnounceChange(std::string_view key) {
    std::vector<Subscriber*> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!announces_changes_) return;
      for (const auto& [id, subscriber] : subscribers_)
        all.push_back(subscriber);
    }
    for (Subscriber* s : all) s->OnChange(key);
  }

  const Clock* const clock_;
  const absl::Duration lease_for_;
  size_t max_value_bytes_ = 1 << 20;
  std::mutex mu_;
  std::map<std::string, Stored> records_;
  std::map<std::string, Lease> leases_;
  std::map<uint64_t, Subscriber*> subscribers_;
  std::function<void()> on_await_;
  std::function<void()> before_write_;
  absl::Status failure_;
  bool throws_ = false;
  bool await_throws_ = false;
  bool announces_changes_ = true;
  uint64_t next_subscription_ = 0;
  int tokens_ = 0, versions_ = 0;
  int lookups_ = 0, fills_ = 0, releases_ = 0, awaits_ = 0;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_FAKE_SHARED_TIER_H_
