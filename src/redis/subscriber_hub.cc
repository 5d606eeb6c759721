// SubscriberHub.

#include "redis/subscriber_hub.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/random/random.h"

namespace paddock::internal {
namespace {

// The entry whose callback runs on this thread, if any.
thread_local const void* running_entry = nullptr;

}  // namespace

struct SubscriberHub::Entry {
  Entry(uint64_t id, SharedTier::Subscriber* subscriber)
      : id(id), subscriber(subscriber) {}
  const uint64_t id;
  SharedTier::Subscriber* const subscriber;
  // Held while a callback runs; the destructor takes it to wait for one.
  absl::Mutex callback_mu;
  std::atomic<bool> live{true};
};

class SubscriberHub::SubscriptionImpl final : public SharedTier::Subscription {
 public:
  SubscriptionImpl(std::shared_ptr<SubscriberHub> hub,
                   std::shared_ptr<Entry> entry)
      : hub_(std::move(hub)), entry_(std::move(entry)) {}

  ~SubscriptionImpl() override {
    hub_->Remove(entry_.get());
    if (running_entry == entry_.get()) {
      // Destroyed by its own callback, which holds callback_mu on this very
      // thread: waiting would deadlock. No further callback starts.
      entry_->live.store(false, std::memory_order_release);
      return;
    }
    absl::MutexLock lock(&entry_->callback_mu);
    entry_->live.store(false, std::memory_order_release);
  }

  uint64_t id() const override { return entry_->id; }

 private:
  const std::shared_ptr<SubscriberHub> hub_;
  const std::shared_ptr<Entry> entry_;
};

uint64_t NewSubscriptionId() {
  thread_local absl::BitGen bits;
  const uint64_t pid_mix =
      static_cast<uint64_t>(getpid()) * uint64_t{0x9E3779B97F4A7C15};
  while (true) {
    const uint64_t id = absl::Uniform<uint64_t>(bits) ^ pid_mix;
    if (id != 0) return id;
  }
}

std::unique_ptr<SharedTier::Subscription> SubscriberHub::Subscribe(
    SharedTier::Subscriber* subscriber) {
  auto entry = std::make_shared<Entry>(NewSubscriptionId(), subscriber);
  {
    absl::MutexLock lock(&mu_);
    auto next = std::make_shared<Entries>(*entries_);
    next->push_back(entry);
    entries_ = std::move(next);
  }
  return std::make_unique<SubscriptionImpl>(shared_from_this(),
                                            std::move(entry));
}

void SubscriberHub::Remove(const Entry* entry) {
  absl::MutexLock lock(&mu_);
  auto next = std::make_shared<Entries>();
  next->reserve(entries_->size());
  for (const std::shared_ptr<Entry>& e : *entries_) {
    if (e.get() != entry) next->push_back(e);
  }
  entries_ = std::move(next);
}

size_t SubscriberHub::size() const {
  absl::MutexLock lock(&mu_);
  return entries_->size();
}

bool SubscriberHub::Has(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<Entry>& e : *entries_) {
    if (e->id == id) return true;
  }
  return false;
}

template <typename Callback>
void SubscriberHub::Deliver(uint64_t skip, bool fall_back,
                            const Callback& callback) {
  std::shared_ptr<const Entries> entries;
  {
    absl::MutexLock lock(&mu_);
    entries = entries_;
  }
  for (const std::shared_ptr<Entry>& entry : *entries) {
    if (entry->id == skip) continue;
    absl::MutexLock lock(&entry->callback_mu);
    // Closed by the tier's destructor, maybe from the last callback: the
    // subscriptions that outlive their tier hear nothing more.
    if (closed_.load(std::memory_order_acquire)) return;
    if (!entry->live.load(std::memory_order_acquire)) continue;
    running_entry = entry.get();
    try {
      callback(*entry->subscriber);
    } catch (...) {
      // A subscriber that could not drop a key drops every copy instead,
      // unless the callback ended its subscription (the subscriber may be
      // gone with it) or its tier before it threw.
      try {
        if (fall_back && entry->live.load(std::memory_order_acquire) &&
            !closed_.load(std::memory_order_acquire)) {
          entry->subscriber->OnMissedInvalidations();
        }
      } catch (...) {
      }
    }
    running_entry = nullptr;
  }
}

void SubscriberHub::DeliverInvalidate(std::string_view key, uint64_t origin) {
  Deliver(origin, /*fall_back=*/true,
          [key](SharedTier::Subscriber& subscriber) {
            subscriber.OnInvalidate(key);
          });
}

void SubscriberHub::DeliverChange(std::string_view key) {
  Deliver(0, /*fall_back=*/false, [key](SharedTier::Subscriber& subscriber) {
    subscriber.OnChange(key);
  });
}

void SubscriberHub::DeliverMissed() {
  Deliver(0, /*fall_back=*/false, [](SharedTier::Subscriber& subscriber) {
    subscriber.OnMissedInvalidations();
  });
}

}  // namespace paddock::internal
