// File: paddock/options.h
// -----------------------------------------------------------------------------
// `paddock::Options`: the settings of a cache that do not depend on its policy,
// and their validation.

#ifndef PADDOCK_OPTIONS_H_
#define PADDOCK_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddock/clock.h"
#include "paddock/executor.h"
#include "paddock/listener.h"
#include "paddock/shared_tier.h"

namespace paddock {

// Options
//
// An aggregate: set what you need with designated initializers,
// `paddock::Options{.ttl = absl::Seconds(10)}`. The raw pointers are not
// owned; what they point to must outlive the cache.
struct Options {
  // How long a loaded value is fresh, counted from the end of its load. The
  // policy may vary it per entry (NaiveJitter) or serve it longer (SoftTtl).
  absl::Duration ttl = absl::Seconds(10);

  // The cache never holds more entries than this (cached errors included).
  size_t max_entries = 65536;

  // Number of independently locked shards; 0 picks one from the number of
  // CPUs (at most 256). Never more than `max_entries`. At most `kMaxShards`:
  // every shard is made with the cache (about 530 bytes each, so 65536 take
  // 35 MB), and INT_MAX would be a terabyte.
  int shards = 0;
  static constexpr int kMaxShards = 65536;

  // How long a caller waits for a load another caller started before it gets
  // a stale value (if one may be served) or `absl::DeadlineExceededError`. 0
  // means never wait. Measured on the real monotonic clock: a waiting thread
  // waits in real time whatever `clock` says.
  absl::Duration wait_timeout = absl::Seconds(5);

  // The time source for expiry and load durations; nullptr is
  // `SystemClock::Get()`.
  Clock* clock = nullptr;

  // Runs background refreshes; nullptr is a small pool owned by the cache and
  // started on the first refresh.
  Executor* executor = nullptr;

  // Seeds every random choice (jitter, early refresh), so a run with a fixed
  // seed and a ManualClock repeats exactly; 0 draws a random seed. Each
  // thread draws from a stream of its own (paddock/random.h), chosen by the
  // order in which threads first used paddock: a repeat must make its calls
  // on the same threads, started in the same order.
  uint64_t seed = 0;

  // How long a failed load is remembered: callers within it get the same error
  // without calling the loader. 0 turns negative caching off.
  absl::Duration error_ttl = absl::ZeroDuration();

  // The most loader calls the cache runs at once, foreground and background
  // together; 0 means no limit. A slot is held only while this process's
  // loader runs (with `shared`, never while waiting for another process's
  // fill). A caller that needs a load waits for a slot within
  // `wait_timeout`; a background refresh that finds none is skipped and
  // tried again on a later hit. A refresh reserves its slot when it is queued
  // on the executor; a load that finds no slot free takes such a reservation
  // rather than wait behind a refresh that has not started (the refresh is
  // then skipped if no slot is free when it starts). At most
  // `kMaxConcurrentLoadsLimit`: the slots are made with the cache.
  int max_concurrent_loads = 0;
  static constexpr int kMaxConcurrentLoadsLimit = 65536;

  // A load running longer than this stops blocking its key: the next caller
  // that needs the key starts a fresh load (nginx's proxy_cache_lock_age), and
  // the old load's result, when it comes, goes only to its own waiters. Bounds
  // how long one hung loader can make a key unusable for blocking callers.
  // A `GetAsync` miss is not started beside a load hung on an executor
  // thread (it waits for it, within `wait_timeout`), so that one hung key
  // cannot take the executor's every thread.
  // `absl::InfiniteDuration()` turns the bound off.
  absl::Duration max_load_age = absl::Seconds(30);

  // Receives events (loads, stale serves, waits, evictions); nullptr costs
  // nothing.
  Listener* listener = nullptr;

  // The tier the caches of several processes share (`paddock/redis.h`), so
  // that a fleet loads a key once per expiry; nullptr: this process only.
  // Owned jointly. Needs `paddock::Codec<V>` with Encode and Decode and an
  // encodable K (`paddock/codec.h`); the cache constructor throws
  // `std::invalid_argument` otherwise. The hit path never touches it: only
  // the one caller per process that would load asks it (docs/fleet.md).
  std::shared_ptr<SharedTier> shared = nullptr;

  // Options::Validate()
  //
  // Returns OK, or `InvalidArgumentError` naming the first field out of range
  // and the value given.
  absl::Status Validate() const;
};

}  // namespace paddock

#endif  // PADDOCK_OPTIONS_H_
