// File: bench/replay/metrics.h
// -----------------------------------------------------------------------------
// What one policy's run measures: per request (latency from the scheduled
// arrival, success), per load of the hot key (loads in flight), per worker
// (busy or idle), per stale serve, per database statement and connection; in
// totals and per second of the run. One `RunMetrics` counts the whole fleet:
// it lives in a `SharedArena` that every pod writes to. Memory is bounded:
// histograms have fixed buckets and the per-second series has a fixed number
// of seconds (later events land in the last one).

#ifndef PADDOCK_BENCH_REPLAY_METRICS_H_
#define PADDOCK_BENCH_REPLAY_METRICS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "histogram.h"
#include "shared_arena.h"

namespace paddock::replay {

// The most pods a run may have (`--pods`).
inline constexpr int kMaxPods = 64;

// How a request ended.
enum class Outcome {
  kOk,          // Answered within the client timeout.
  kError,       // Answered with an error (e.g. a wait for a load timed out).
  kLate,        // Answered, but after the client had given up.
  kDropped,     // Dequeued after its deadline: never started.
  kUnfinished,  // Still queued or running when the run ended.
};

// Latency percentiles in milliseconds.
struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0, max = 0;
};

// One second of a run, as written to the CSV.
struct SecondSummary {
  double time_s = 0;  // Start of the second, from the start of the run.
  uint64_t arrivals = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  double p95_ms = 0;  // Of the requests that ended in this second.
  int64_t loads_in_flight_max = 0;
  int64_t busy_workers_max = 0;  // In the busiest pod.
  uint64_t stale_served = 0;
  // Shares of this second of the server CPU: used by the replay, and busy
  // with other processes (interference); see PolicyResult.
  double server_cpu_replay = 0;
  double server_cpu_other = 0;
  // Most database connections in use at once, over the fleet.
  int64_t db_busy_max = 0;
};

// The result of one policy's run (the JSON's `results` entry).
struct PolicyResult {
  std::string policy;
  uint64_t requests = 0, completed = 0, failed = 0;
  double throughput_rps = 0;
  Percentiles latency;
  struct HotKey {
    uint64_t requests = 0, failed = 0, loads = 0;
    int64_t max_concurrent_loads = 0;
    uint64_t stale_served = 0;
    double max_stale_age_ms = 0;
    Percentiles latency;
  } hot_key;
  // How late the generator issued requests (issued - scheduled): an open
  // loop keeps this near zero; a starved generator bunches arrivals.
  Percentiles generator_lag;
  uint64_t expiries = 0;
  // Mean over the pods of the share of the arrival period each pod spent
  // with at least `saturation_share` of its workers busy.
  double worker_saturation = 0;
  // Most workers busy at once in one pod.
  int64_t max_busy_workers = 0;
  // Shares of the server CPU's time during the run: busy with anything
  // (other processes and hypervisor steal included), and used by the
  // replay's server threads. Their difference is outside interference.
  double server_cpu_busy = 0;
  double server_cpu_replay = 0;
  // The cache's own counters (all zero for the no-cache baseline).
  struct CacheCounters {
    uint64_t hits = 0, stale_hits = 0, misses = 0, loads = 0,
             coalesced_waits = 0, refreshes = 0, wait_timeouts = 0,
             stale_fallbacks = 0;
  } cache;  // Summed over the pods.
  // What the hot key's loads ran against.
  struct Backend {
    std::string kind;      // "cpu" or "postgres".
    uint64_t queries = 0;  // SQL statements run, over the fleet.
    int64_t max_busy = 0;  // Most pool connections in use at once, fleet.
    int pool = 0;          // Connections per pod's pool (0: no database).
    // Shares of the database's CPU during the arrivals: busy with anything,
    // and used by the database's processes; < 0 unknown (not the replay's
    // own server, or no database).
    double cpu_busy = -1;
    double cpu_db = -1;
  } backend;
  struct Fleet {
    int pods = 1;
    std::string shared;  // The shared tier: "none".
    uint64_t loads = 0;  // Loader calls summed over the pods.
  } fleet;
  std::vector<SecondSummary> series;
};

// RunMetrics
//
// Collects one run of the whole fleet. Every `On...` method is thread-safe,
// lock-free and may be called from any process of the fleet; the time
// arguments are `MonotonicNanos()` readings (one clock for all processes).
class RunMetrics {
 public:
  // Lives in `arena`, with its per-second series: construct it there,
  // `arena.New<RunMetrics>(arena, ...)`, before the pods are forked.
  // `seconds`: length of the per-second series. `timeout_nanos`: the client
  // timeout, recorded as the latency of requests that never got an answer in
  // time. `saturated_at`: the number of busy workers of a pod that counts as
  // saturated. `pods`: at most kMaxPods.
  RunMetrics(SharedArena& arena, int seconds, int64_t timeout_nanos,
             int saturated_at, int pods);

  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // The bytes of arena a RunMetrics with `seconds` seconds needs.
  static size_t ArenaBytes(int seconds);

  // Sets time 0 of the run. Call once, before any request is issued.
  void Begin(int64_t start_nanos);
  int64_t start_nanos() const { return start_.load(std::memory_order_relaxed); }

  // A request scheduled at `scheduled` was issued at `issued`.
  void OnArrival(int64_t scheduled, int64_t issued);
  void OnEnd(bool hot, int64_t scheduled, int64_t ended, Outcome outcome);

  // Around every call of the hot key's loader (or rebuild, with no cache).
  void OnLoadStart(int64_t now);
  void OnLoadEnd();
  int64_t loads_in_flight() const {
    return loads_in_flight_.load(std::memory_order_relaxed);
  }

  // Around the handling of every request a worker of pod `pod` dequeues.
  void OnWorkerBusy(int pod, int64_t now);
  void OnWorkerIdle(int pod);

  // Around every use of a database connection, and per SQL statement.
  void OnDbAcquire(int64_t now);
  void OnDbRelease();
  void OnDbQuery();

  // A stale value of the hot key was served; `age` since it was loaded.
  void OnStaleServed(int64_t now, int64_t age_nanos);

  // Called about every millisecond by a sampler: takes the maxima of loads
  // in flight and busy workers for the current second, and the time the
  // workers spend saturated while `counting` (during the arrivals).
  void Sample(int64_t now, bool counting);

  // Records the server CPU's use during the second that holds `at`, from
  // the sampler thread.
  void OnCpuSecond(int64_t at, double replay_share, double other_share);

  // Requests per second that ended in the last full second, and their p95
  // (for the live status line).
  double RecentRate(int64_t now) const;
  double RecentP95Millis(int64_t now) const;
  uint64_t arrivals() const {
    return arrivals_.load(std::memory_order_relaxed);
  }
  // Requests that have ended (answered, failed, dropped or unfinished).
  uint64_t ended() const {
    return completed_.load(std::memory_order_relaxed) +
           failed_.load(std::memory_order_relaxed);
  }

  // Fills everything of `result` but `policy`, `throughput_rps`,
  // `expiries`, `cache`, `backend.kind`, `backend.pool`, `backend.cpu_*`,
  // `fleet.pods` and `fleet.shared`. Call after the sampler stopped.
  void Summarize(PolicyResult& result) const;

 private:
  struct Second {
    std::atomic<uint64_t> arrivals{0}, completed{0}, failed{0}, stale{0};
    std::atomic<int64_t> loads_max{0}, busy_max{0}, db_busy_max{0};
    LatencyHistogram latency;
    // Written by the sampler thread only, read after it stopped.
    double cpu_replay = 0, cpu_other = 0;
  };
  Second& At(int64_t t);
  const Second& At(int64_t t) const;

  std::atomic<int64_t> start_{0};
  const int64_t timeout_;
  const int saturated_at_;
  const int pods_;
  Second* const seconds_;  // In the arena.
  const int num_seconds_;
  std::atomic<int> last_second_{0};  // Highest second index touched.

  std::atomic<uint64_t> arrivals_{0}, completed_{0}, failed_{0};
  std::atomic<uint64_t> hot_requests_{0}, hot_failed_{0}, loads_{0};
  std::atomic<uint64_t> stale_served_{0};
  std::atomic<int64_t> max_stale_age_{0};
  std::atomic<int64_t> loads_in_flight_{0}, max_loads_in_flight_{0};
  std::array<std::atomic<int64_t>, kMaxPods> busy_{};  // Per pod.
  std::atomic<int64_t> max_busy_{0};
  std::atomic<int64_t> db_busy_{0}, max_db_busy_{0};
  std::atomic<uint64_t> db_queries_{0};
  LatencyHistogram latency_;
  LatencyHistogram hot_latency_;
  LatencyHistogram arrival_lag_;

  // Owned by the sampler thread (in the replay's own process).
  int64_t last_sample_ = 0;
  int64_t sampled_nanos_ = 0;
  std::array<int64_t, kMaxPods> saturated_nanos_{};  // Per pod.
};

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_METRICS_H_
