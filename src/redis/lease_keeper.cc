// LeaseKeeper.

#include "redis/lease_keeper.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis/connection.h"

namespace paddock::internal {

LeaseKeeper::LeaseKeeper(absl::Duration lease_for, Extend extend,
                         Release release)
    : lease_for_(lease_for),
      extend_(std::move(extend)),
      release_(std::move(release)),
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
  // The grant's own period covers a shorter hold; extending it then could
  // only shorten it (a period ending at hold_until, before the grant's).
  if (hold_for <= lease_for_) return;
  const absl::Time now = MonotonicNow();
  absl::MutexLock lock(&mu_);
  held_.insert_or_assign(std::move(token),
                         Held{.key = std::move(key),
                              .hold_until = now + hold_for,
                              .next_extend = now + lease_for_ / 2,
                              // Granted before now, for lease_for_.
                              .expires_by = now + lease_for_,
                              .covered_until = absl::InfinitePast()});
  changed_.SignalAll();
}

void LeaseKeeper::Forget(std::string_view token) {
  absl::MutexLock lock(&mu_);
  // Looked up as it is: no copy, so forgetting never fails for memory (a
  // lease left here would be extended until its holder exits).
  held_.erase(absl::string_view(token.data(), token.size()));
}

void LeaseKeeper::ReleaseSoon(std::string key, std::string token) {
  const absl::Time now = MonotonicNow();
  absl::MutexLock lock(&mu_);
  held_.erase(token);
  if (releasing_.size() >= kMaxReleases) return;
  releasing_.insert_or_assign(
      std::move(token),
      Releasing{.key = std::move(key), .next_try = now + lease_for_ / 8});
  changed_.SignalAll();
}

size_t LeaseKeeper::releasing() const {
  absl::MutexLock lock(&mu_);
  return releasing_.size();
}

uint64_t LeaseKeeper::released() const {
  absl::MutexLock lock(&mu_);
  return released_;
}

absl::Time LeaseKeeper::RunReleases(absl::Time now) {
  std::vector<std::pair<std::string, std::string>> due;  // Token, key.
  for (auto& [token, r] : releasing_) {
    if (r.next_try <= now) due.emplace_back(token, r.key);
  }
  if (!due.empty()) {
    std::vector<absl::StatusOr<bool>> results;
    results.reserve(due.size());
    mu_.Unlock();
    for (const auto& [token, key] : due)
      results.push_back(release_(key, token));
    mu_.Lock();
    const absl::Time retry = MonotonicNow() + lease_for_ / 8;
    for (size_t i = 0; i < due.size(); ++i) {
      auto it = releasing_.find(due[i].first);
      if (it == releasing_.end()) continue;
      const absl::StatusOr<bool>& released = results[i];
      if (released.ok() && *released) {
        ++released_;
        releasing_.erase(it);
      } else if (released.ok() && ++it->second.not_held >= 2) {
        releasing_.erase(it);  // Never granted, filled, or lapsed.
      } else {
        it->second.next_try = retry;  // No answer, or only one: again.
      }
    }
  }
  absl::Time wake = absl::InfiniteFuture();
  for (const auto& [token, r] : releasing_) wake = std::min(wake, r.next_try);
  return wake;
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
  mu_.Lock();
  while (!stopping_) {
    // Collect what is due; sleep until the next one otherwise.
    absl::Time wake = RunReleases(MonotonicNow());
    if (stopping_) break;
    const absl::Time now = MonotonicNow();
    std::vector<Due> due = CollectDue(now, &wake);
    if (due.empty()) {
      changed_.WaitWithTimeout(&mu_, wake - now);
      continue;
    }
    ExtendDue(due);
  }
  mu_.Unlock();
}

std::vector<LeaseKeeper::Due> LeaseKeeper::CollectDue(absl::Time now,
                                                      absl::Time* wake) {
  std::vector<Due> due;
  for (auto it = held_.begin(); it != held_.end();) {
    Held& held = it->second;
    if (held.hold_until <= now) {
      // Held as long as asked: let it lapse.
      held_.erase(it++);
      continue;
    }
    if (held.next_extend <= now && held.covered_until >= held.hold_until) {
      held.next_extend = held.hold_until;  // It lasts that long already.
    } else if (held.next_extend <= now) {
      // Up to hold_until, at most a period ahead, and never earlier than
      // the lease may expire already.
      const absl::Duration period = std::max(
          std::min(lease_for_, held.hold_until - now), held.expires_by - now);
      due.push_back(Due{
          .token = it->first, .key = held.key, .period = period, .sent = now});
      held.next_extend = now + lease_for_ / 2;
    }
    *wake = std::min(*wake, held.next_extend);
    ++it;
  }
  return due;
}

void LeaseKeeper::ExtendDue(const std::vector<Due>& due) {
  // Extend without the lock: Hold and Forget go on meanwhile.
  struct Result {
    const Due* due;
    absl::StatusOr<bool> extended;
    absl::Time answered;
  };
  std::vector<Result> results;
  results.reserve(due.size());
  mu_.Unlock();
  for (const Due& d : due) {
    absl::StatusOr<bool> extended = extend_(d.key, d.token, d.period);
    results.push_back({&d, std::move(extended), MonotonicNow()});
  }
  mu_.Lock();
  for (Result& r : results) {
    auto it = held_.find(r.due->token);
    if (it == held_.end()) continue;  // Forgotten meanwhile.
    Held& held = it->second;
    if (!r.extended.ok()) {
      // Redis did not answer: try again soon, the lease may still be ours.
      // Whether it was extended is unknown: it may expire as late as that.
      held.expires_by = std::max(held.expires_by, r.answered + r.due->period);
      held.next_extend = MonotonicNow() + lease_for_ / 8;
    } else if (*r.extended) {
      ++extensions_;
      held.expires_by = r.answered + r.due->period;
      held.covered_until = r.due->sent + r.due->period;
    } else {
      held_.erase(it);  // Lost: nothing left to keep.
    }
  }
}

}  // namespace paddock::internal
