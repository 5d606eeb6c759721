// File: tests/fuzz/model.h
// -----------------------------------------------------------------------------
// A reference model of a `paddock::Cache<std::string, std::string, P>` used by
// one thread with a ManualClock, a ManualExecutor (that can drop its queue),
// `wait_timeout = 0` and one shard. The fuzz target (cache_fuzz.cc) applies
// every operation to the cache and to the model and compares what comes back:
// values and errors, stats, size, loads in flight, queued refreshes, loader
// calls and the clock.
//
// The model is written from the documented contract (cache.h, options.h,
// policy.h, docs/design.md), as plain sequential code: where an entry's
// timestamps come from, when a value is served, served stale, served while
// refreshed, or loaded; coalescing, negative caching, stale fallbacks, load
// slots (with a queued refresh's reservation, which a load may take) and
// max_load_age; what Put, Invalidate and InvalidateAll do to a load
// in flight; a background refresh still queued on the executor claimed and
// run by a caller that needs the value. Two things it borrows instead of
// restating:
//  - the eviction order, `internal::Sieve` (unit tested on its own), fed the
//    same sequence of operations as the cache (SIEVE's choice, its hand also
//    stopping at an entry past its keep_until and error_until);
//  - `paddock::Random`, the documented SplitMix64 stream, drawn from exactly
//    where the policies' documentation says they draw.
//
// Single-threaded, every load runs to its end inside the call that started
// it, except a background refresh, which waits on the executor's queue until
// the harness runs or drops it, or until a caller that needs the value claims
// it and runs it at once. So no caller ever waits for a load: the coalesced
// wait (which would end at wait_timeout = 0 with a kept stale value or
// DeadlineExceeded) is written down but cannot happen. Messages of errors the
// cache makes itself are not modelled, only codes.

#ifndef PADDOCK_TESTS_FUZZ_MODEL_H_
#define PADDOCK_TESTS_FUZZ_MODEL_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddock/internal/sieve.h"
#include "paddock/policy.h"
#include "paddock/stats.h"

namespace paddock::fuzz {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kLongAgo = std::numeric_limits<int64_t>::min();

// `d` in nanoseconds, saturated; infinite durations are "never".
inline int64_t Nanos(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return kNever;
  if (d == -absl::InfiniteDuration()) return kLongAgo;
  return absl::ToInt64Nanoseconds(d);
}

// `t + d` on nanosecond timestamps, saturated.
inline int64_t After(int64_t t, absl::Duration d) {
  const int64_t n = Nanos(d);
  int64_t sum;
  if (__builtin_add_overflow(t, n, &sum)) return n > 0 ? kNever : kLongAgo;
  return sum;
}

// What the loader does, as the fuzz target's loader does it.
enum class LoaderMode { kValue, kError, kThrowStd, kThrowOther };

// A stored value's schedule, in durations from the end of its load.
struct Schedule {
  absl::Duration fresh;     // Then stale.
  absl::Duration quiet;     // Served without asking the policy.
  absl::Duration keep;      // Never served after.
  absl::Duration on_error;  // Served instead of a failed load's error.
};

enum class Verdict { kServe, kServeAndRefresh, kLoad };

// What a policy knows of a stored value.
struct Seen {
  int64_t expires_at;
  int64_t load_duration;
  bool refreshing;
};

// The four policies, from their documentation in policy.h.

// NaiveJitter: the ttl times a factor drawn uniformly from
// [1 - jitter, 1 + jitter], one draw per stored value (none at jitter 0).
inline Schedule ScheduleOf(const NaiveJitter& p, absl::Duration ttl,
                           absl::Duration, Random& rng) {
  const double factor =
      p.jitter == 0 ? 1.0
                    : 1.0 - p.jitter + 2.0 * p.jitter * rng.UniformOpenClosed();
  const absl::Duration life = ttl * factor;
  return {life, life, life, life};
}
inline Verdict Judge(const NaiveJitter&, const Seen& s, int64_t now, Random&) {
  return now < s.expires_at ? Verdict::kServe : Verdict::kLoad;
}

// SingleFlight: fresh for ttl, then loaded; kept one more ttl as the answer
// to a wait that times out.
inline Schedule ScheduleOf(const SingleFlight&, absl::Duration ttl,
                           absl::Duration, Random&) {
  return {ttl, ttl, 2 * ttl, ttl};
}
inline Verdict Judge(const SingleFlight&, const Seen& s, int64_t now, Random&) {
  return now < s.expires_at ? Verdict::kServe : Verdict::kLoad;
}

// XFetch: a hit with time left τ refreshes when Δ·β·(−ln U) ≥ τ; no draw
// while τ > Δ·β·kCap (the quiet window), none with a refresh running or
// Δ = 0.
inline Schedule ScheduleOf(const XFetch& p, absl::Duration ttl,
                           absl::Duration load_duration, Random&) {
  absl::Duration quiet = ttl - load_duration * (p.beta * XFetch::kCap);
  if (quiet < absl::ZeroDuration()) quiet = absl::ZeroDuration();
  return {ttl, quiet, 2 * ttl, ttl};
}
inline Verdict Judge(const XFetch& p, const Seen& s, int64_t now, Random& rng) {
  const absl::Duration left =
      absl::FromUnixNanos(s.expires_at) - absl::FromUnixNanos(now);
  if (left <= absl::ZeroDuration()) return Verdict::kLoad;
  if (s.refreshing || s.load_duration <= 0) return Verdict::kServe;
  const double scale =
      absl::ToDoubleSeconds(absl::Nanoseconds(s.load_duration)) * p.beta;
  const double tau = absl::ToDoubleSeconds(left);
  if (tau > scale * XFetch::kCap) return Verdict::kServe;
  return scale * -std::log(rng.UniformOpenClosed()) >= tau
             ? Verdict::kServeAndRefresh
             : Verdict::kServe;
}

// SoftTtl: fresh for ttl, served stale while refreshed for stale_for, kept
// for the longer of stale_for and stale_if_error, served instead of errors
// for stale_if_error.
inline Schedule ScheduleOf(const SoftTtl& p, absl::Duration ttl, absl::Duration,
                           Random&) {
  return {ttl, ttl, ttl + std::max(p.stale_for, p.stale_if_error),
          ttl + p.stale_if_error};
}
// The window is exact (absl::Time resolution), not rounded to nanoseconds.
inline Verdict Judge(const SoftTtl& p, const Seen& s, int64_t now, Random&) {
  if (now < s.expires_at) return Verdict::kServe;
  if (absl::FromUnixNanos(now) <
      absl::FromUnixNanos(s.expires_at) + p.stale_for) {
    return Verdict::kServeAndRefresh;
  }
  return Verdict::kLoad;
}

struct ModelOptions {
  absl::Duration ttl;
  size_t max_entries;
  absl::Duration error_ttl;
  int max_concurrent_loads;
  absl::Duration max_load_age;
  uint64_t seed;
};

template <typename P>
class CacheModel {
 public:
  CacheModel(const ModelOptions& options, P policy, int64_t now)
      : options_(options),
        policy_(std::move(policy)),
        max_load_age_(Nanos(options.max_load_age)),
        rng_(options.seed),
        now_(now) {}

  ~CacheModel() {
    std::vector<Entry*> all;
    for (auto& [key, entry] : table_) all.push_back(entry.get());
    for (Entry* e : all) Unlink(e);
  }

  CacheModel(const CacheModel&) = delete;
  CacheModel& operator=(const CacheModel&) = delete;

  // ---- The cache's operations -------------------------------------------

  absl::StatusOr<std::string> Get(const std::string& key) {
    if (Entry* e = Find(key); e != nullptr) {
      if (now_ < e->quiet_until) {  // The hit path: no policy call.
        e->visited = true;
        ++stats_.hits;
        return *e->value;
      }
      Answer a = Examine(e);
      if (a.result.has_value()) {
        if (a.refresh) StartRefresh(key, e);
        return *a.result;
      }
    }
    return GetSlow(key);
  }

  std::optional<std::string> GetIfPresent(const std::string& key) {
    Entry* e = Find(key);
    if (e == nullptr || !e->value.has_value()) return std::nullopt;
    if (now_ < e->keep_until &&
        (now_ < e->quiet_until ||
         Judge(policy_, SeenOf(e), now_, rng_) != Verdict::kLoad)) {
      e->visited = true;
      return *e->value;
    }
    if (now_ < e->error_until && now_ < e->on_error_until) return *e->value;
    return std::nullopt;
  }

  void Put(const std::string& key, const std::string& value) {
    in_flight_.erase(key);  // Its result must not overwrite this value.
    last_write_[key] = ++writes_;
    Entry* current = Find(key);
    Entry* e =
        NewEntry(key, current != nullptr ? current->load_duration : 0, now_);
    e->value = value;
    Store(current, e, now_);
  }

  void Invalidate(const std::string& key) {
    in_flight_.erase(key);
    last_write_[key] = ++writes_;
    if (Entry* e = Find(key); e != nullptr) Unlink(e);
  }

  void InvalidateAll() {
    in_flight_.clear();
    last_clear_ = ++writes_;
    std::vector<Entry*> all;
    for (auto& [key, entry] : table_) all.push_back(entry.get());
    for (Entry* e : all) Unlink(e);
  }

  // ---- The executor ------------------------------------------------------

  // A refresh a caller claimed meanwhile has run already: its task does
  // nothing.
  bool RunOne() {
    if (queue_.empty()) return false;
    const Task task = queue_.front();
    queue_.pop_front();
    if (Claim(*task.flight)) {
      // Nobody can have joined it (no caller waits here): without a slot it
      // is skipped, and its entry is refreshable again.
      const uint64_t slot = RestartSlot(task.flight->slot);
      if (slot == kNoSlot) {
        SkipRefresh(task.key, task.flight.get());
      } else {
        RunLoad(task.key, task.flight.get(), /*refresh=*/true, 0, slot);
      }
    }
    return true;
  }

  size_t RunAll() {
    size_t ran = 0;
    while (RunOne()) ++ran;
    return ran;
  }

  // A dropped refresh releases its slot and ends its load, Cancelled; one a
  // caller claimed meanwhile has run already and is left alone.
  size_t DropAll() {
    const size_t dropped = queue_.size();
    while (!queue_.empty()) {
      const Task task = queue_.front();
      queue_.pop_front();
      if (!Claim(*task.flight)) continue;
      ReleaseSlot(task.flight->slot);
      Finish(task.key, task.flight.get(), 0, /*refresh=*/true,
             absl::CancelledError("refresh task dropped"),
             /*loader_ran=*/false, now_, now_);
    }
    return dropped;
  }

  // ---- The world ---------------------------------------------------------

  void Advance(int64_t nanos) { now_ += nanos; }
  void set_loader_mode(LoaderMode mode) { mode_ = mode; }
  void set_load_nanos(int64_t nanos) { load_nanos_ = nanos; }

  // ---- What the harness compares -----------------------------------------

  int64_t now() const { return now_; }
  size_t size() const { return table_.size(); }
  size_t loads_in_flight() const { return in_flight_.size(); }
  size_t pending() const { return queue_.size(); }
  uint64_t loader_calls() const { return loader_calls_; }
  Stats stats() const {
    Stats s = stats_;
    s.total_load_time = absl::Nanoseconds(load_time_);
    return s;
  }

  // The entries and loads, for a failure report.
  std::string Describe() const {
    std::string out = absl::StrCat("now=", now_, " writes=", writes_, "\n");
    for (const auto& [key, e] : table_) {
      absl::StrAppend(
          &out, "  ", key, ": ",
          e->value.has_value() ? *e->value : "(no value)",
          " error=", e->error.ToString(), " loaded=", e->loaded_at,
          " quiet=", e->quiet_until, " expires=", e->expires_at,
          " keep=", e->keep_until, " on_error=", e->on_error_until,
          " error_until=", e->error_until, " load_duration=", e->load_duration,
          " refreshing=", e->refreshing, " visited=", e->visited.load(), "\n");
    }
    for (const auto& [key, f] : in_flight_) {
      absl::StrAppend(&out, "  in flight: ", key, " #", f->id,
                      f->queued ? " queued" : " running", " since ",
                      f->started_at, "\n");
    }
    for (const Task& t : queue_) {
      absl::StrAppend(&out, "  refresh task: ", t.key, " #", t.flight->id,
                      t.flight->queued ? " queued" : " claimed",
                      " slot=", t.flight->slot, "\n");
    }
    for (const auto& [ticket, at] : slots_) {
      absl::StrAppend(&out, "  slot ", ticket, " since ", at.since,
                      at.reserved ? " reserved" : "", "\n");
    }
    return out;
  }

  // Whether the model met a situation it cannot decide (two load slots
  // taken at the same instant competing to be written off); the harness
  // avoids it and checks it never happened.
  bool ambiguous() const { return ambiguous_; }

 private:
  struct Entry {
    std::string key;
    std::optional<std::string> value;  // Empty in a remembered error.
    absl::Status error;
    int64_t loaded_at = 0;
    int64_t quiet_until = kLongAgo;
    int64_t expires_at = 0;
    int64_t keep_until = 0;
    int64_t on_error_until = 0;
    int64_t error_until = kLongAgo;
    int64_t load_duration = 0;
    bool refreshing = false;  // One background refresh per stored value.
    // Answers nobody after this: its value is past keep_until, a remembered
    // error past error_until. SIEVE's hand takes it then, visited or not.
    int64_t evict_after() const { return std::max(keep_until, error_until); }
    // What internal::Sieve needs.
    std::atomic<bool> visited{false};
    Entry* older = nullptr;
    Entry* newer = nullptr;
  };

  // A coalesced load registered for its key. A background refresh's flight
  // is shared by its registration and its task, and is queued until someone
  // claims it: the task when the executor runs or drops it, or a caller that
  // needs the value first.
  struct Flight {
    uint64_t id;
    int64_t started_at;  // When registered or, once claimed, when claimed.
    bool queued = false;
    uint64_t slot = 0;  // A refresh's, taken when it was scheduled.
  };

  struct Task {
    std::string key;
    std::shared_ptr<Flight> flight;
  };

  // What a stored entry answers without a load.
  struct Answer {
    std::optional<absl::StatusOr<std::string>> result;
    bool refresh = false;
  };

  // One load's result for its callers.
  struct Outcome {
    absl::StatusOr<std::string> value;
    bool stale = false;
  };

  static constexpr uint64_t kNoSlot = 0;
  static constexpr uint64_t kUnlimitedSlot = ~uint64_t{0};

  Entry* Find(const std::string& key) const {
    auto it = table_.find(key);
    return it == table_.end() ? nullptr : it->second.get();
  }

  Seen SeenOf(const Entry* e) const {
    return {e->expires_at, e->load_duration, e->refreshing};
  }

  // A stored value is served while kept and the policy does not ask for a
  // load; a remembered error answers until error_until, with the value
  // instead while the value may stand in for errors.
  Answer Examine(Entry* e) {
    if (e->value.has_value() && now_ < e->keep_until) {
      const Verdict v = now_ < e->quiet_until
                            ? Verdict::kServe
                            : Judge(policy_, SeenOf(e), now_, rng_);
      if (v != Verdict::kLoad) {
        e->visited = true;
        // One refresh per value, and none while a failure is remembered.
        const bool refresh = v == Verdict::kServeAndRefresh &&
                             now_ >= e->error_until && !e->refreshing;
        if (refresh) e->refreshing = true;
        if (now_ < e->expires_at) {
          ++stats_.hits;
        } else {
          ++stats_.stale_hits;
        }
        return {*e->value, refresh};
      }
    }
    if (now_ < e->error_until) {
      if (e->value.has_value() && now_ < e->on_error_until) {
        ++stats_.stale_fallbacks;
        return {*e->value, false};
      }
      ++stats_.negative_hits;
      return {absl::StatusOr<std::string>(e->error), false};
    }
    return {};
  }

  absl::StatusOr<std::string> GetSlow(const std::string& key) {
    // The cache looks again under its lock; alone, it sees the same.
    Entry* e = Find(key);
    if (e != nullptr) {
      Answer a = Examine(e);
      if (a.result.has_value()) {
        if (a.refresh) StartRefresh(key, e);
        return *a.result;
      }
    }
    ++stats_.misses;
    std::shared_ptr<Flight> flight;
    uint64_t writes_seen = 0;
    if constexpr (P::kCoalesceLoads) {
      auto it = in_flight_.find(key);
      if (it != in_flight_.end() && Live(*it->second)) {
        if (Claim(*it->second)) {
          // A refresh still queued: this caller runs it now, with its slot
          // (or, if a load took that, any it can take), storing as a refresh
          // does, and is answered as a foreground caller. Its task will find
          // it done.
          flight = it->second;
          uint64_t slot = RestartSlot(flight->slot);
          if (slot == kNoSlot) slot = TakeSlot(Take::kLoad);
          if (slot == kNoSlot) {
            return Serve(Finish(key, flight.get(), 0, /*refresh=*/true,
                                absl::DeadlineExceededError(""),
                                /*loader_ran=*/false, now_, now_));
          }
          return Serve(RunLoad(key, flight.get(), /*refresh=*/true, 0, slot));
        }
        // Joins a load that cannot finish while we wait: wait_timeout = 0.
        ++stats_.coalesced_waits;
        ++stats_.wait_timeouts;
        Entry* kept = Find(key);
        if (kept != nullptr && kept->value.has_value() &&
            now_ < kept->keep_until) {
          ++stats_.stale_fallbacks;
          return *kept->value;
        }
        return absl::DeadlineExceededError("");
      }
      flight = NewFlight(key);  // None, or one older than max_load_age.
    } else {
      writes_seen = writes_;
    }
    const uint64_t slot = TakeSlot(Take::kLoad);
    if (slot == kNoSlot) {
      return Serve(Finish(key, flight.get(), writes_seen, /*refresh=*/false,
                          absl::DeadlineExceededError(""),
                          /*loader_ran=*/false, now_, now_));
    }
    return Serve(
        RunLoad(key, flight.get(), /*refresh=*/false, writes_seen, slot));
  }

  void StartRefresh(const std::string& key, Entry* e) {
    auto it = in_flight_.find(key);
    if (it != in_flight_.end() && Live(*it->second)) {
      return;  // One load per key; it replaces `e` when it stores.
    }
    const uint64_t slot = TakeSlot(Take::kReservation);
    if (slot == kNoSlot) {
      e->refreshing = false;  // Tried again on a later hit.
      ++stats_.refreshes_skipped;
      return;
    }
    ++stats_.refreshes;
    std::shared_ptr<Flight> flight = NewFlight(key);
    flight->queued = true;
    flight->slot = slot;
    queue_.push_back({key, std::move(flight)});
  }

  // Registers a new load of `key`, replacing any registered one (which then
  // stores nothing).
  std::shared_ptr<Flight> NewFlight(const std::string& key) {
    auto flight = std::make_shared<Flight>(Flight{++flights_, now_});
    in_flight_.insert_or_assign(key, flight);
    return flight;
  }

  // A registered load blocks its key (is joined, or claimed, rather than
  // replaced) while queued, which it cannot stay forever, or younger than
  // max_load_age.
  bool Live(const Flight& f) const {
    return f.queued || now_ - f.started_at < max_load_age_;
  }

  // Takes a queued refresh to run it from now on; false if it was claimed
  // already.
  bool Claim(Flight& f) {
    if (!f.queued) return false;
    f.queued = false;
    f.started_at = now_;
    return true;
  }

  // Whether Put, Invalidate or InvalidateAll touched `key` since `writes`.
  bool WrittenSince(const std::string& key, uint64_t writes) const {
    auto it = last_write_.find(key);
    return last_clear_ > writes ||
           (it != last_write_.end() && it->second > writes);
  }

  absl::StatusOr<std::string> CallLoader(const std::string& key) {
    const uint64_t call = ++loader_calls_;
    now_ += load_nanos_;  // The loader takes its time on the clock.
    switch (mode_) {
      case LoaderMode::kValue:
        break;
      case LoaderMode::kError:
        return absl::UnavailableError(absl::StrCat("backend down: ", key));
      case LoaderMode::kThrowStd:
        return absl::InternalError(absl::StrCat("disk on fire: ", key));
      case LoaderMode::kThrowOther:
        return absl::InternalError("not a std::exception");
    }
    return absl::StrCat(key, "#", call);
  }

  // Calls the loader and finishes the load; `refresh`: stores as a refresh
  // does.
  Outcome RunLoad(const std::string& key, const Flight* flight, bool refresh,
                  uint64_t writes_seen, uint64_t slot) {
    ++stats_.loads;
    const int64_t started = now_;
    absl::StatusOr<std::string> result = CallLoader(key);
    const int64_t finished = now_;
    ReleaseSlot(slot);
    load_time_ += finished - started;
    if (!result.ok()) ++stats_.load_failures;
    return Finish(key, flight, writes_seen, refresh, std::move(result),
                  /*loader_ran=*/true, started, finished);
  }

  absl::StatusOr<std::string> Serve(const Outcome& outcome) {
    if (outcome.stale) ++stats_.stale_fallbacks;
    return outcome.value;
  }

  // A load stores its result only if it is still the key's registered load
  // (coalescing) or no write touched its key since it began (otherwise).
  Outcome Finish(const std::string& key, const Flight* flight,
                 uint64_t writes_seen, bool refresh,
                 absl::StatusOr<std::string> result, bool loader_ran,
                 int64_t started, int64_t finished) {
    Outcome outcome{std::move(result), false};
    bool own;
    if (flight != nullptr) {
      auto it = in_flight_.find(key);
      own = it != in_flight_.end() && it->second.get() == flight;
      if (own) in_flight_.erase(it);
    } else {
      own = !WrittenSince(key, writes_seen);
    }
    Entry* current = Find(key);
    if (outcome.value.ok()) {
      if (own) {
        Entry* e = NewEntry(key, finished - started, finished);
        e->value = *outcome.value;
        Store(current, e, finished);
      }
      return outcome;
    }
    const bool has_value = current != nullptr && current->value.has_value();
    // The callers of this load get the stale value instead of the error.
    const bool fallback = has_value && finished < current->on_error_until;
    // A failed refresh never takes away the value it was refreshing.
    const bool keep_value = fallback || (has_value && refresh);
    const bool remember =
        own && loader_ran && options_.error_ttl > absl::ZeroDuration();
    std::optional<std::string> stale_value;
    if (fallback) stale_value = current->value;
    if (remember) {
      auto e = std::make_unique<Entry>();
      e->key = key;
      if (keep_value) {
        e->value = current->value;
        e->quiet_until = current->quiet_until;
        e->loaded_at = current->loaded_at;
        e->expires_at = current->expires_at;
        e->keep_until = current->keep_until;
        e->on_error_until = current->on_error_until;
        e->load_duration = current->load_duration;
      } else {
        e->loaded_at = finished;
        e->expires_at = kLongAgo;
        e->load_duration = finished - started;
        e->keep_until = After(finished, options_.error_ttl);
      }
      e->error = outcome.value.status();
      e->error_until = After(finished, options_.error_ttl);
      Store(current, e.release(), finished);
    } else if (own && current != nullptr) {
      current->refreshing = false;  // Never wedged by one failure.
    }
    if (stale_value.has_value()) outcome = {*std::move(stale_value), true};
    return outcome;
  }

  Entry* NewEntry(const std::string& key, int64_t load_duration, int64_t now) {
    const Schedule s = ScheduleOf(policy_, options_.ttl,
                                  absl::Nanoseconds(load_duration), rng_);
    auto* e = new Entry;
    e->key = key;
    e->loaded_at = now;
    e->load_duration = load_duration;
    e->quiet_until = After(now, s.quiet);
    e->expires_at = After(now, s.fresh);
    e->keep_until = After(now, s.keep);
    e->on_error_until = After(now, s.on_error);
    return e;
  }

  // Stores `e` (owned from here on) in place of `current`, or as a new entry,
  // evicting SIEVE's choice, where the hand also stops at an entry the
  // policy never serves again, visited or not. An entry served stale is
  // live.
  void Store(Entry* current, Entry* e, int64_t now) {
    if (current != nullptr) {
      sieve_.Replace(current, e);
      table_[e->key].reset(e);  // Frees `current`.
      return;
    }
    while (table_.size() >= options_.max_entries) {
      Entry* victim = sieve_.Victim(
          [now](const Entry* v) { return v->evict_after() <= now; });
      if (victim == nullptr) break;
      Unlink(victim);
      ++stats_.evictions;
    }
    sieve_.Push(e);
    table_[e->key].reset(e);
  }

  void Unlink(Entry* e) {
    sieve_.Remove(e);
    table_.erase(e->key);  // Frees `e`.
  }

  // A queued refresh that found no slot when it was to start: it ends, and
  // its entry (if the refresh is still the key's load) is refreshable.
  void SkipRefresh(const std::string& key, const Flight* flight) {
    ++stats_.refreshes_skipped;
    auto it = in_flight_.find(key);
    if (it == in_flight_.end() || it->second.get() != flight) return;
    in_flight_.erase(it);
    if (Entry* e = Find(key); e != nullptr) e->refreshing = false;
  }

  // Load slots: `max_concurrent_loads` at once. A slot a running load holds
  // longer than max_load_age stops counting against the limit. A refresh
  // reserves one when it is queued; a reservation never ages, and a load
  // that finds no slot free takes the newest one.
  enum class Take { kLoad, kReservation, kStart };
  uint64_t TakeSlot(Take take) {
    if (options_.max_concurrent_loads == 0) return kUnlimitedSlot;
    if (slots_.size() >= static_cast<size_t>(options_.max_concurrent_loads)) {
      auto oldest = slots_.end();
      auto newest_reserved = slots_.end();
      int ties = 0;
      for (auto it = slots_.begin(); it != slots_.end(); ++it) {
        if (it->second.reserved) {
          newest_reserved = it;  // Tickets ascend.
        } else if (oldest == slots_.end() ||
                   it->second.since < oldest->second.since) {
          oldest = it;
          ties = 0;
        } else if (it->second.since == oldest->second.since) {
          ++ties;
        }
      }
      if (oldest != slots_.end() &&
          now_ - oldest->second.since >= max_load_age_) {
        if (ties > 0) ambiguous_ = true;
        slots_.erase(oldest);
      } else if (take == Take::kLoad && newest_reserved != slots_.end()) {
        slots_.erase(newest_reserved);
      } else {
        return kNoSlot;
      }
    }
    const uint64_t ticket = ++slot_tickets_;
    slots_.emplace(ticket, SlotHolder{now_, take == Take::kReservation});
    return ticket;
  }

  // A refresh starts: its reservation, running from now, or if a load took
  // it, a free slot (never another reservation), or kNoSlot.
  uint64_t RestartSlot(uint64_t slot) {
    if (slot == kUnlimitedSlot) return slot;
    if (auto it = slots_.find(slot); it != slots_.end()) {
      it->second = {now_, false};
      return slot;
    }
    return TakeSlot(Take::kStart);
  }

  void ReleaseSlot(uint64_t slot) {
    if (slot != kUnlimitedSlot) slots_.erase(slot);
  }

  const ModelOptions options_;
  const P policy_;
  const int64_t max_load_age_;
  Random rng_;
  int64_t now_;

  std::map<std::string, std::unique_ptr<Entry>> table_;
  internal::Sieve<Entry> sieve_;
  std::map<std::string, std::shared_ptr<Flight>> in_flight_;
  uint64_t flights_ = 0;
  // Writes are numbered; a key's last one, and the last InvalidateAll.
  uint64_t writes_ = 0;
  std::map<std::string, uint64_t> last_write_;
  uint64_t last_clear_ = 0;
  std::deque<Task> queue_;
  struct SlotHolder {
    int64_t since;  // Taken, or (reserved) started, at.
    bool reserved;  // By a queued refresh.
  };
  std::map<uint64_t, SlotHolder> slots_;  // By ticket.
  uint64_t slot_tickets_ = 0;
  bool ambiguous_ = false;

  LoaderMode mode_ = LoaderMode::kValue;
  int64_t load_nanos_ = 0;
  uint64_t loader_calls_ = 0;

  Stats stats_;
  int64_t load_time_ = 0;
};

}  // namespace paddock::fuzz

#endif  // PADDOCK_TESTS_FUZZ_MODEL_H_
