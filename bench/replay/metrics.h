// File: bench/replay/metrics.h
// -----------------------------------------------------------------------------
// What one policy's run measures: per request (latency from the scheduled
// arrival, success), per load of the hot key (loads in flight), per worker
// (busy or idle), per stale serve; in totals and per second of the run.
// Memory is bounded: histograms have fixed buckets and the per-second series
// has a fixed number of seconds (later events land in the last one).

#ifndef PADDOCK_BENCH_REPLAY_METRICS_H_
#define PADDOCK_BENCH_REPLAY_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "histogram.h"

namespace paddock::replay {

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
  int64_t busy_workers_max = 0;
  uint64_t stale_served = 0;
  // Shares of this second of the server CPU: used by the replay, and busy
  // with other processes (interference); see PolicyResult.
  double server_cpu_replay = 0;
  double server_cpu_other = 0;
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
  uint64_t expiries = 0;
  double worker_saturation = 0;
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
  } cache;
  std::vector<SecondSummary> series;
};

// RunMetrics
//
// Collects one run. Every `On...` method is thread-safe and lock-free; the
// time arguments are `MonotonicNanos()` readings.
class RunMetrics {
 public:
  // `start_nanos`: time 0 of the run. `seconds`: length of the per-second
  // series. `timeout_nanos`: the client timeout, recorded as the latency of
  // requests that never got an answer in time. `saturated_at`: the number of
  // busy workers that counts as saturated.
  RunMetrics(int64_t start_nanos, int seconds, int64_t timeout_nanos,
             int saturated_at);

  int64_t start_nanos() const { return start_; }

  void OnArrival(int64_t scheduled);
  void OnEnd(bool hot, int64_t scheduled, int64_t ended, Outcome outcome);

  // Around every call of the hot key's loader (or rebuild, with no cache).
  void OnLoadStart(int64_t now);
  void OnLoadEnd();
  int64_t loads_in_flight() const {
    return loads_in_flight_.load(std::memory_order_relaxed);
  }

  // Around the handling of every request a worker dequeues.
  void OnWorkerBusy(int64_t now);
  void OnWorkerIdle();

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

  // Fills everything of `result` but `policy`, `throughput_rps`,
  // `expiries` and `cache`. Call after the sampler stopped.
  void Summarize(PolicyResult& result) const;

 private:
  struct Second {
    std::atomic<uint64_t> arrivals{0}, completed{0}, failed{0}, stale{0};
    std::atomic<int64_t> loads_max{0}, busy_max{0};
    LatencyHistogram latency;
    // Written by the sampler thread only, read after it stopped.
    double cpu_replay = 0, cpu_other = 0;
  };
  Second& At(int64_t t);
  const Second& At(int64_t t) const;

  const int64_t start_;
  const int64_t timeout_;
  const int saturated_at_;
  std::vector<std::unique_ptr<Second>> seconds_;
  std::atomic<int> last_second_{0};  // Highest second index touched.

  std::atomic<uint64_t> arrivals_{0}, completed_{0}, failed_{0};
  std::atomic<uint64_t> hot_requests_{0}, hot_failed_{0}, loads_{0};
  std::atomic<uint64_t> stale_served_{0};
  std::atomic<int64_t> max_stale_age_{0};
  std::atomic<int64_t> loads_in_flight_{0}, max_loads_in_flight_{0};
  std::atomic<int64_t> busy_{0}, max_busy_{0};
  LatencyHistogram latency_;
  LatencyHistogram hot_latency_;

  // Owned by the sampler thread.
  int64_t last_sample_ = 0;
  int64_t sampled_nanos_ = 0;
  int64_t saturated_nanos_ = 0;
};

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_METRICS_H_
