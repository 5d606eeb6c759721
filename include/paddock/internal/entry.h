// File: paddock/internal/entry.h
// -----------------------------------------------------------------------------
// `Entry<K, V>`: what a cache stores for one key, a value or a remembered
// error, with the timestamps its policy fixed when it was stored. Immutable
// once published: a write replaces the entry (readers hold no lock), except
// for the two one-way flags lookups set and the links the shard's mutex
// guards.
//
// Timestamps are nanoseconds on the cache's clock (`Options::clock`).

#ifndef PADDOCK_INTERNAL_ENTRY_H_
#define PADDOCK_INTERNAL_ENTRY_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddock/internal/time_math.h"

namespace paddock::internal {

// What few entries need, kept apart so that the others stay small (an entry
// of uint64_t key and value fits a 128-byte malloc chunk).
struct EntryExtras {
  absl::Status error;  // Non-OK in a remembered error, while error_until.
  int64_t error_until = std::numeric_limits<int64_t>::min();
  // The shared tier's name for the value (`SharedRecord::version`), when it
  // came from or went to the tier; empty otherwise.
  std::string shared_version;
};

// Fields in the order a lookup reads them: a hit reads `hash` to `value`,
// which for small keys and values share the entry's first cache line; the
// eviction order's fields follow. Aligned to 16 so that a table slot can keep
// four bits of the hash beside the address (node_table.h).
template <typename K, typename V>
struct alignas(16) Entry {
  Entry(size_t hash, const K& key) : hash(hash), key(key) {}

  // Read by lookups without a lock; never changes after publication.
  const size_t hash;

  // Written by lookups, one-way and only when it changes.
  std::atomic<bool> visited{false};     // SIEVE's bit.
  std::atomic<bool> refreshing{false};  // A refresh was asked for.
  // Guarded by the shard's mutex; shares a word with the flags above.
  uint32_t heap_index = 0;

  // Until then a hit serves the value without asking the policy.
  int64_t quiet_until = std::numeric_limits<int64_t>::min();
  const K key;
  std::optional<V> value;  // Empty in a remembered error.

  // Guarded by the shard's mutex.
  Entry* older = nullptr;
  Entry* newer = nullptr;

  int64_t keep_until = 0;  // Never served after; evicted first after.
  std::unique_ptr<EntryExtras> extras;  // Null for most entries.
  int64_t loaded_at = 0;
  int64_t expires_at = 0;  // Fresh until then.
  // Stale-if-error (RFC 5861): until then the value stands in for a failed
  // load (`Lifetime::serve_on_error_for`, SoftTtl's `stale_if_error`).
  int64_t stale_if_error_until = 0;
  int64_t load_duration = 0;

  // A remembered error (OK if none) and until when it answers.
  const absl::Status& error() const {
    static const absl::Status* const kOk = new absl::Status();
    return extras != nullptr ? extras->error : *kOk;
  }
  int64_t error_until() const {
    return extras != nullptr ? extras->error_until
                             : std::numeric_limits<int64_t>::min();
  }
  // The shared tier's version of the value, or nullptr.
  const std::string* shared_version() const {
    return extras != nullptr && !extras->shared_version.empty()
               ? &extras->shared_version
               : nullptr;
  }
  // The extras, made on first use; before publication only.
  EntryExtras& mutable_extras() {
    if (extras == nullptr) extras = std::make_unique<EntryExtras>();
    return *extras;
  }

  // After then the entry answers nobody: its value is past `keep_until` and
  // a remembered error past `error_until`. Eviction takes such entries
  // first.
  int64_t evict_after() const { return std::max(keep_until, error_until()); }
};

// The entry that remembers a failed load of `key` for `error_ttl`, made when
// the load that started at `started` failed with `error` at `finished`. With
// `keep_value`, it keeps `current`'s value and schedule beside the error, so
// a value the policy still serves is not taken away. Copies the value: call
// without a cache lock.
template <typename K, typename V>
std::unique_ptr<Entry<K, V>> MakeErrorEntry(size_t hash, const K& key,
                                            const Entry<K, V>* current,
                                            bool keep_value,
                                            const absl::Status& error,
                                            int64_t started, int64_t finished,
                                            absl::Duration error_ttl) {
  auto n = std::make_unique<Entry<K, V>>(hash, key);
  if (keep_value) {
    n->value = current->value;
    n->quiet_until = current->quiet_until;
    n->loaded_at = current->loaded_at;
    n->expires_at = current->expires_at;
    n->keep_until = current->keep_until;
    n->stale_if_error_until = current->stale_if_error_until;
    n->load_duration = current->load_duration;
    if (const std::string* version = current->shared_version()) {
      n->mutable_extras().shared_version = *version;
    }
  } else {
    n->loaded_at = finished;
    n->expires_at = std::numeric_limits<int64_t>::min();
    n->load_duration = finished - started;
    n->keep_until = AddSaturated(finished, error_ttl);
  }
  n->mutable_extras().error = error;
  n->mutable_extras().error_until = AddSaturated(finished, error_ttl);
  return n;
}

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ENTRY_H_
