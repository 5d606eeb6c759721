// LeaseKeeper.

#include "redis/lease_keeper.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis/connection.h"

namespace paddock::internal {

LeaseKeeper::LeaseKeeper(absl::Duration lease_for, Extend extend)
    : lease_for_(lease_for),
      extend_(std::move(extend)),
      thread_([this] { Run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  thread_.join();
}

void LeaseKeeper::Hold(std::string key, std::string token,
                       absl::Duration hold_for) {
  if (hold_for <= absl::ZeroDuration()) return;
  const absl::Time now = MonotonicNow();
  absl::MutexLock lock(&mu_);
  held_.insert_or_assign(std::move(token),
                         Held{.key = std::move(key),
                              .hold_until = now + hold_for,
                              .next_extend = now + lease_for_ / 2});
  changed_.SignalAll();
}

void LeaseKeeper::Forget(std::string_view token) {
  absl::MutexLock lock(&mu_);
  held_.erase(std::string(token));
}

size_t LeaseKeeper::size() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

uint64_t LeaseKeeper::extensions() const {
  absl::MutexLock lock(&mu_);
  return extensions_;
}

void LeaseKeeper::Run() {
  struct Due {
    std::string token;
    std::string key;
    absl::Duration period;
  };
  mu_.Lock();
  while (!stopping_) {
    // Collect what is due; sleep until the next one otherwise.
    const absl::Time now = MonotonicNow();
    absl::Time wake = absl::InfiniteFuture();
    std::vector<Due> due;
    for (auto it = held_.begin(); it != held_.end();) {
      Held& held = it->second;
      if (held.hold_until <= now) {
        // Held as long as asked: let it lapse.
        held_.erase(it++);
        continue;
      }
      if (held.next_extend <= now) {
        due.push_back(
            Due{.token = it->first,
                .key = held.key,
                .period = std::min(lease_for_, held.hold_until - now)});
        held.next_extend = now + lease_for_ / 2;
      }
      wake = std::min(wake, held.next_extend);
      ++it;
    }
    if (due.empty()) {
      changed_.WaitWithTimeout(&mu_, wake - now);
      continue;
    }

    // Extend without the lock: Hold and Forget go on meanwhile.
    std::vector<std::pair<std::string, absl::StatusOr<bool>>> results;
    results.reserve(due.size());
    mu_.Unlock();
    for (Due& d : due) {
      absl::StatusOr<bool> result = extend_(d.key, d.token, d.period);
      results.emplace_back(std::move(d.token), std::move(result));
    }
    mu_.Lock();
    for (auto& [token, result] : results) {
      auto it = held_.find(token);
      if (it == held_.end()) continue;  // Forgotten meanwhile.
      if (!result.ok()) {
        // Redis did not answer: try again soon, the lease may still be ours.
        it->second.next_extend = MonotonicNow() + lease_for_ / 8;
      } else if (*result) {
        ++extensions_;
      } else {
        held_.erase(it);  // Lost: nothing left to keep.
      }
    }
  }
  mu_.Unlock();
}

}  // namespace paddock::internal
