// ChangeLog.

#include "redis/change_log.h"

#include <cstdint>
#include <functional>
#include <string_view>

#include "redis/connection.h"

namespace paddock::internal {

uint64_t ChangeLog::HashOf(std::string_view key) {
  const uint64_t hash = std::hash<std::string_view>{}(key);
  return hash == kEveryKey ? 1 : hash;
}

void ChangeLog::Append(uint64_t hash) {
  const uint64_t next = sequence_.load(std::memory_order_relaxed) + 1;
  hashes_[next % kSize] = hash;
  sequence_.store(next, std::memory_order_release);
  changed_.SignalAll();
}

void ChangeLog::Record(std::string_view key) {
  const uint64_t hash = HashOf(key);
  absl::MutexLock lock(&mu_);
  Append(hash);
}

void ChangeLog::SetConnected(bool connected) {
  absl::MutexLock lock(&mu_);
  if (connected && !connected_) Append(kEveryKey);
  connected_ = connected;
  changed_.SignalAll();
}

bool ChangeLog::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

bool ChangeLog::ChangedSince(uint64_t hash, uint64_t since) const {
  const uint64_t last = sequence_.load(std::memory_order_relaxed);
  if (last <= since) return false;
  if (last - since >= kSize) return true;  // Fell behind the log: assume so.
  for (uint64_t n = since + 1; n <= last; ++n) {
    const uint64_t h = hashes_[n % kSize];
    if (h == hash || h == kEveryKey) return true;
  }
  return false;
}

ChangeLog::Wait ChangeLog::WaitForChange(std::string_view key, uint64_t since,
                                         absl::Time deadline,
                                         bool return_if_disconnected) {
  const uint64_t hash = HashOf(key);
  absl::MutexLock lock(&mu_);
  while (true) {
    if (ChangedSince(hash, since)) return Wait::kChanged;
    if (return_if_disconnected && !connected_) return Wait::kDisconnected;
    const absl::Duration remaining = deadline - MonotonicNow();
    if (remaining <= absl::ZeroDuration()) return Wait::kTimedOut;
    changed_.WaitWithTimeout(&mu_, remaining);
  }
}

}  // namespace paddock::internal
