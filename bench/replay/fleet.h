// File: bench/replay/fleet.h
// -----------------------------------------------------------------------------
// `--pods=N`: the server as N processes forked from the replay, the way the
// pods of a deployment share a node. Each pod has its own worker pool, cache,
// refresh threads and connection pool; all of them run on the server CPU
// (they inherit the replay's pinning). The load generator, in the replay's
// own process, spreads the requests over them round-robin, one pipe per pod.
// The metrics (RunMetrics) and the control below live in a SharedArena, so
// the fleet is measured as one and steered through shared memory.
//
// A run: Fork -> every pod kReady -> requests -> CloseRequests -> (drain)
// -> phase kCollect: pods publish their caches' counters -> abort, phase
// kStop: pods stop their servers and exit -> Reap.

#ifndef PADDOCK_BENCH_REPLAY_FLEET_H_
#define PADDOCK_BENCH_REPLAY_FLEET_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metrics.h"
#include "server.h"

namespace paddock::replay {

// What the replay's process and its pods tell each other. In a SharedArena.
struct FleetControl {
  enum Phase : int { kServe, kCollect, kStop };
  enum PodState : int { kStarting, kReady, kFailed, kCollected, kStopped };

  // Set by the replay's process; the pods poll it.
  std::atomic<int> phase{kServe};
  // Set when the run is over: loads and waits in every pod return early.
  std::atomic<bool> abort{false};

  struct Pod {
    std::atomic<int> state{kStarting};
    // Written by the pod before it sets kCollected.
    PolicyResult::CacheCounters cache;
    // Written by the pod before it sets kFailed.
    char error[512] = {};
  };
  std::array<Pod, kMaxPods> pods;

  // In pod `pod`: records why it cannot serve and sets kFailed.
  void Fail(int pod, const absl::Status& status);

  // Waits until every one of the first `count` pods has reached `state`,
  // until `deadline`. Returns an error with the first failed pod's message,
  // or DeadlineExceeded.
  absl::Status AwaitPods(int count, int state, absl::Time deadline) const;
};

// Fleet
//
// The replay's side of the pods. Not thread-safe, with one exception:
// `Submit` (the generator) and `CpuNanos` (the sampler) may each run on a
// thread of their own.
class Fleet {
 public:
  // What a pod runs, in its own process: returns its exit code.
  // `requests_fd` is the read end of its pipe.
  using PodMain = absl::FunctionRef<int(int pod, int requests_fd)>;

  // Fleet::Fork()
  //
  // Forks `pods` processes; pod i runs `pod_main(i, fd)` and exits with its
  // result (without running exit handlers). Call with no other thread
  // running in this process: a forked process has only the forking thread.
  // A pod dies with the replay (PR_SET_PDEATHSIG).
  static absl::StatusOr<std::unique_ptr<Fleet>> Fork(int pods,
                                                     PodMain pod_main);

  // Closes the pipes, then kills and reaps the pods still running.
  ~Fleet();

  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  int pods() const { return static_cast<int>(pids_.size()); }

  // Sends request `index` to pod `index % pods()`. One thread at a time.
  void Submit(int64_t index, const Request& request);

  // Closes the pipes: each pod reads to the end, then sees EOF. Idempotent.
  void CloseRequests();

  // Returns the CPU time the pods have consumed, in nanoseconds (a pod gone
  // counts with its last reading). One thread at a time.
  int64_t CpuNanos();

  // Fleet::AwaitPods()
  //
  // `control.AwaitPods` for every pod, which also notices a pod that died:
  // an error naming a failed or dead pod, or DeadlineExceeded.
  absl::Status AwaitPods(const FleetControl& control, int state,
                         absl::Time deadline);

  // Fleet::Reap()
  //
  // Waits until every pod has exited, at most until `deadline` (then kills
  // the rest). Returns an error naming the first pod that exited with a
  // code other than 0 or a signal, or did not exit in time.
  absl::Status Reap(absl::Time deadline);

 private:
  Fleet() = default;

  // Whether pod `i` has exited (reaping it, without blocking).
  bool Poll(size_t i);

  std::vector<pid_t> pids_;
  std::vector<int> fds_;      // Write ends, -1 once closed.
  std::vector<int64_t> cpu_;  // Last CpuNanos reading, per pod.
  std::vector<int> status_;   // Wait status once reaped, else -1.
};

// ServePod()
//
// A pod's life after it has built its server: marks it kReady, feeds the
// requests read from `requests_fd` to `server` until EOF, publishes
// `counters()` when the phase turns kCollect, stops `server` when it turns
// kStop, and marks it kStopped. Returns the pod's exit code.
int ServePod(int pod, int requests_fd, Server& server, FleetControl& control,
             absl::FunctionRef<PolicyResult::CacheCounters()> counters);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_FLEET_H_
