// FleetWaits: the process's loads parked until another process fills a key.

#include "paddock/internal/fleet_waits.h"

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <new>
#include <thread>
#include <utility>

#include "absl/hash/hash.h"

namespace paddock::internal {
namespace {

// The process's set: made on first use and never destroyed, so that no
// static destructor races a cache destroyed late (or its timer thread).
FleetWaits* process_waits = nullptr;

}  // namespace

FleetWaits& FleetWaits::Process() {
  static FleetWaits* const waits = [] {
    process_waits = new FleetWaits();
    pthread_atfork(nullptr, nullptr, &FleetWaits::ForgetThreadAfterFork);
    return process_waits;
  }();
  return *waits;
}

FleetWaits::~FleetWaits() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

// Runs in the child alone, where no other thread can hold the lock.
void FleetWaits::ForgetThreadAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The child has only the forking thread: the set's lock may be held by a
  // thread that is gone, and its timer thread is gone. Both are made anew
  // (the old ones are abandoned, not destroyed); parked waits stay, and the
  // next Park starts a timer.
  FleetWaits* const w = process_waits;
  if (w == nullptr) return;
  new (&w->mu_) Mutex;
  new (&w->cv_) std::condition_variable;
  new (&w->timer_) std::thread;
  w->timer_running_ = false;
}

uint64_t FleetWaits::Bucket(const void* tier, std::string_view key) {
  const uint64_t h =
      absl::HashOf(tier, absl::string_view(key.data(), key.size()));
  return h != kEveryKey ? h : kEveryKey + 1;
}

void FleetWaits::RecordLocked(uint64_t bucket) {
  const uint64_t n = sequence_.load(std::memory_order_relaxed) + 1;
  recent_[n % kRecent] = bucket;
  sequence_.store(n, std::memory_order_release);
}

bool FleetWaits::ChangedSinceLocked(uint64_t bucket, uint64_t since) const {
  const uint64_t last = sequence_.load(std::memory_order_relaxed);
  if (last - since >= kRecent) return last != since;  // Fell behind.
  for (uint64_t n = since + 1; n <= last; ++n) {
    const uint64_t b = recent_[n % kRecent];
    if (b == bucket || b == kEveryKey) return true;
  }
  return false;
}

bool FleetWaits::Park(const void* tier, std::string_view key, const void* owner,
                      uint64_t since, SteadyTime at, Wake& wake) {
  const uint64_t bucket = Bucket(tier, key);
  {
    MutexLock lock(&mu_);
    if (ChangedSinceLocked(bucket, since)) return false;
    if (!timer_running_) {
      timer_ = std::thread([this] { RunTimer(); });  // May throw: nothing kept.
      timer_running_ = true;
    }
    const uint64_t id = next_id_;
    // Everything that allocates before `wake` moves: a throw leaves it with
    // the caller and the set as it was (an empty bucket is harmless).
    std::vector<uint64_t>& ids = by_key_[bucket];
    ids.reserve(ids.size() + 1);
    timers_.reserve(timers_.size() + 1);
    waits_.reserve(waits_.size() + 1);
    std::string key_copy(key);
    waits_.emplace(id, Wait{tier, std::move(key_copy), owner, at,
                            std::move(wake)});  // Reserved: cannot throw.
    ++next_id_;
    ids.push_back(id);
    timers_.push_back(Timer{at, id});
    std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
    ++timers_version_;
  }
  cv_.notify_one();
  return true;
}

FleetWaits::Wake FleetWaits::TakeLocked(uint64_t id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return nullptr;
  Wait& w = it->second;
  if (auto b = by_key_.find(Bucket(w.tier, w.key)); b != by_key_.end()) {
    std::erase(b->second, id);
    if (b->second.empty()) by_key_.erase(b);
  }
  Wake wake = std::move(w.wake);
  waits_.erase(it);
  return wake;
}

template <typename Match>
std::vector<FleetWaits::Wake> FleetWaits::TakeAllLocked(const Match& match) {
  std::vector<uint64_t> ids;
  for (const auto& [id, w] : waits_) {
    if (match(w)) ids.push_back(id);
  }
  std::vector<Wake> wakes;
  wakes.reserve(ids.size());
  for (uint64_t id : ids) wakes.push_back(TakeLocked(id));
  return wakes;
}

void FleetWaits::WakeAll(std::vector<Wake>& wakes) {
  for (Wake& wake : wakes) {
    if (wake) std::move(wake)();
  }
}

void FleetWaits::Notify(const void* tier, std::string_view key) {
  const uint64_t bucket = Bucket(tier, key);
  std::vector<Wake> wakes;
  {
    MutexLock lock(&mu_);
    RecordLocked(bucket);
    auto b = by_key_.find(bucket);
    if (b == by_key_.end()) return;
    std::vector<uint64_t> ids;
    for (uint64_t id : b->second) {
      auto it = waits_.find(id);
      if (it != waits_.end() && it->second.tier == tier &&
          it->second.key == key) {
        ids.push_back(id);
      }
    }
    wakes.reserve(ids.size());
    for (uint64_t id : ids) wakes.push_back(TakeLocked(id));
  }
  WakeAll(wakes);  // Outside the lock: a wake schedules work.
}

void FleetWaits::NotifyAll(const void* tier) {
  std::vector<Wake> wakes;
  {
    MutexLock lock(&mu_);
    RecordLocked(kEveryKey);
    wakes = TakeAllLocked([tier](const Wait& w) { return w.tier == tier; });
  }
  WakeAll(wakes);
}

size_t FleetWaits::Drop(const void* owner) {
  std::vector<Wake> dropped;  // Destroyed after the lock.
  {
    MutexLock lock(&mu_);
    dropped =
        TakeAllLocked([owner](const Wait& w) { return w.owner == owner; });
  }
  return dropped.size();
}

size_t FleetWaits::parked() const {
  MutexLock lock(&mu_);
  return waits_.size();
}

void FleetWaits::RunTimer() {
  for (;;) {
    Wake due;
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        if (timers_.empty()) {
          mu_.Await(cv_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return stopping_ || !timers_.empty();
          });
          continue;
        }
        const Timer next = timers_.front();
        // A wait woken or dropped before its time left its timer behind.
        if (!waits_.contains(next.id)) {
          std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
          timers_.pop_back();
          continue;
        }
        if (std::chrono::steady_clock::now() < next.at) {
          const uint64_t version = timers_version_;
          mu_.AwaitUntil(cv_, next.at,
                         [this, version]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                           return stopping_ || timers_version_ != version;
                         });
          continue;
        }
        std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
        timers_.pop_back();
        due = TakeLocked(next.id);
        break;
      }
    }
    if (due) std::move(due)();
  }
}

}  // namespace paddock::internal
